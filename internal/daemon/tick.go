package daemon

import (
	"math"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/resptime"
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
	// keepAlive is each timed port's request starts on open connections
	// over the tick (keepalive.go; nil when timing is off).
	keepAlive map[olc.PortKey]keepAliveTick
}

// read takes a tick's reads: the sampler's snapshot and the datapath's
// counters, each source that failed counted in the sample errors; ok is
// false when the counters could not be read.
func (e *engine) read() (snap olc.Snapshot, st loader.Stats, ok bool) {
	snap = e.smp.Sample()
	for _, se := range snap.Errors {
		e.metrics.sampleErrors.WithLabelValues(se.Source).Inc()
	}
	st, err := e.dp.Stats()
	if err != nil {
		e.log.Error("read datapath statistics", "err", err)
		e.metrics.sampleErrors.WithLabelValues(sourceDatapathStats).Inc()
		return snap, loader.Stats{}, false
	}
	return snap, st, true
}

// keep makes st the read the next tick's deltas start from, and hands the
// one it replaces back to the datapath for reuse: its only holders were
// e.prev and e.last, which holds st's tick by now (before the first tick,
// no read).
func (e *engine) keep(st loader.Stats) {
	prev := e.prev
	e.prev = st
	e.dp.ReleaseStats(prev)
}

// tick runs sample → stats → controller → maps → heartbeat once.
func (e *engine) tick() {
	start := time.Now()
	snap, st, ok := e.read()
	deltas := make(map[olc.PortKey]loader.Counters, len(e.ports))
	stats := make(map[olc.PortKey]adaptive.PortStats, len(e.ports))
	var resp map[olc.PortKey]resptime.Port
	var keepAlive map[olc.PortKey]keepAliveTick
	if ok {
		keys := make([]olc.PortKey, 0, len(e.ports))
		for _, p := range e.ports {
			keys = append(keys, p.Key)
		}
		resp = responseSignals(st, e.prev, keys, e.dp.ResponseSample(), e.cfg.Datapath.ResponseMinSamples, snap.Interval, &snap)
		keepAlive = keepAliveDeltas(st, e.prev, keys, e.dp.ResponseSample())
		for _, p := range e.ports {
			cur, ok := st.Ports[p.Key]
			if !ok {
				continue
			}
			dl := counterDelta(cur, e.prev.Ports[p.Key])
			deltas[p.Key] = dl
			ps := portStats(dl)
			if pr, ok := resp[p.Key]; ok {
				ps.Response = portResponse(pr, e.dp.ResponseSample(), snap.Interval)
			}
			if p.RequestGate {
				ps.Reused, ps.Resets = gateDelta(st.Response[p.Key], e.prev.Response[p.Key], e.dp.ResponseSample())
			}
			stats[p.Key] = ps
		}
	}

	dec := e.ctrl.Step(snap, stats)

	probs := e.writeProbabilities(dec)
	// The heartbeat comes last: if anything above hangs, the datapath's
	// view of the daemon goes stale and it fails open.
	if err := e.dp.Heartbeat(); err != nil {
		e.log.Error("write heartbeat", "err", err)
	}

	interval := snap.Interval
	if interval <= 0 {
		interval = e.cfg.Interval
	}
	e.last = tickResult{at: snap.At, interval: interval, snap: snap, decision: dec, stats: st, deltas: deltas, probs: probs, resp: resp,
		keepAlive: keepAlive}
	if ok {
		e.keep(st)
	}
	e.ticks++
	e.metrics.ticks.Inc()
	e.metrics.tickSeconds.Observe(time.Since(start).Seconds())
	e.recordEvents(dec)
	e.recordCaps(deltas)
}

