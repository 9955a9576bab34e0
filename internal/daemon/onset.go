package daemon

import (
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader"

	"github.com/olcd/olcd/internal/olc"
)

// onset is the onset check's state between ticks: its timer and the
// previous window's counts. The maps are swapped and reused, so a check
// allocates nothing when it does not act (twenty checks a second).
type onset struct {
	ticker  *time.Ticker
	every   time.Duration
	prev    map[olc.PortKey]loader.Counters // swapped with cur, reused
	cur     map[olc.PortKey]loader.Counters
	stats   map[olc.PortKey]adaptive.PortStats // reused by every check
	rcur    map[olc.PortKey]loader.RespCount   // response counts, swapped with rprev
	rprev   map[olc.PortKey]loader.RespCount
	at      time.Time
	ok      bool // prev is a baseline
	failing bool // the last read of the statistics failed
}

// onsetPeriod is the onset check's period in force, or 0 when it is off
// (controller.onset_interval 0, or not below the tick interval).
func (e *engine) onsetPeriod() time.Duration {
	iv := e.cfg.Controller.OnsetInterval
	if iv <= 0 || iv >= e.cfg.Interval {
		return 0
	}
	return iv
}

// resetOnset starts, restarts or stops the onset check's timer to match the
// config in force. The first check after a (re)start only takes its
// baseline.
func (e *engine) resetOnset() {
	period := e.onsetPeriod()
	switch {
	case period == 0 && e.onset.ticker != nil:
		e.onset.ticker.Stop()
		e.onset.ticker = nil
	case period > 0 && e.onset.ticker == nil:
		e.onset.ticker = time.NewTicker(period)
	case period > 0 && period != e.onset.every:
		e.onset.ticker.Reset(period)
	}
	e.onset.every, e.onset.ok = period, false
}

// onsetC is the onset timer's channel; nil (never ready) when it is off.
func (e *engine) onsetC() <-chan time.Time {
	if e.onset.ticker == nil {
		return nil
	}
	return e.onset.ticker.C
}

// onsetCheck runs the controller's onset check (adaptive.Controller.Onset)
// on the datapath's counts since the previous check and, when it acts,
// writes the new drop probabilities at once rather than at the next tick
// and reports true (the status then changed).
func (e *engine) onsetCheck() bool {
	now := time.Now()
	// Twenty times a second: the maps are reused, so a check allocates
	// nothing when it does not act.
	if e.onset.cur == nil {
		e.onset.cur = make(map[olc.PortKey]loader.Counters, len(e.ports))
		e.onset.prev = make(map[olc.PortKey]loader.Counters, len(e.ports))
		e.onset.stats = make(map[olc.PortKey]adaptive.PortStats, len(e.ports))
		e.onset.rcur = make(map[olc.PortKey]loader.RespCount, len(e.ports))
		e.onset.rprev = make(map[olc.PortKey]loader.RespCount, len(e.ports))
	}
	err := e.dp.PortCounters(e.onset.cur)
	if rc, ok := e.dp.(respCounter); ok && err == nil {
		err = rc.ResponseCounts(e.onset.rcur)
	}
	if err != nil {
		// Twenty reads a second: logged when it starts failing, not
		// every time, and left out of olcd_sample_errors_total, which
		// counts the ticks' reads.
		if !e.onset.failing {
			e.log.Warn("onset check: read datapath statistics; the ticks go on", "err", err)
			e.onset.failing = true
		}
		e.onset.ok = false
		return false
	}
	if e.onset.failing {
		e.log.Info("onset check: datapath statistics readable again")
		e.onset.failing = false
	}
	cur, prev, prevAt, ok := e.onset.cur, e.onset.prev, e.onset.at, e.onset.ok
	e.onset.prev, e.onset.cur, e.onset.at, e.onset.ok = cur, prev, now, true
	rcur, rprev := e.onset.rcur, e.onset.rprev
	e.onset.rprev, e.onset.rcur = rcur, rprev
	if !ok {
		return false
	}
	stats := e.onset.stats
	clear(stats)
	sample := float64(max(e.dp.ResponseSample(), 1))
	for _, p := range e.ports {
		cur, ok := cur[p.Key]
		before, had := prev[p.Key]
		if !ok || !had {
			// A port that just got its slot has no window yet.
			continue
		}
		dl := counterDelta(cur, before)
		st := portStats(dl)
		st.Response = windowResponse(rcur, rprev, p.Key, sample)
		if p.RequestGate {
			st.Reused, st.Resets = windowGate(rcur, rprev, p.Key, sample)
		}
		stats[p.Key] = st
	}
	dec, acted := e.ctrl.Onset(now, now.Sub(prevAt), stats)
	if !acted {
		return false
	}
	e.metrics.onsetDecisions.Inc()
	e.last.probs = e.writeProbabilities(dec)
	// The status keeps the last tick's signals and counts, with the
	// decision in force.
	last := &e.last.decision
	last.DropProbability, last.Classes, last.Ports = dec.DropProbability, dec.Classes, dec.Ports
	last.Overloaded, last.OverloadSince, last.Reason = dec.Overloaded, dec.OverloadSince, dec.Reason
	e.recordEvents(dec)
	return true
}

