package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/resptime"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/sampler"
)

// tickResult is what one tick saw and decided; status and metrics read it.
type tickResult struct {
	at       time.Time
	interval time.Duration
	snap     olc.Snapshot
	decision adaptive.Decision
	stats    loader.Stats
	deltas   map[olc.PortKey]loader.Counters
	probs    map[olc.PortKey]float64
	// resp is each timed port's response time over the tick (nil when
	// timing is off).
	resp map[olc.PortKey]resptime.Port
}

// tick runs sample → stats → controller → maps → heartbeat once.
func (d *Daemon) tick() {
	start := time.Now()
	snap := d.smp.Sample()
	for _, e := range snap.Errors {
		d.metrics.sampleErrors.WithLabelValues(e.Source).Inc()
	}

	st, err := d.dp.Stats()
	if err != nil {
		d.log.Error("read datapath statistics", "err", err)
		d.metrics.sampleErrors.WithLabelValues(sourceDatapathStats).Inc()
	}
	deltas := make(map[olc.PortKey]loader.Counters, len(d.ports))
	stats := make(map[olc.PortKey]adaptive.PortStats, len(d.ports))
	var resp map[olc.PortKey]resptime.Port
	var prev loader.Stats
	if err == nil {
		keys := make([]olc.PortKey, 0, len(d.ports))
		for _, p := range d.ports {
			keys = append(keys, p.key)
		}
		resp = responseSignals(st, d.prev, keys, d.dp.ResponseSample(), d.cfg.Datapath.ResponseMinSamples, snap.Interval, &snap)
		for _, p := range d.ports {
			cur, ok := st.Ports[p.key]
			if !ok {
				continue
			}
			dl := counterDelta(cur, d.prev.Ports[p.key])
			deltas[p.key] = dl
			ps := portStats(dl)
			if pr, ok := resp[p.key]; ok {
				ps.Response = portResponse(pr, d.dp.ResponseSample(), snap.Interval)
			}
			stats[p.key] = ps
		}
		// The previous read is released below, once d.last no longer
		// holds it either.
		prev = d.prev
		d.prev = st
	}

	dec := d.ctrl.Step(snap, stats)

	probs := d.writeProbabilities(dec)
	// The heartbeat comes last: if anything above hangs, the datapath's
	// view of the daemon goes stale and it fails open.
	if err := d.dp.Heartbeat(); err != nil {
		d.log.Error("write heartbeat", "err", err)
	}

	interval := snap.Interval
	if interval <= 0 {
		interval = d.cfg.Interval
	}
	d.last = tickResult{at: snap.At, interval: interval, snap: snap, decision: dec, stats: st, deltas: deltas, probs: probs, resp: resp}
	// Nothing holds the previous read now (d.prev and d.last were its
	// only holders): its histograms go back to the datapath for reuse.
	d.dp.ReleaseStats(prev)
	d.ticks++
	d.metrics.ticks.Inc()
	d.metrics.tickSeconds.Observe(time.Since(start).Seconds())
	d.recordEvents(dec)
	d.updateLB()
	if d.runCtx == nil {
		d.publish() // not running (tests): nobody would build it
	} else {
		d.statusStale.Store(true)
	}
}

// portStats is what the controller reads of a port's counter delta, for
// the ticks and the onset check alike.
func portStats(dl loader.Counters) adaptive.PortStats {
	return adaptive.PortStats{New: dl.NewConns, Retransmits: dl.SYNRetransmits, Dropped: dl.Dropped, Rejected: dl.Rejected}
}

// portResponse is what the controller reads of a port's response timing:
// its p95 when available, the samples and the requests of the tick.
func portResponse(pr resptime.Port, sample uint32, interval time.Duration) adaptive.PortResponse {
	r := adaptive.PortResponse{Available: pr.Available, Samples: pr.Samples, Requests: pr.RequestsPerS * interval.Seconds(),
		Responses: float64(pr.Samples) * float64(max(sample, 1)), Inflight: pr.Inflight}
	if pr.Available {
		r.P95 = pr.P95
	}
	return r
}

