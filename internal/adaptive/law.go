package adaptive

import (
	"fmt"
	"math"
	"time"
)

// The resource law: the overload state machine and the velocity-form PI
// law on the node pressure (docs/controller.md §2–3).

// saturationLevel is the value from which a fraction signal is considered
// pinned at its ceiling: a CPU at 100 % reads 0.95..1.0 through sampling
// jitter and co-scheduled idle moments, and its pressure then says nothing
// about how far it is overloaded.
const saturationLevel = 0.95

// maxSaturatedCut bounds the boosted share of the pass rate removed in one
// tick: at most half of what passes is cut, so three saturated ticks after the
// first still leave 1/8 passing before the law sees the plant again.
const maxSaturatedCut = 0.5

// minError floors the law's error: e = −1 (pressure 0.5) already asks to
// double the admitted work, more than any recovery step allows. Without the
// floor a tick at pressure 0 (an idle PSI resource) gives e = −Inf, and the
// next over tick's Kp × (e − e_prev) is +Inf, or NaN with Kp = 0, which
// would leave p at NaN for good.
const minError = -1

// errorOf is the law's error for node pressure P: e = 1 − 1/P, the share of
// the currently admitted work that is above the target (0 at the target,
// P − 1 to first order), floored at minError for P ≤ 0.5.
func errorOf(pressure float64) float64 {
	if pressure <= 0.5 {
		return minError
	}
	return 1 - 1/pressure
}