// writeProbabilities writes dec's per-port drop probabilities and ceilings
// on requests in flight to the datapath (none in mode off) and returns the
// probabilities.
func (e *engine) writeProbabilities(dec adaptive.Decision) map[olc.PortKey]float64 {
	probs := make(map[olc.PortKey]float64, len(dec.Ports))
	retx := make(map[olc.PortKey]olc.Retransmits, len(dec.Ports))
	ceil := make(map[olc.PortKey]int, len(dec.Ports))
	for _, pd := range dec.Ports {
		p, c := pd.DropProbability, pd.InFlightCeiling
		if e.cfg.Mode == olc.ModeOff {
			p, c = 0, 0
		}
		probs[pd.Key] = p
		retx[pd.Key] = pd.Retransmits
		ceil[pd.Key] = c
	}
	if cs, ok := e.dp.(capSetter); ok {
		if err := cs.SetInFlightCeilings(ceil, e.ctrl.Config().Params.MinPassRate); err != nil {
			e.log.Error("write in-flight ceilings", "err", err)
		}
	}
	if err := e.dp.SetDropProbabilities(probs); err != nil {
		e.log.Error("write drop probabilities", "err", err)
	}
	if err := e.dp.SetRetransmits(retx); err != nil {
		e.log.Error("write retransmit rules", "err", err)
	}
	return probs
}

// respCounter is the datapath's read of the cumulative response counters
// (loader.Datapath.ResponseCounts); a datapath without it leaves the
// onset check to the connection counts.
type respCounter interface {
	ResponseCounts(into map[olc.PortKey]loader.RespCount) error
}

// windowResponse is a timed port's measured queue over one onset window:
// the requests started and answered in it and the requests in flight at
// its end, scaled by the sample rate (one flow in sample). The zero value
// when the port was not timed at both ends of the window.
func windowResponse(cur, prev map[olc.PortKey]loader.RespCount, k olc.PortKey, sample float64) adaptive.PortResponse {
	now, ok := cur[k]
	before, had := prev[k]
	if !ok || !had || now.Requests < before.Requests || now.Responses < before.Responses {
		return adaptive.PortResponse{} // a new or reset slot
	}
	return adaptive.PortResponse{
		Requests:  float64(now.Requests-before.Requests) * sample,
		Responses: float64(now.Responses-before.Responses) * sample,
		Inflight:  float64(now.Inflight()) * sample,
	}
}

// windowGate is a gated port's request starts on open connections and the
// resets among them over one onset window, scaled by the sample rate; 0
// when the port was not timed at both ends of the window.
func windowGate(cur, prev map[olc.PortKey]loader.RespCount, k olc.PortKey, sample float64) (reused, resets uint64) {
	now, ok := cur[k]
	before, had := prev[k]
	if !ok || !had || now.Reused < before.Reused || now.Resets < before.Resets {
		return 0, 0
	}
	return uint64(float64(now.Reused-before.Reused) * sample), uint64(float64(now.Resets-before.Resets) * sample)
}
