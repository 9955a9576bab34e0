package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/sampler"
)

// statusBoard holds the status the tick loop last built, for the admin API,
// the metrics and the health endpoints on other goroutines.
type statusBoard struct {
	pub atomic.Pointer[published]
	// stale is set by a tick: the status is built when someone asks (the
	// admin API, a scrape), not twice a second for nobody.
	stale atomic.Bool
}

// Status returns the status published after the last tick or command.
func (d *Daemon) Status() *api.Status {
	if st := d.freshStatus(); st != nil {
		return st
	}
	return &api.Status{Version: d.opts.Version, ConfigSource: d.configSource(), StartedAt: d.started}
}

// statusWait bounds how long a status request waits for the tick loop to
// build the status of the last tick; past it the previous one is returned
// (its updated_at says how old it is), so a busy loop never holds up
// `olcd status`.
const statusWait = 200 * time.Millisecond

// published is the status of the last tick and, beside it, what the
// metrics need that the document carries as text: the ports' keys, in the
// order of st.Ports.
type published struct {
	st   *api.Status
	keys []olc.PortKey
}

// freshStatus returns the status of the last tick, built by the tick loop
// on demand, or the last one built when the loop does not answer within
// statusWait; nil before the first.
func (d *Daemon) freshStatus() *api.Status {
	if p := d.freshPublished(); p != nil {
		return p.st
	}
	return nil
}

// freshPublished is freshStatus with the ports' keys.
func (d *Daemon) freshPublished() *published {
	if d.board.stale.Load() && d.runCtx != nil {
		ctx, cancel := context.WithTimeout(d.runCtx, statusWait)
		_ = d.do(ctx, func() error {
			if d.board.stale.Load() {
				d.publish()
			}
			return nil
		})
		cancel()
	}
	return d.board.pub.Load()
}

