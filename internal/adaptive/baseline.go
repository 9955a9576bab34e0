package adaptive

// baseline is a port's normal p95, learnt for an auto target.
type baseline struct {
	value float64 // seconds
	ok    bool
	quiet int // consecutive ticks not overloaded
}

// The baseline's learning rates: fast down, slow up. A p95 below the
// baseline is the service at its best and teaches at once; one above it
// (a busier hour) moves it by a twentieth per tick.
const (
	baselineDown = 0.5
	baselineUp   = 0.05
	// baselineMaxRise is how far above the baseline a tick's p95 may lie
	// and still teach: beyond it the tick is queueing.
	baselineMaxRise = 1.5
	// baselineQuiet is how many ticks must be quiet before one teaches:
	// the first ticks after an overload still answer requests that
	// queued during it (Envoy disregards such samples for the same
	// reason, envoyproxy/envoy#11579).
	baselineQuiet = 3
)

// learn updates the baseline from a tick that is not overloaded: the loop
// idle, the resource law quiet, for baselineQuiet ticks in a row (once a
// baseline exists), the p95 available, below the target and within
// baselineMaxRise of the baseline. Never from an overloaded tick: the
// minimum RTT of Envoy's adaptive concurrency filter climbed with each
// measurement window under sustained load because it sampled requests
// that had queued under the load it limits (envoyproxy/envoy#11579) — a
// baseline learnt from the queue the loop holds would raise its own
// target without end.
func (b *baseline) learn(r PortResponse, overloaded bool, target float64, prm *Params) {
	if overloaded {
		b.quiet = 0
		return
	}
	if b.quiet++; b.quiet < baselineQuiet && b.ok || !r.Available || r.P95 <= 0 {
		return
	}
	m := r.P95
	if !b.ok {
		// No baseline: the first usable tick at or below the initial
		// target teaches it (a port whose first seconds are already over
		// it is held at the initial target until a quiet tick).
		if m <= prm.InitialTarget.Seconds() {
			b.value, b.ok = m, true
		}
		return
	}
	if m > target || m > baselineMaxRise*b.value {
		return
	}
	if m < b.value {
		b.value += baselineDown * (m - b.value)
	} else {
		b.value += baselineUp * (m - b.value)
	}
}