// recordCaps writes a "cap" record to the decision log when a port's
// static caps (ports[].caps) start refusing new work, and "cap_ended" when
// a tick goes by without a refusal: their own reason, apart from what the
// adaptive law sheds (probability_change).
func (e *engine) recordCaps(deltas map[olc.PortKey]loader.Counters) {
	for _, p := range e.ports {
		dl, ok := deltas[p.Key]
		if !ok {
			continue
		}
		on := e.capping[p.Key]
		switch {
		case dl.Capped > 0 && !on:
			if e.capping == nil {
				e.capping = make(map[olc.PortKey]bool)
			}
			e.capping[p.Key] = true
			e.dlog.Record("cap", "port", p.Key.String(), "reason", "cap", "capped", dl.Capped, "new", dl.NewConns,
				"rate", p.Caps.Rate, "in_flight", p.Caps.InFlight)
		case dl.Capped == 0 && on:
			delete(e.capping, p.Key)
			e.dlog.Record("cap_ended", "port", p.Key.String(), "reason", "cap")
		}
	}
}

// portStats is what the controller reads of a port's counter delta, for
// the ticks and the onset check alike.
//
// New work a static cap refused and the datapath dropped (rejected) is left
// out of both its new connections and its drops: the caps are the
// operator's ceiling in front of the law, and what they refuse is no
// demand for the law to admit or shed. Counted in, a cap below capacity
// made the law's demand the whole offered load against a capacity that
// the cap itself had held down (the answers of the capped load, read
// while a noisy queue passed for saturation): the law shed at the cap's
// pass rate on top of the cap and stayed there while the backend idled
// (TestOverloadCaps: p 0.46 with a source cap, the light clients' connects
// cut to 0.56 at 0.6 C). A capped start that passed (observe mode, the
// mark action, a stale heartbeat) is demand the backend sees, and stays.
func portStats(dl loader.Counters) adaptive.PortStats {
	capped := min(dl.Capped, dl.Dropped)
	dropped := dl.Dropped - capped
	return adaptive.PortStats{New: dl.NewConns - min(capped, dl.NewConns), Retransmits: dl.SYNRetransmits, Dropped: dropped,
		Rejected: min(dl.Rejected, dropped), Ceiled: dl.Ceiled}
}

// gateDelta is a gated port's request starts on open connections and the
// resets among them since the previous read, scaled by the sample rate
// (one flow in sample); a slot that went backwards counts from zero.
func gateDelta(cur, prev loader.Response, sample uint32) (reused, resets uint64) {
	if cur.Reused < prev.Reused || cur.Resets < prev.Resets {
		prev = loader.Response{}
	}
	s := uint64(max(sample, 1))
	return (cur.Reused - prev.Reused) * s, (cur.Resets - prev.Resets) * s
}

// portResponse is what the controller reads of a port's response timing:
// its p95 when available, the samples and the requests of the tick.
func portResponse(pr resptime.Port, sample uint32, interval time.Duration) adaptive.PortResponse {
	r := adaptive.PortResponse{Available: pr.Available, Samples: pr.Samples, Requests: pr.RequestsPerS * interval.Seconds(),
		Responses: float64(pr.Samples) * float64(max(sample, 1)), Inflight: pr.Inflight}
	if pr.Available {
		r.P95, r.Hist = pr.P95, pr.Hist
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
		Capped:         sub(cur.Capped, prev.Capped),
		Ceiled:         sub(cur.Ceiled, prev.Ceiled),
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
func (e *engine) recordEvents(dec adaptive.Decision) {
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
			"mode", e.cfg.Mode.String(),
			"signals", signalValues(ev.Signals),
		}
		if !ev.OverloadSince.IsZero() {
			args = append(args, "overload_since", ev.OverloadSince)
		}
		if rt := responseValues(&e.last.snap); rt != nil {
			args = append(args, "response_time", rt)
		}
		e.dlog.Record(ev.Kind.String(), args...)
		//nolint:sloglint // the event's kind is its message, as in the decision log's record
		e.log.Info(ev.Kind.String(), "reason", ev.Reason, "pressure", round4(ev.Pressure),
			"drop_probability", round4(ev.DropProbability), "mode", e.cfg.Mode.String())
	}
	e.recordChanges(changes)
	e.dlog.Flush()
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