// law advances the overload state machine and the velocity-form PI law.
//
// A tick is over (pressure > 1), healthy (pressure ≤ 1, or no usable
// signal) or, inside the hysteresis band [1 − Hysteresis, 1], healthy but
// not low enough to release. Over ticks raise p by the law; p falls only on
// ticks below the band (or without signal) that follow at least Cooldown
// healthy ticks, by the law's own decrease and at most RecoveryStep.
func (c *Controller) law(d *Decision) {
	prm := &c.cfg.Params
	bound := prm.Bound()
	// Outside an overload the raw pressure and the activation count decide;
	// inside, the smoothed pressure does, so that noise neither ratchets p up
	// nor releases it.
	switch {
	case !d.PressureAvailable:
		c.smoothOK = false
	case c.overloaded && c.smoothOK:
		c.smooth += prm.Smoothing * (d.Pressure - c.smooth)
	default:
		c.smooth, c.smoothOK = d.Pressure, true
	}
	d.SmoothedPressure = c.smooth
	over := c.smoothOK && c.smooth > 1
	below := !c.smoothOK || c.smooth < 1-prm.Hysteresis

	// An onset drain (onset.go) runs at the onset check's cadence; this
	// tick's signals still mix the traffic before the surge with the
	// drain, so the tick holds p, or ends a drain that outlived its limit.
	if c.onset.active {
		if d.At.Before(c.onset.until) {
			// The split of the surge the drain was planned for, not the
			// pre-surge demand this tick measured: a drain capped at the
			// less protected classes stays there.
			c.weights, c.attempts = c.onset.weights, c.onset.attempts
			d.Reason = fmt.Sprintf("%s: holding while a surge's backlog drains (%.0f connections)", describe(d), c.onset.backlog)
		} else {
			d.Reason = c.endOnset(d.At)
		}
		c.finish(d)
		return
	}

	if !c.overloaded {
		if over {
			c.overTicks++
		} else {
			c.overTicks = 0
		}
		if c.overTicks < prm.ActivationTicks {
			d.Reason = c.quietReason(d)
			c.finish(d)
			return
		}
		c.startOverload(d.At)
		d.Events = append(d.Events, Event{Kind: EventOverloadStart, Reason: fmt.Sprintf(
			"%s over its threshold for %d consecutive ticks", describe(d), prm.ActivationTicks)})
	}

	if over {
		c.healthy = 0
	} else {
		c.healthy++
	}
	var delta float64
	saturated := false
	understated := c.afterOnset && !over && c.estimateUnderstated(d)
	forgot := c.checkEstimate(d, over)
	// The queue has emptied once the driver reads below its threshold: the
	// service idled during the tick.
	drained := c.draining && d.PressureAvailable && d.Pressure < 1
	if drained {
		c.backlog = 0
	}
	switch {
	case understated:
		// The onset check cut on an estimate that the first tick after
		// its drain disproves the other way: the service did far less
		// work than the estimate predicted for what was admitted.
		c.saturated, c.prevErr, c.smoothOK = 0, 0, false
		pe, rate, _ := c.sustainableP(d)
		delta = pe - c.p
		c.healthy = prm.Cooldown - 1
		d.Reason = fmt.Sprintf("%s while %.0f new/s were admitted: the saturation estimate understated the capacity, relearnt (%.0f of %.0f new/s fit under the threshold)",
			describe(d), c.admitted, rate, c.offered)
	case drained:
		c.saturated, c.draining = 0, false
		c.prevErr = errorOf(d.Pressure)
		// The smoothed pressure carries the drain's pinned ticks: it
		// restarts from the next tick's reading, the first of the new p.
		c.smoothOK = false
		note := ""
		if pe, rate, ok := c.sustainableP(d); ok && pe < c.p {
			delta = pe - c.p
			note = fmt.Sprintf(" to the saturation estimate (%.0f of %.0f new/s fit under the threshold)", rate, c.offered)
		}
		// Hold the next tick: the signal shows the new p a tick later.
		c.healthy = prm.Cooldown - 1
		if delta < 0 {
			// Nothing to return to: the p before was the drain's.
			c.sinceJump, c.pBeforeJump = 1, 0
		}
		d.Reason = fmt.Sprintf("%s: backlog drained, shedding down%s", describe(d), note)
	case over:
		e := errorOf(c.smooth)
		note := ""
		saturated = c.saturatedDriver(d)
		// The ceiling caps the driver's pressure, and while a queue builds
		// the signal lags the work admitted; the admitted rate against
		// what fit under the threshold does neither. Only at the start of
		// an overload: later the admitted rate also carries the retries
		// of what was shed, which the signal already answers.
		useEstimate := saturated || c.overTicksIn < estimateTicks
		if useEstimate {
			if est, rate, ok := c.saturationPressure(d); ok && est > c.smooth {
				e = errorOf(est)
				note = fmt.Sprintf("; estimate: %.0f new/s admitted, %.0f/s fit under the threshold (pressure %.2f)", c.admitted, rate, est)
			}
		}
		c.overTicksIn++
		gain := prm.Ki * e
		if saturated {
			// The driver sits at its ceiling: the pressure understates the
			// overload, so each further saturated tick multiplies the step.
			gain *= math.Pow(prm.SaturationBoost, float64(c.saturated))
			gain = math.Min(gain, maxSaturatedCut)
			c.saturated++
		} else {
			c.saturated = 0
		}
		delta = c.scale(true) * (gain + prm.Kp*(e-c.prevErr))
		// Falling but still above target: hold rather than release
		// before the cooldown.
		delta = math.Min(math.Max(delta, 0), prm.MaxStep)
		c.prevErr = e
		// Where the estimate sizes the overload, p goes straight to what
		// admits the work that fits less the backlog to drain within the
		// next tick, not by the law's bounded steps: every tick of a 3×
		// overload at a partial cut queues work its clients abandon.
		if wasDraining := c.draining; useEstimate || wasDraining {
			if pf, ok := c.feedforward(d, saturated); ok && (pf > c.p+delta || wasDraining) {
				// While draining, p follows the plan down as the backlog
				// empties although the signal stays pinned until the
				// queue is gone: holding the bound would idle the service.
				delta = pf - c.p
				rate, _ := c.fitRate(d)
				note = fmt.Sprintf("; estimate: %.0f new/s admitted, %.0f/s fit under the threshold", c.admitted, rate)
				if c.draining {
					note += fmt.Sprintf(", draining a backlog of %.0f connections", c.backlog)
				}
			}
		}
		d.Reason = fmt.Sprintf("%s: shedding%s", describe(d), note)
	case !below:
		c.saturated = 0
		c.prevErr = errorOf(c.smooth)
		d.Reason = fmt.Sprintf("%s: within %.0f%% below the target, holding", describe(d), prm.Hysteresis*100)
	case c.healthy <= prm.Cooldown:
		c.saturated = 0
		if c.smoothOK {
			c.prevErr = errorOf(c.smooth)
		}
		d.Reason = fmt.Sprintf("%s: healthy for %d of %d cooldown ticks, holding", describe(d), c.healthy, prm.Cooldown)
	case !c.smoothOK:
		c.saturated = 0
		delta = -prm.RecoveryStep
		c.prevErr = 0
		d.Reason = "no usable signal: recovering"
	default:
		c.saturated = 0
		e := errorOf(c.smooth)
		want := c.scale(false) * (prm.Ki*e + prm.Kp*(e-c.prevErr))
		// The law's own decrease, at most RecoveryStep: progressive
		// recovery that probes capacity rather than jumping back.
		fall := math.Min(prm.RecoveryStep, math.Max(-want, 0))
		if math.IsNaN(fall) {
			fall = prm.RecoveryStep
		}
		note := ""
		// Far above what the saturation estimate says fits (typically
		// after shedding at the bound to drain a backlog), fall straight
		// to it: it admits what put the signal at its threshold. Near it
		// the estimate's noise would make p jitter, and the law decides.
		if pe, rate, ok := c.sustainableP(d); ok && c.p-pe > math.Max(fall, estimateGap) {
			fall = c.p - pe
			note = fmt.Sprintf(" to the saturation estimate (%.0f of %.0f new/s fit under the threshold)", rate, c.offered)
			// The signal shows this jump one tick later: hold for that
			// tick rather than keep falling on a reading of the old p.
			c.healthy = prm.Cooldown - 1
			c.sinceJump, c.pBeforeJump = 1, c.p
			// The smoothed pressure describes the old p.
			c.smoothOK = false
		}
		delta = -fall
		c.prevErr = e
		d.Reason = fmt.Sprintf("%s: healthy, recovering%s", describe(d), note)
	}
	if forgot {
		d.Reason += "; the saturation estimate is forgotten: pinned on two ticks while admitting what it says fits (the capacity is lower than when it was learnt)"
		// A recovery jump was a probe the signal answered: back to the
		// p that held the signal before it, from where the law recovers.
		if back := c.pBeforeJump - c.p; back > delta {
			delta = back
			d.Reason += fmt.Sprintf(", p back to %.2f", c.pBeforeJump)
		}
		c.pBeforeJump = 0
	}
	c.p = math.Min(math.Max(c.p+delta, 0), bound)
	if c.p == bound && over {
		d.Reason += fmt.Sprintf(" at the bound %.2f (min_pass_rate %.2f)", bound, prm.MinPassRate)
	}

	if c.p == 0 && below {
		d.Events = append(d.Events, Event{Kind: EventOverloadEnd, OverloadSince: c.since, Reason: fmt.Sprintf(
			"%s: drop probability back to 0 after %s", describe(d), d.At.Sub(c.since).Round(time.Millisecond))})
		c.overloaded, c.healthy, c.prevErr = false, 0, 0
		c.draining, c.sinceJump, c.pinnedAtFit, c.pBeforeJump = false, 0, 0, 0
		c.since = time.Time{}
	} else if d.At.Sub(c.lastEvent) >= prm.ContinueEvery {
		c.lastEvent = d.At
		d.Events = append(d.Events, Event{Kind: EventOverloadContinue, Reason: fmt.Sprintf(
			"%s: overloaded for %s", d.Reason, d.At.Sub(c.since).Round(time.Millisecond))})
	}
	c.finish(d)
}

