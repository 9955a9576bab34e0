package adaptive

import (
	"math"
	"time"
)

// capacity is a port's capacity filter over Params.CapacityWindow: μ̂ is
// the windowed max of the ticks' answer rates (docs/controller.md §1).
type capacity struct {
	n     int       // the window's length in ticks
	slots []capSlot // the window's ticks, oldest first, at most n
	// lastSat is the newest saturated figure (answers/s; 0: none), satAge its age (seconds): status keeps them.
	lastSat, satAge float64
	// satAnswers and satDt are the answers and span (seconds) of the onset windows since the tick through which N* stood.
	satAnswers, satDt float64
	lastW             float64 // the newest such window's length (seconds)
}

// capSlot is one tick of the window.
type capSlot struct {
	rate      float64 // answers per second
	answers   float64 // answers (scaled by the sample rate)
	admitted  float64 // admitted starts: new connections and request starts not shed
	queued    float64 // the requests in flight gained over the tick (lost, if negative)
	saturated bool    // the shown figure's: full, or the ceiling refusing
	full      bool    // N* stood through the tick: its rate is μ̂ at once
}

// resize sets the window's length in ticks of interval, keeping the newest.
func (c *capacity) resize(prm Params, interval time.Duration) {
	c.n = max(1, int(math.Ceil(prm.CapacityWindow.Seconds()/interval.Seconds()-1e-9)))
	c.slots = c.slots[max(0, len(c.slots)-c.n):]
}

// tick adds one tick of dt seconds (> 0) in which queued requests were added to those in flight.
func (c *capacity) tick(answers, admitted, queued, dt float64, full, saturated bool) {
	saturated = saturated && answers > 0
	slot := capSlot{rate: answers / dt, answers: answers, admitted: admitted, queued: queued,
		saturated: saturated, full: full && saturated}
	if w := c.windowRate(); !slot.full && w > slot.rate {
		// Windows of it were saturated: the tick's own rate is what a cut left.
		slot.rate, slot.saturated = w, true
	}
	if len(c.slots) >= c.n { // the oldest go, in place
		c.slots = append(c.slots[:0], c.slots[len(c.slots)-c.n+1:]...)
	}
	c.slots, c.satAnswers, c.satDt = append(c.slots, slot), 0, 0
	if c.satAge += dt; slot.saturated {
		c.satAge = 0
	}
	if best := c.max(true); best > 0 {
		c.lastSat = best
	}
}

// window adds an onset window of w seconds through which N* stood, with its answers, and returns μ̂ with
// the rate of such windows since the tick once they span standingSpan: an underestimate holds itself (the
// law admits what it believes), an overestimate stands as a queue and a full tick replaces it.
func (c *capacity) window(answers, w float64) float64 {
	c.satAnswers, c.satDt, c.lastW = c.satAnswers+answers, c.satDt+w, w
	return c.now()
}

// windowRate is the answers per second of the saturated windows since the last tick (0: fewer than standingSpan of
// them, give or take half the last window: a timer's windows run a little short or long).
func (c *capacity) windowRate() float64 {
	if c.satDt < standingSpan.Seconds()-c.lastW/2 {
		return 0
	}
	return c.satAnswers / c.satDt
}

// max returns the largest answer rate in the window (0: none), of saturated ticks only when sat.
func (c *capacity) max(sat bool) float64 {
	best := 0.0
	for _, s := range c.slots {
		if s.saturated || !sat {
			best = math.Max(best, s.rate)
		}
	}
	return best
}

// now returns μ̂ for the law (answers/s): a full newest tick's rate, otherwise the window's max; at least what the
// saturated windows since the tick measured (windowRate), which a cut that empties the queue does not undo.
func (c *capacity) now() float64 {
	if n := len(c.slots); n > 0 && c.slots[n-1].full {
		return math.Max(c.slots[n-1].rate, c.windowRate())
	}
	return math.Max(c.max(false), c.windowRate())
}

// perStart returns a, the answers per admitted start over the window (0: unknown), the requests left
// in flight counted as the answers they will be (docs/controller.md §1, "Units").
func (c *capacity) perStart() float64 {
	var answers, admitted float64
	for _, s := range c.slots {
		answers += s.answers + s.queued
		admitted += s.admitted
	}
	if answers <= 0 || admitted <= 0 {
		return 0
	}
	return answers / admitted
}
