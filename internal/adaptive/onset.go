package adaptive

import (
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// onsetSpan is the longest span of consecutive windows the onset check
// tests: a surge too small to pass in one short window passes over several
// (at 50 ms windows and 171/s that fit, a 3 × surge passes in one window, a
// 2 × surge over three), while the windows before a surge are not so many
// that they hide it.
const onsetSpan = 200 * time.Millisecond

// onsetMaxWindows bounds the history kept for onsetSpan (at the shortest
// OnsetInterval, 10 ms, 200 ms is 20 windows).
const onsetMaxWindows = 20

// Onset is the fast check the daemon runs between ticks, every
// Params.OnsetInterval: stats are the datapath's counts of the window of
// length window that ends at at, with each timed port's measured queue
// (Response: the requests started and answered in the window, the
// requests in flight at its end; no p95). It reports whether it decided,
// and the decision to apply then (the signals are the last tick's: no
// sample was taken).
//
// A tick sees a surge up to one interval after it arrives, and at 3 × the
// capacity every 100 ms of that queues 200 ms of work that delays all
// later requests. Where a port's queue is measured, its requests in flight
// show the surge (queueOnsets, onsetqueue.go); where it is not, its new
// connections against the saturation estimate do (surgeOnset,
// onsetsurge.go; docs/controller.md §0 and §3). With Params.OnsetInterval
// 0 or not below the tick interval it does nothing.
func (c *Controller) Onset(at time.Time, window time.Duration, stats map[olc.PortKey]PortStats) (Decision, bool) {
	prm := &c.cfg.Params
	w := window.Seconds()
	if w <= 0 {
		return Decision{}, false
	}
	for i := range c.ports {
		if st, ok := stats[c.ports[i].cfg.Key]; ok {
			c.ports[i].loop.cap.window(st.Response)
		}
	}
	if prm.OnsetInterval > 0 && prm.OnsetInterval < c.cfg.Interval {
		if why, ok := c.queueOnsets(w, stats); ok {
			d := c.onsetDecision(at)
			d.Reason = why
			c.finish(&d)
			c.mergeOverload(&d, true, why)
			c.allocate(&d)
			return d, true
		}
	}
	return c.surgeOnset(at, w, stats)
}

// onsetDecision is a decision between ticks: the last tick's signals with
// the controller's current state.
func (c *Controller) onsetDecision(at time.Time) Decision {
	l := &c.lastTick
	return Decision{
		At: at, Signals: l.Signals, Pressure: l.Pressure, SmoothedPressure: l.SmoothedPressure,
		PressureAvailable: l.PressureAvailable, Driver: l.Driver,
	}
}