// counterDelta returns cur − prev field by field; a counter that went
// backwards (the port lost and regained its slot) counts from zero.
func counterDelta(cur, prev loader.Counters) loader.Counters {
	sub := func(a, b uint64) uint64 {
		if a < b {
			return a
		}
		return a - b
	}
	return loader.Counters{
		NewConns:       sub(cur.NewConns, prev.NewConns),
		Passed:         sub(cur.Passed, prev.Passed),
		Dropped:        sub(cur.Dropped, prev.Dropped),
		Marked:         sub(cur.Marked, prev.Marked),
		WouldDrop:      sub(cur.WouldDrop, prev.WouldDrop),
		Exempt:         sub(cur.Exempt, prev.Exempt),
		Stale:          sub(cur.Stale, prev.Stale),
		SYNRetransmits: sub(cur.SYNRetransmits, prev.SYNRetransmits),
		Rejected:       sub(cur.Rejected, prev.Rejected),
		WouldReject:    sub(cur.WouldReject, prev.WouldReject),
	}
}

// responseValues is the node's measured queue for the decision log: the
// response-time quantiles (seconds, null when unavailable), requests per
// second and in flight; nil when response timing gave nothing this tick.
func responseValues(snap *olc.Snapshot) map[string]any {
	out := map[string]any{}
	for _, sig := range []olc.Signal{olc.ResponseTimeP50, olc.ResponseTimeP95, olc.ResponseTimeP99,
		olc.RequestsPerS, olc.InflightRequests} {
		if v, ok := snap.Get(sig); ok {
			out[sig.String()] = round6(v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// recordEvents writes the controller's events to the decision log: the
// probability changes of the tick as one record (changes.go), every other
// event as its own.
func (d *Daemon) recordEvents(dec adaptive.Decision) {
	var changes []adaptive.Event
	for _, ev := range dec.Events {
		if ev.Kind == adaptive.EventProbabilityChange {
			changes = append(changes, ev)
			continue
		}
		args := []any{
			"at", ev.At,
			"reason", ev.Reason,
			"pressure", round4(ev.Pressure),
			"drop_probability", round4(ev.DropProbability),
			"mode", d.cfg.Mode.String(),
			"signals", signalValues(ev.Signals),
		}
		if !ev.OverloadSince.IsZero() {
			args = append(args, "overload_since", ev.OverloadSince)
		}
		if rt := responseValues(&d.last.snap); rt != nil {
			args = append(args, "response_time", rt)
		}
		d.dlog.Record(ev.Kind.String(), args...)
		d.log.Info(ev.Kind.String(), "reason", ev.Reason, "pressure", round4(ev.Pressure),
			"drop_probability", round4(ev.DropProbability), "mode", d.cfg.Mode.String())
	}
	d.recordChanges(changes)
	d.dlog.Flush()
}

// signalValues renders signal states as {name: value} for the log; an
// unavailable signal is null.
func signalValues(ss []adaptive.SignalState) map[string]any {
	out := make(map[string]any, len(ss))
	for _, s := range ss {
		if s.Available {
			out[s.Signal.String()] = round4(s.Value)
		} else {
			out[s.Signal.String()] = nil
		}
	}
	return out
}

// round4 keeps four decimals: the decision log is read by people, and
// 0.30000000000000004 helps nobody.
func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// resolvePorts returns the ports cfg protects: the configured list, or under
// ports: auto every TCP port with a listener on a non-loopback address, minus
// exception ports.
func (d *Daemon) resolvePorts(cfg *rules.Config) []portEntry {
	if !cfg.PortsAuto {
		out := make([]portEntry, 0, len(cfg.Ports))
		for _, p := range cfg.Ports {
			out = append(out, portEntry{key: p.Key(), class: p.Class, mode: p.EffectiveMode(cfg.Mode), action: p.EffectiveAction(cfg.Action.Kind), source: "config"})
		}
		return out
	}
	listeners, err := sampler.Listeners()
	if err != nil {
		d.log.Error("discover listening ports", "err", err)
		d.metrics.sampleErrors.WithLabelValues(sampler.SourceSockDiag).Inc()
		// Keep protecting what was found before rather than nothing.
		var out []portEntry
		for _, p := range d.ports {
			if p.source == "auto" && !cfg.ExemptPort(p.key) {
				p.mode, p.action = cfg.Mode, cfg.Action.Kind
				out = append(out, p)
			}
		}
		return out
	}
	d.listening = listeningPorts(listeners)
	found := autoPorts(cfg, listeners)
	kept := capPorts(found, d.ports, d.limits.maxPorts)
	if left := len(found) - len(kept); left != d.autoLeftOut {
		d.autoLeftOut = left
		if left > 0 {
			d.log.Warn("more listening ports than datapath.max_ports: some are not protected (raise max_ports and restart)",
				"listening", len(found), "max_ports", d.limits.maxPorts, "left_out", left)
		}
	}
	return kept
}

// capPorts keeps at most max of the discovered ports (all when max <= 0):
// those protected now first, so that a new listener never takes the place
// of one already protected, then the lowest port numbers. The result is
// sorted by port like autoPorts's.
func capPorts(found, current []portEntry, max int) []portEntry {
	if max <= 0 || len(found) <= max {
		return found
	}
	protected := make(map[olc.PortKey]bool, len(current))
	for _, p := range current {
		protected[p.key] = true
	}
	kept := make([]portEntry, 0, max)
	for _, keepOld := range []bool{true, false} {
		for _, p := range found {
			if len(kept) < max && protected[p.key] == keepOld {
				kept = append(kept, p)
			}
		}
	}
	slices.SortFunc(kept, func(a, b portEntry) int { return cmp.Compare(a.key.Port, b.key.Port) })
	return kept
}

// listeningPorts returns the TCP ports with a listener on a non-loopback
// address, sorted, each once: what ports: auto considers.
func listeningPorts(listeners []sampler.Listener) []uint16 {
	var out []uint16
	for _, l := range listeners {
		if port := l.Addr.Port(); !l.Addr.Addr().Unmap().IsLoopback() && port != 0 && !slices.Contains(out, port) {
			out = append(out, port)
		}
	}
	slices.Sort(out)
	return out
}

// exemptListeners returns, under ports: auto, the listening ports left
// unprotected because an exception names them, with the list that does.
func exemptListeners(cfg *rules.Config, listening []uint16) []api.ExemptListener {
	if !cfg.PortsAuto {
		return nil
	}
	var out []api.ExemptListener
	for _, port := range listening {
		key := olc.PortKey{Proto: olc.ProtoTCP, Port: port}
		if why := cfg.ExemptReason(key); why != "" {
			out = append(out, api.ExemptListener{Proto: key.Proto.String(), Port: port, Reason: why})
		}
	}
	return out
}

// autoPorts turns listeners into class-normal TCP ports: a listener on a
// loopback address serves only this host and is never protected, nor is an
// exempt port (exceptions.ports, or a management port such as SSH: an
// operator must reach an overloaded node); port numbers are deduplicated
// across addresses and families.
func autoPorts(cfg *rules.Config, listeners []sampler.Listener) []portEntry {
	seen := map[uint16]bool{}
	var out []portEntry
	for _, l := range listeners {
		addr := l.Addr.Addr().Unmap()
		port := l.Addr.Port()
		if addr.IsLoopback() || port == 0 || seen[port] {
			continue
		}
		key := olc.PortKey{Proto: olc.ProtoTCP, Port: port}
		if cfg.ExemptPort(key) {
			continue
		}
		seen[port] = true
		out = append(out, portEntry{key: key, class: olc.ClassNormal, mode: cfg.Mode, action: cfg.Action.Kind, source: "auto"})
	}
	slices.SortFunc(out, func(a, b portEntry) int { return cmp.Compare(a.key.Port, b.key.Port) })
	return out
}

// rediscover refreshes the ports under ports: auto and reprograms when the
// set changed.
func (d *Daemon) rediscover() {
	ports := d.resolvePorts(d.cfg)
	if slices.Equal(ports, d.ports) {
		return
	}
	added, removed := diffPorts(d.ports, ports)
	if err := d.ctrl.Reconfigure(d.cfg.ControllerConfig(controllerPorts(ports))); err != nil {
		d.log.Error("reconfigure controller for discovered ports", "err", err)
		return
	}
	old := d.ports
	d.ports = ports
	d.smp.SetTCPPorts(tcpPorts(ports))
	if err := d.program(); err != nil {
		// Back to the ports the datapath had: the controller must not
		// produce probabilities for ports without a policy.
		d.ports = old
		d.smp.SetTCPPorts(tcpPorts(old))
		rerr := d.ctrl.Reconfigure(d.cfg.ControllerConfig(controllerPorts(old)))
		if rerr == nil {
			rerr = d.program()
		}
		d.log.Error("program discovered ports; keeping the previous ones", "err", errors.Join(err, rerr))
		return
	}
	d.log.Info("protected ports changed", "added", added, "removed", removed)
	d.dlog.Record("ports_changed", "added", added, "removed", removed)
	d.publish()
}

func diffPorts(old, cur []portEntry) (added, removed []string) {
	has := func(ps []portEntry, k olc.PortKey) bool {
		return slices.ContainsFunc(ps, func(p portEntry) bool { return p.key == k })
	}
	for _, p := range cur {
		if !has(old, p.key) {
			added = append(added, p.key.String())
		}
	}
	for _, p := range old {
		if !has(cur, p.key) {
			removed = append(removed, p.key.String())
		}
	}
	return added, removed
}

func controllerPorts(ports []portEntry) []adaptive.PortConfig {
	out := make([]adaptive.PortConfig, len(ports))
	for i, p := range ports {
		out[i] = adaptive.PortConfig{Key: p.key, Class: p.class}
	}
	return out
}

func tcpPorts(ports []portEntry) []uint16 {
	var out []uint16
	for _, p := range ports {
		if p.key.Proto == olc.ProtoTCP {
			out = append(out, p.key.Port)
		}
	}
	return out
}

func dirOf(path string) string { return filepath.Dir(path) }

func sameFile(a, b string) bool { return filepath.Clean(a) == filepath.Clean(b) }

// publish builds the status document from the last tick and stores it for
// the admin API.
func (d *Daemon) publish() {
	r := d.last
	dec := r.decision
	st := &api.Status{
		Version:      d.opts.Version,
		Mode:         d.cfg.Mode.String(),
		ConfigSource: d.configSource(),
		Overrides:    overrideList(d.overrides),
		IntervalS:    d.cfg.Interval.Seconds(),
		StaleAfterS:  d.staleAfter().Seconds(),
		Ticks:        d.ticks,
		UpdatedAt:    r.at,
		StartedAt:    d.started,
		Overload: api.OverloadStatus{
			Active:          dec.Overloaded,
			Pressure:        dec.SmoothedPressure,
			DropProbability: dec.DropProbability,
			Bound:           d.cfg.Controller.Bound(),
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
	st.ReloadRefused = d.refused
	st.LB = d.lbStatus()
	if dec.Overloaded && !dec.OverloadSince.IsZero() {
		since := dec.OverloadSince
		st.Overload.Since = &since
	}
	withThreshold := map[olc.Signal]bool{}
	for _, s := range dec.Signals {
		withThreshold[s.Signal] = true
		ss := api.SignalStatus{Name: s.Signal.String(), Unit: s.Signal.Unit().String(), Available: s.Available, Corroborated: s.Corroborated}
		th := s.Threshold
		ss.Threshold = &th
		if s.Available {
			v, p := s.Value, s.Pressure
			ss.Value, ss.Pressure = &v, &p
		}
		st.Signals = append(st.Signals, ss)
	}
	for sig := range olc.NumSignals {
		if withThreshold[sig] {
			continue
		}
		if v, ok := r.snap.Get(sig); ok {
			st.Signals = append(st.Signals, api.SignalStatus{Name: sig.String(), Unit: sig.Unit().String(), Available: true, Value: &v})
		}
	}
	for c := range olc.NumClasses {
		st.Classes = append(st.Classes, api.ClassStatus{Class: c.String(), DropProbability: dec.Classes[c]})
	}
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
	for _, p := range d.ports {
		dl := r.deltas[p.key]
		tot := r.stats.Ports[p.key]
		ps := api.PortStatus{
			Proto: p.key.Proto.String(), Port: p.key.Port, Class: p.class.String(),
			Mode: p.mode.String(), Action: p.action.String(), Source: p.source,
			DropProbability: r.probs[p.key],
			NewPerS:         rate(dl.NewConns),
			UniquePerS:      rate(dl.NewConns - min(dl.SYNRetransmits, dl.NewConns)),
			RetransmitsPerS: rate(dl.SYNRetransmits),
			DropShare:       share(dl.Dropped, dl.NewConns),
			WouldDropShare:  share(dl.WouldDrop, dl.NewConns),
			MarkedShare:     share(dl.Marked, dl.NewConns),
			RejectedPerS:    rate(dl.Rejected),
			WouldRejectPerS: rate(dl.WouldReject),
			ExemptPerS:      rate(dl.Exempt),
			StalePerS:       rate(dl.Stale),
			Totals: api.PortTotals{
				NewConns: tot.NewConns, Passed: tot.Passed, Dropped: tot.Dropped, Marked: tot.Marked,
				WouldDrop: tot.WouldDrop, Exempt: tot.Exempt, Stale: tot.Stale, SYNRetransmits: tot.SYNRetransmits,
				Rejected: tot.Rejected, WouldReject: tot.WouldReject,
			},
		}
		if f, ok := r.snap.AcceptQueueFill[p.key.Port]; ok && p.key.Proto == olc.ProtoTCP {
			ps.AcceptQueueFill = &f
		}
		ps.ResponseTargetMode = "off"
		for _, pc := range d.ctrl.Config().Ports {
			if pc.Key == p.key {
				ps.ResponseTargetMode = pc.Target.String()
			}
		}
		for _, pd := range dec.Ports {
			if pd.Key != p.key {
				continue
			}
			ps.QueueDropProbability = pd.QueueP
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
		if pr, ok := r.resp[p.key]; ok {
			ps.Timed = true
			ps.ResponseTime = responseTimeStatus(pr)
			rps, inf := pr.RequestsPerS, pr.Inflight
			ps.RequestsPerS, ps.InflightRequests = &rps, &inf
			ps.ResponseHistogram = histogramStatus(r.stats.Response[p.key].Buckets)
		}
		st.Ports = append(st.Ports, ps)
	}
	for _, k := range d.cfg.ExemptPorts() {
		if d.cfg.ExemptReason(k) == "exceptions.management" {
			st.Exceptions = append(st.Exceptions, k.String()+" (management)")
		} else {
			st.Exceptions = append(st.Exceptions, k.String())
		}
	}
	st.ListenersExempt = exemptListeners(d.cfg, d.listening)
	for _, pfx := range d.cfg.Exceptions.Sources {
		st.Exceptions = append(st.Exceptions, "from "+pfx.String())
	}
	if d.dp != nil {
		for _, a := range d.dp.Attachments() {
			st.Interfaces = append(st.Interfaces, api.InterfaceStatus{Name: a.Interface, Hook: a.Hook, Mode: a.Mode, Egress: a.Egress})
		}
		st.ResponseTiming = d.responseTimingStatus(r.stats)
	}
	st.InterfacesWaiting = slices.Clone(d.waiting)
	d.statusStale.Store(false)
	for _, e := range r.snap.Errors {
		st.SampleErrors = append(st.SampleErrors, fmt.Sprintf("%s: %v", e.Source, e.Err))
	}
	keys := make([]olc.PortKey, len(d.ports))
	for i, p := range d.ports {
		keys[i] = p.key
	}
	d.status.Store(&published{st: st, keys: keys})
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// staleAfter is the heartbeat.stale_after the datapath runs with: the
// value at the start (a reload cannot change it), which /healthz, the
// status and olcd_heartbeat_stale_after_seconds must report, not the file's.
func (d *Daemon) staleAfter() time.Duration {
	if d.limits.staleAfter > 0 {
		return d.limits.staleAfter
	}
	return d.cfg.StaleAfter
}