// startOverload enters an overload at at, with nothing of a previous one
// carried over (the backlog estimate is the caller's: the tick keeps what
// it tracked before the start).
func (c *Controller) startOverload(at time.Time) {
	c.overloaded, c.since, c.lastEvent = true, at, at
	c.healthy, c.prevErr, c.overTicks, c.saturated, c.overTicksIn = 0, 0, 0, 0, 0
	c.draining, c.sinceJump, c.pinnedAtFit, c.pBeforeJump = false, 0, 0, 0
}

// saturatedDriver reports whether the driving signal is a fraction at its
// ceiling (≥ saturationLevel), where its pressure no longer grows with the
// overload.
func (c *Controller) saturatedDriver(d *Decision) bool {
	st := driverState(d)
	return st != nil && st.Signal.IsFraction() && st.Value >= saturationLevel
}

// finish copies the state into d and completes the overload events.
func (c *Controller) finish(d *Decision) {
	d.DropProbability = c.p
	d.Overloaded = c.overloaded
	if c.overloaded {
		d.OverloadSince = c.since
	}
	for i := range d.Events {
		ev := &d.Events[i]
		ev.At, ev.Pressure, ev.DropProbability, ev.Signals = d.At, d.Pressure, c.p, d.Signals
		if ev.OverloadSince.IsZero() {
			ev.OverloadSince = d.OverloadSince
		}
	}
}

// quietReason explains a tick outside an overload.
func (c *Controller) quietReason(d *Decision) string {
	switch {
	case !d.PressureAvailable:
		return "no usable signal"
	case d.Pressure > 1:
		return fmt.Sprintf("%s over its threshold for %d of %d activation ticks",
			describe(d), c.overTicks, c.cfg.Params.ActivationTicks)
	}
	return fmt.Sprintf("%s: below the target", describe(d))
}

// describe names the driving signal with its value and pressure, e.g.
// "cpu_busy 0.98 (pressure 1.23, threshold 0.8)".
func describe(d *Decision) string {
	if !d.PressureAvailable {
		return "no usable signal"
	}
	for _, st := range d.Signals {
		if st.Signal == d.Driver {
			return fmt.Sprintf("%s %.3g (pressure %.2f, threshold %.3g)", st.Signal, st.Value, st.Pressure, st.Threshold)
		}
	}
	return fmt.Sprintf("pressure %.2f", d.Pressure)
}
