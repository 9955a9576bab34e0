package adaptive

import (
	"math"

	"github.com/olcd/olcd/internal/olc"
)

// The fluid backlog and its drain: what the saturation estimate says was
// admitted and not yet served, and the p that serves it within a tick
// (docs/controller.md §3). Like the estimate, only for ports whose queue
// is not measured.

// drainAdmitted is how far above the rate that fits the admitted rate may
// be on a pinned tick for the tick to confirm a backlog: at or under what
// fits, a pinned signal is the queue's work, not the new work's.
const drainAdmitted = 1.1

// drainStart is the backlog, as a share of one tick's work that fits under
// the threshold, from which a confirmed backlog is drained: below it, the
// estimate's own error (a few percent of every tick's work, summed over a
// pinned tick or two) would start drains in a steady overload.
const drainStart = 0.5

// drainMin is the backlog, as a share of one tick's work that fits under
// the threshold, below which a drain ends.
const drainMin = 0.1

// trackBacklog advances the backlog estimate by one tick: what was
// admitted less what the estimate's signal says was served (capRate ×
// its value, at most 1). A signal below its ceiling idled during the tick,
// so the queue emptied and only this tick's excess can remain; a pinned one
// adds to what was there. A stale tick, or one without the signal or the
// counts, holds the estimate: a starved sampler is likeliest when the CPU
// is pinned, and dropping the backlog then would end a drain with the queue
// still full. Without an estimate it is 0.
func (c *Controller) trackBacklog(s *olc.Snapshot, stale bool) {
	if !c.capOK {
		c.backlog = 0
		return
	}
	v, ok := s.Get(c.capSignal)
	if stale || !c.ratesOK || !ok || !validSample(c.capSignal, v) {
		return
	}
	excess := (c.admitted - c.capRate*math.Min(v, 1)) * c.dt
	if v < saturationLevel {
		c.backlog = math.Max(0, excess)
	} else {
		c.backlog = math.Max(0, c.backlog+excess)
	}
}

// feedforward returns the p the saturation estimate asks for on an over
// tick, and whether it has one: the p that admits what fits under the
// threshold, or, while a backlog drains, what fits less the backlog spread
// over one tick. A drain starts only once the signal confirms the backlog —
// still pinned although no more than drainAdmitted × what fits was admitted
// — and the backlog is at least drainStart of a tick's work; it never
// reaches a class the p that fits leaves untouched: a backlog is no reason
// to shed critical work.
func (c *Controller) feedforward(d *Decision, saturated bool) (float64, bool) {
	pe, rate, ok := c.sustainableP(d)
	if !ok || c.dt <= 0 {
		c.draining = false
		return 0, false
	}
	minDrain := drainMin * rate * c.dt
	if !c.draining && saturated && c.admitted <= drainAdmitted*rate && c.backlog > drainStart*rate*c.dt {
		c.draining = true
	}
	if !c.draining {
		return pe, true
	}
	c.draining = c.backlog > minDrain
	pf := math.Max(pe, 1-(rate-c.backlog/c.dt)/c.offered)
	return math.Min(pf, classCeiling(pe, c.cfg.Params.Bound(), c.weights)), true
}

// classCeiling is the node-level p at which the class that p reaches is at
// its bound: the most a node-level p may grow without shedding a class
// more protected than the ones p already sheds.
func classCeiling(p, bound float64, weights [olc.NumClasses]float64) float64 {
	var total float64
	for _, w := range weights {
		total += w
	}
	if total <= 0 {
		return bound
	}
	var cum float64
	for _, cl := range [...]olc.Class{olc.ClassBestEffort, olc.ClassNormal, olc.ClassCritical} {
		cum += weights[cl]
		if ceil := bound * cum / total; ceil >= p-1e-12 && weights[cl] > 0 {
			return ceil
		}
	}
	return bound
}