// publish builds the status document from the last tick and stores it for
// the admin API.
func (d *Daemon) publish() {
	e := d.eng
	cfg := e.cfg
	r := e.last
	dec := r.decision
	st := &api.Status{
		Version:      d.opts.Version,
		Mode:         cfg.Mode.String(),
		ConfigSource: d.configSource(),
		Overrides:    overrideList(d.conf.overrides),
		IntervalS:    cfg.Interval.Seconds(),
		StaleAfterS:  e.staleAfter().Seconds(),
		Ticks:        e.ticks,
		UpdatedAt:    r.at,
		StartedAt:    d.started,
		Overload: api.OverloadStatus{
			Active:          dec.Overloaded,
			Pressure:        dec.Pressure,
			DropProbability: dec.DropProbability,
			Bound:           cfg.Controller.Bound(),
			Reason:          dec.Reason,
		},
		Unclassified:  r.stats.Unclassified,
		RejectLimited: r.stats.RejectLimited,
	}
	// Lists are [] rather than null when empty, so that clients need not
	// tell the two apart.
	st.Overrides = nonNil(st.Overrides)
	st.Signals, st.Classes, st.Ports = []api.SignalStatus{}, []api.ClassStatus{}, []api.PortStatus{}
	st.Exceptions, st.Interfaces = []string{}, []api.InterfaceStatus{}
	st.ReloadRefused = d.conf.refused
	if s := d.eng.limits.started; s != nil {
		st.RestartPending = restartOnly(s, d.eng.cfg)
	}
	st.LB = d.lb.status()
	if dec.Overloaded && !dec.OverloadSince.IsZero() {
		since := dec.OverloadSince
		st.Overload.Since = &since
	}
	var discoverErr error
	if cfg.PortsAuto {
		discoverErr = e.found.err
	}
	st.Signals = signalStatuses(dec.Signals, &r.snap, e.ports, discoverErr)
	for c := range olc.NumClasses {
		st.Classes = append(st.Classes, api.ClassStatus{Class: c.String(), DropProbability: dec.Classes[c]})
	}
	ctrlPorts := e.ctrl.Config().Ports
	for _, p := range e.ports {
		st.Ports = append(st.Ports, portStatus(p, portSource(cfg), r, ctrlPorts))
	}
	for _, k := range cfg.ExemptPorts() {
		if cfg.ExemptReason(k) == "exceptions.management" {
			st.Exceptions = append(st.Exceptions, k.String()+" (management)")
		} else {
			st.Exceptions = append(st.Exceptions, k.String())
		}
	}
	st.ListenersExempt = exemptListeners(cfg, e.found.listening)
	for _, pfx := range cfg.Exceptions.Sources {
		st.Exceptions = append(st.Exceptions, "from "+pfx.String())
	}
	if e.dp != nil {
		for _, a := range e.dp.Attachments() {
			st.Interfaces = append(st.Interfaces, api.InterfaceStatus{Name: a.Interface, Hook: a.Hook, Mode: a.Mode, Egress: a.Egress})
		}
		st.ResponseTiming = d.flows.status(e.dp, cfg.Datapath.ResponseMinSamples, r.stats, d.log)
	}
	st.InterfacesWaiting = slices.Clone(d.links.waiting)
	d.board.stale.Store(false)
	for _, e := range r.snap.Errors {
		st.SampleErrors = append(st.SampleErrors, fmt.Sprintf("%s: %v", e.Source, e.Err))
	}
	keys := make([]olc.PortKey, len(e.ports))
	for i, p := range e.ports {
		keys[i] = p.Key
	}
	d.board.pub.Store(&published{st: st, keys: keys})
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// signalStatuses is the status's signal list: the controller's signals
// (with threshold and pressure, and why one is unavailable where the
// snapshot tells: unavailableReason) first, then every other signal the
// snapshot has a value for. ports are the protected ports, discoverErr the
// error of ports: auto's last discovery of them (nil: it read them, or the
// ports are configured).
func signalStatuses(states []adaptive.SignalState, snap *olc.Snapshot, ports []loader.PortPolicy, discoverErr error) []api.SignalStatus {
	out := []api.SignalStatus{}
	withThreshold := map[olc.Signal]bool{}
	for _, s := range states {
		withThreshold[s.Signal] = true
		ss := api.SignalStatus{Name: s.Signal.String(), Unit: s.Signal.Unit().String(), Available: s.Available, Corroborated: s.Corroborated}
		th := s.Threshold
		ss.Threshold = &th
		if s.Available {
			v, p := s.Value, s.Pressure
			ss.Value, ss.Pressure = &v, &p
		} else {
			ss.Reason = unavailableReason(s.Signal, snap, ports, discoverErr)
		}
		out = append(out, ss)
	}
	for sig := range olc.NumSignals {
		if withThreshold[sig] {
			continue
		}
		if v, ok := snap.Get(sig); ok {
			out = append(out, api.SignalStatus{Name: sig.String(), Unit: sig.Unit().String(), Available: true, Value: &v})
		}
	}
	return out
}

// unavailableReason says why sig has no value in snap where the snapshot
// (or discoverErr, ports: auto's last discovery) tells, else "".
// accept_queue_fill has none while sock_diag fails, and while no protected
// TCP port has a listener: a service not started yet, or a port this node
// does not serve, which is no fault (no accept queue can fill), so
// OlcdSignalUnavailable leaves it out (docs/alerts.md). Under ports: auto
// a sock_diag that fails leaves no port to sample, so that only the
// discovery's error tells it from a node without listeners.
func unavailableReason(sig olc.Signal, snap *olc.Snapshot, ports []loader.PortPolicy, discoverErr error) string {
	if sig != olc.AcceptQueueFill {
		return ""
	}
	for _, e := range snap.Errors {
		if e.Source == sampler.SourceSockDiag {
			return "sock_diag unreadable (sources unreadable, below)"
		}
	}
	if discoverErr != nil {
		return fmt.Sprintf("sock_diag unreadable (ports: auto cannot list the listeners: %v)", discoverErr)
	}
	const most = 3 // ports named; the rest counted
	var none []string
	n := 0
	for _, p := range ports {
		if _, ok := snap.AcceptQueueFill[p.Key.Port]; p.Key.Proto != olc.ProtoTCP || ok {
			continue
		}
		if n++; n <= most {
			none = append(none, p.Key.String())
		}
	}
	switch {
	case n == 0 && len(snap.AcceptQueueFill) == 0:
		return "no protected TCP port"
	case n == 0:
		return ""
	case n > most:
		none = append(none, fmt.Sprintf("%d more", n-most))
	}
	return "no listener on " + strings.Join(none, ", ")
}

// portStatus is one protected port's entry in the status: its policy p
// (from source), what the last tick r counted and decided for it, and its
// response-target mode as the controller runs it (ctrlPorts; "off" when
// the port is not among them).
func portStatus(p loader.PortPolicy, source string, r tickResult, ctrlPorts []adaptive.PortConfig) api.PortStatus {
	secs := r.interval.Seconds()
	rate := func(n uint64) float64 {
		if secs <= 0 {
			return 0
		}
		return float64(n) / secs
	}
	share := func(n, of uint64) float64 {
		if of == 0 {
			return 0
		}
		return float64(n) / float64(of)
	}
	dl := r.deltas[p.Key]
	tot := r.stats.Ports[p.Key]
	ps := api.PortStatus{
		Proto: p.Key.Proto.String(), Port: p.Key.Port, Class: p.Class.String(),
		Mode: p.Mode.String(), Action: p.Action.String(), Source: source,
		DropProbability: r.probs[p.Key],
		Retransmits:     olc.RetransmitsAsFirst.String(),
		NewPerS:         rate(dl.NewConns),
		UniquePerS:      rate(dl.NewConns - min(dl.SYNRetransmits, dl.NewConns)),
		RetransmitsPerS: rate(dl.SYNRetransmits),
		DropShare:       share(dl.Dropped, dl.NewConns),
		WouldDropShare:  share(dl.WouldDrop, dl.NewConns),
		MarkedShare:     share(dl.Marked, dl.NewConns),
		RejectedPerS:    rate(dl.Rejected),
		CappedPerS:      rate(dl.Capped),
		WouldRejectPerS: rate(dl.WouldReject),
		ExemptPerS:      rate(dl.Exempt),
		StalePerS:       rate(dl.Stale),
		Totals: api.PortTotals{
			NewConns: tot.NewConns, Passed: tot.Passed, Dropped: tot.Dropped, Marked: tot.Marked,
			WouldDrop: tot.WouldDrop, Exempt: tot.Exempt, Stale: tot.Stale, SYNRetransmits: tot.SYNRetransmits,
			Rejected: tot.Rejected, WouldReject: tot.WouldReject, Capped: tot.Capped,
		},
	}
	if f, ok := r.snap.AcceptQueueFill[p.Key.Port]; ok && p.Key.Proto == olc.ProtoTCP {
		ps.AcceptQueueFill = &f
	}
	ps.ResponseTargetMode = "off"
	for _, pc := range ctrlPorts {
		if pc.Key == p.Key {
			ps.ResponseTargetMode = pc.Target.String()
		}
	}
	for _, pd := range r.decision.Ports {
		if pd.Key != p.Key {
			continue
		}
		ps.QueueDropProbability, ps.Retransmits = pd.QueueP, pd.Retransmits.String()
		if n := pd.InFlightCeiling; n > 0 {
			ps.InFlightCeiling = &n
		}
		if pd.ResponseTarget > 0 {
			tgt := pd.ResponseTarget
			ps.ResponseTarget = &tgt
		}
		if pd.Baseline > 0 {
			b := pd.Baseline
			ps.BaselineS = &b
		}
		if pd.Capacity > 0 {
			ps.Capacity = &api.Capacity{RequestsPerS: pd.Capacity, ConnectionsPerS: pd.ConnCapacity, AgeS: pd.CapacityAge}
		}
	}
	if pr, ok := r.resp[p.Key]; ok {
		ps.Timed = true
		ps.ResponseTime = responseTimeStatus(pr)
		rps, inf := pr.RequestsPerS, pr.Inflight
		ps.RequestsPerS, ps.InflightRequests = &rps, &inf
		ps.ResponseHistogram = histogramStatus(r.stats.Response[p.Key].Buckets)
	}
	kt, ok := r.keepAlive[p.Key]
	ps.KeepAlive = keepAliveStatus(p.RequestGate, kt, ok, dl.NewConns-min(dl.SYNRetransmits, dl.NewConns), r.stats.Response[p.Key], secs)
	return ps
}
