package adaptive

// baseline is a port's normal p95, learnt for an auto target.
type baseline struct {
	value float64 // seconds
	ok    bool
	quiet int // consecutive ticks not overloaded
	// floor is the no-load floor while no baseline exists: the p95 of
	// overloaded ticks whose queue had drained (learnFloor).
	floor   float64 // seconds
	floorOK bool
	// inflight is the requests in flight at the previous tick's end
	// (inflightOK: one was seen): a tick's queue grew by the change.
	inflight   float64
	inflightOK bool
}

// learnFloor updates the no-load floor from an overloaded tick of a port
// that has no baseline yet (a cold start into overload): a tick whose queue
// drained (fewer than queueBusy requests in flight at its end, steady: it
// did not grow) and whose p95 is below target (seconds, the target in
// force) and does not hold the throttle gap answered its requests without
// queueing, at its own load.
func (b *baseline) learnFloor(r PortResponse, steady, atQuota bool, target float64) {
	if b.ok || !r.Available || r.P95 <= 0 || r.P95 > target || atQuota || r.Inflight >= queueBusy || !steady {
		return
	}
	if !b.floorOK {
		b.floor, b.floorOK = r.P95, true
		return
	}
	if r.P95 < b.floor {
		b.floor += baselineDown * (r.P95 - b.floor)
	} else {
		b.floor += baselineUp * (r.P95 - b.floor)
	}
}

// steady reports whether the tick's queue did not grow: the requests in
// flight at its end are at most those at the previous tick's end, plus
// 10 % of the tick's answers and 2 requests of slack (a fold catches a
// request started and not yet answered). A queue that builds (a cold start
// into overload) ends each tick with more in flight; a slow service does
// not. Requests against answers would say the same on a protocol that
// answers every message, but not on one whose last message gets no answer
// (MySQL's COM_QUIT, PostgreSQL's Terminate, then the close): the datapath
// counts such a request abandoned, not in flight, while every tick starts
// more requests than it answers. The first tick seen, with no in flight
// before it, counts the growth as requests − answers (a slow service may
// hold a queue from its first tick). Records the tick's in flight.
func (b *baseline) steady(r PortResponse) bool {
	grew := r.Requests - r.Responses
	if b.inflightOK {
		grew = r.Inflight - b.inflight
	}
	b.inflight, b.inflightOK = r.Inflight, true
	return r.Responses > 0 && grew <= 0.1*r.Responses+2
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
func (b *baseline) learn(r PortResponse, steady, overloaded bool, target float64, prm *Params) {
	if overloaded {
		b.quiet = 0
		return
	}
	if b.quiet++; b.quiet < baselineQuiet && b.ok || !r.Available || r.P95 <= 0 {
		return
	}
	m := r.P95
	if !steady {
		return
	}
	if !b.ok {
		// No baseline: the first steady tick teaches it, whatever its
		// p95 (a service that takes 200 ms is slow, not overloaded); a
		// port whose queue grows from its first tick is held at the
		// initial target until a steady tick outside an overload.
		b.value, b.ok = m, true
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
