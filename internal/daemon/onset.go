package daemon

import (
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader"

	"github.com/olcd/olcd/internal/olc"
)

// onsetPeriod is the onset check's period in force, or 0 when it is off
// (controller.onset_interval 0, or not below the tick interval).
func (d *Daemon) onsetPeriod() time.Duration {
	iv := d.cfg.Controller.OnsetInterval
	if iv <= 0 || iv >= d.cfg.Interval {
		return 0
	}
	return iv
}

// resetOnset starts, restarts or stops the onset check's timer to match the
// config in force. The first check after a (re)start only takes its
// baseline.
func (d *Daemon) resetOnset() {
	period := d.onsetPeriod()
	switch {
	case period == 0 && d.onsetTicker != nil:
		d.onsetTicker.Stop()
		d.onsetTicker = nil
	case period > 0 && d.onsetTicker == nil:
		d.onsetTicker = time.NewTicker(period)
	case period > 0 && period != d.onsetEvery:
		d.onsetTicker.Reset(period)
	}
	d.onsetEvery, d.onsetOK = period, false
}

// onsetC is the onset timer's channel; nil (never ready) when it is off.
func (d *Daemon) onsetC() <-chan time.Time {
	if d.onsetTicker == nil {
		return nil
	}
	return d.onsetTicker.C
}

// onsetCheck runs the controller's onset check (adaptive.Controller.Onset)
// on the datapath's counts since the previous check and, when it acts,
// writes the new drop probabilities at once rather than at the next tick.
func (d *Daemon) onsetCheck() {
	now := time.Now()
	// Twenty times a second: the maps are reused, so a check allocates
	// nothing when it does not act.
	if d.onsetCur == nil {
		d.onsetCur = make(map[olc.PortKey]loader.Counters, len(d.ports))
		d.onsetPrev = make(map[olc.PortKey]loader.Counters, len(d.ports))
		d.onsetStats = make(map[olc.PortKey]adaptive.PortStats, len(d.ports))
		d.onsetRCur = make(map[olc.PortKey]loader.RespCount, len(d.ports))
		d.onsetRPrev = make(map[olc.PortKey]loader.RespCount, len(d.ports))
	}
	err := d.dp.PortCounters(d.onsetCur)
	if rc, ok := d.dp.(respCounter); ok && err == nil {
		err = rc.ResponseCounts(d.onsetRCur)
	}
	if err != nil {
		// Twenty reads a second: logged when it starts failing, not
		// every time, and left out of olcd_sample_errors_total, which
		// counts the ticks' reads.
		if !d.onsetFailing {
			d.log.Warn("onset check: read datapath statistics; the ticks go on", "err", err)
			d.onsetFailing = true
		}
		d.onsetOK = false
		return
	}
	if d.onsetFailing {
		d.log.Info("onset check: datapath statistics readable again")
		d.onsetFailing = false
	}
	cur, prev, prevAt, ok := d.onsetCur, d.onsetPrev, d.onsetAt, d.onsetOK
	d.onsetPrev, d.onsetCur, d.onsetAt, d.onsetOK = cur, prev, now, true
	rcur, rprev := d.onsetRCur, d.onsetRPrev
	d.onsetRPrev, d.onsetRCur = rcur, rprev
	if !ok {
		return
	}
	stats := d.onsetStats
	clear(stats)
	sample := float64(max(d.dp.ResponseSample(), 1))
	for _, p := range d.ports {
		cur, ok := cur[p.key]
		before, had := prev[p.key]
		if !ok || !had {
			// A port that just got its slot has no window yet.
			continue
		}
		dl := counterDelta(cur, before)
		st := portStats(dl)
		st.Response = windowResponse(rcur, rprev, p.key, sample)
		stats[p.key] = st
	}
	dec, acted := d.ctrl.Onset(now, now.Sub(prevAt), stats)
	if !acted {
		return
	}
	d.metrics.onsetDecisions.Inc()
	d.last.probs = d.writeProbabilities(dec)
	// The status keeps the last tick's signals and counts, with the
	// decision in force.
	last := &d.last.decision
	last.DropProbability, last.Classes, last.Ports = dec.DropProbability, dec.Classes, dec.Ports
	last.Overloaded, last.OverloadSince, last.Reason = dec.Overloaded, dec.OverloadSince, dec.Reason
	d.recordEvents(dec)
	d.publish()
}

// writeProbabilities writes dec's per-port drop probabilities to the
// datapath (all 0 in mode off) and returns them.
func (d *Daemon) writeProbabilities(dec adaptive.Decision) map[olc.PortKey]float64 {
	probs := make(map[olc.PortKey]float64, len(dec.Ports))
	shed := make(map[olc.PortKey]bool, len(dec.Ports))
	for _, pd := range dec.Ports {
		p := pd.DropProbability
		if d.cfg.Mode == olc.ModeOff {
			p = 0
		}
		probs[pd.Key] = p
		shed[pd.Key] = pd.ShedRetransmits
	}
	if err := d.dp.SetDropProbabilities(probs); err != nil {
		d.log.Error("write drop probabilities", "err", err)
	}
	if err := d.dp.SetRetransmitShedding(shed); err != nil {
		d.log.Error("write retransmit shedding", "err", err)
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
