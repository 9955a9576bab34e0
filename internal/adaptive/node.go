package adaptive

import (
	"fmt"
	"math"
)

// nodeLaw is the node's resource law (docs/controller.md §3): a PI law in
// velocity form on the node pressure, whose pass rate caps every port's.
type nodeLaw struct {
	pass    float64 // MinPassRate..1
	on      bool    // shedding: from ActivationTicks over ticks until pass is back at 1
	over    int     // consecutive ticks over the target while not on
	prevErr float64 // the error of the previous tick while on
}

// The law's floors (docs/controller.md §7): e of pressure 0 is −Inf; a pass rate of 0 never recovers.
const (
	minError    = -1
	recoverFrom = 0.01
)

// errorOf is the law's error for pressure P: e = 1 − 1/P, floored at minError.
func errorOf(pressure float64) float64 { return math.Max(minError, 1-1/pressure) }

// step advances the law by one tick of d's signals and returns its reason:
// a tick over the target lowers the pass rate, one in the hysteresis band
// below it holds it, one below the band or without a usable signal raises it.
func (n *nodeLaw) step(d *Decision, prm *Params) string {
	over := d.PressureAvailable && d.Pressure > 1
	if !n.on {
		if !over {
			n.over = 0
			if !d.PressureAvailable {
				return "no usable signal"
			}
			return describe(d) + ": below the target"
		}
		if n.over++; n.over < prm.ActivationTicks {
			return fmt.Sprintf("%s over its threshold for %d of %d activation ticks", describe(d), n.over, prm.ActivationTicks)
		}
		n.on, n.over, n.prevErr = true, 0, 0
	}
	e := float64(minError)
	reason := "no usable signal: recovering"
	switch {
	case !d.PressureAvailable:
	case d.Pressure >= 1-prm.Hysteresis && d.Pressure <= 1:
		n.prevErr = errorOf(d.Pressure)
		return fmt.Sprintf("%s: within %.0f%% below the target, holding pass rate %.3f", describe(d), prm.Hysteresis*100, n.pass)
	default:
		e = errorOf(d.Pressure)
		reason = describe(d) + ": shedding"
		if !over {
			reason = describe(d) + ": below the target, recovering"
		}
	}
	f := 1 - prm.Ki*e - prm.Kp*(e-n.prevErr)
	n.prevErr = e
	if over {
		// A falling error while still over holds rather than releases.
		f = math.Min(f, 1)
	}
	base := n.pass
	if f > 1 {
		base = math.Max(base, recoverFrom)
	}
	n.pass = math.Min(1, math.Max(prm.MinPassRate, base*math.Max(f, 0)))
	if n.pass >= 1 && !over {
		n.on = false
		return reason + ", pass rate back at 1"
	}
	return fmt.Sprintf("%s, pass rate %.3f", reason, n.pass)
}

// describe names the driving signal of d, whose pressure is available,
// with its value and pressure, e.g. "cpu_busy 0.98 (pressure 1.23,
// threshold 0.8)".
func describe(d *Decision) string {
	for _, st := range d.Signals {
		if st.Signal == d.Driver {
			return fmt.Sprintf("%s %.3g (pressure %.2f, threshold %.3g)", st.Signal, st.Value, st.Pressure, st.Threshold)
		}
	}
	return fmt.Sprintf("pressure %.2f", d.Pressure)
}
