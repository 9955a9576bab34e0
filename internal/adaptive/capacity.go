package adaptive

import "math"

// The port's capacity μ̂, measured while it is saturated: the largest
// rate of answers over the ticks of the last capacitySpan whose queue
// held requests throughout (docs/controller.md §3). Overload is when
// capacity is best measured: a saturated service answers as fast as it
// can, whatever the demand. A windowed max, as BBR's bottleneck bandwidth
// filter and go-zero's shedder take theirs; the window is the tick, not
// the 50 ms onset window, whose few answers (9 at 180/s) make the max of
// sixty of them nearly twice the mean.

// capacityTicks is how many ticks the filter holds (capacitySpan at the
// default 500 ms interval).
const capacityTicks = 6

// capacity is one port's capacity filter.
type capacity struct {
	req, conn [capacityTicks]float64 // answers/s and connections/s of each saturated tick (0: not saturated)
	next      int
	// last is the newest estimate (answers/s, connections/s) and its age
	// (seconds since the newest saturated tick), kept once the ring is
	// empty so that a recovery after a quiet spell has a figure.
	lastReq, lastConn, age float64
	ok                     bool
	inflight               float64 // in flight at the previous tick's end
	idle                   bool    // an onset window of this tick ended with none in flight
}

// window notes one onset window's in flight at its end.
func (c *capacity) window(r PortResponse) {
	if r.Inflight < 1 {
		c.idle = true
	}
}

// tick adds one tick of dt seconds: st's answers count when requests were
// in flight at its start, at its end and at the end of every onset window
// within it (the service never ran out of work).
func (c *capacity) tick(st PortStats, dt float64) {
	r := st.Response
	saturated := dt > 0 && r.Responses > 0 && c.inflight >= 1 && r.Inflight >= 1 && !c.idle
	c.inflight, c.idle = r.Inflight, false
	c.req[c.next], c.conn[c.next] = 0, 0
	if saturated {
		c.req[c.next] = r.Responses / dt
		if admitted := float64(st.New - min(st.Dropped, st.New)); r.Requests > 0 && admitted > 0 {
			// Connections answered: the answers over the tick's
			// requests per admitted connection (keep-alive).
			c.conn[c.next] = r.Responses / (r.Requests / admitted) / dt
		}
	}
	c.next = (c.next + 1) % capacityTicks
	c.age += dt
	best := -1
	for i, x := range c.req {
		if x > 0 && (best < 0 || x > c.req[best]) {
			best = i
		}
	}
	if best >= 0 {
		c.lastReq, c.lastConn, c.ok = c.req[best], c.conn[best], true
	}
	if saturated {
		c.age = 0
	}
}

// mu returns μ̂ (answers/s), 0 when never measured.
func (c *capacity) mu() float64 {
	if !c.ok || math.IsNaN(c.lastReq) {
		return 0
	}
	return c.lastReq
}
