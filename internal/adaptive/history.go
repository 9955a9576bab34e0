package adaptive

import "math"

// history is a port's recent past as the law reads it: the onset windows'
// counts and the requests in flight at each window's end (every 50 ms), or
// the ticks' counts when no windows run. D, the demand (of), and the
// standing queue (standing) come from it.
type history struct {
	spans []span // oldest first, at most maxSpans
	// windowed is true when an onset window came since the last tick:
	// the windows cover the tick, which then adds nothing.
	windowed bool
}

// span is one window's or tick's record.
type span struct {
	counts
	inflight float64 // requests in flight at its end
	window   bool    // an onset window, not a tick
}

// maxSpans bounds the spans kept: a SYN retransmit timeout of the shortest
// onset interval or tick (10 ms), which covers the demand span (the longer
// of a retransmit timeout and a tick: one tick, if longer).
const maxSpans = int(SYNRetransmitTimeout / 0.010)

// window adds one onset window.
func (h *history) window(c counts, inflight float64) {
	h.spans = push(h.spans, span{counts: c, inflight: inflight, window: true}, maxSpans)
	h.windowed = true
}

// tick adds one tick's counts unless onset windows covered it.
func (h *history) tick(c counts, inflight float64) {
	if !h.windowed {
		h.spans = push(h.spans, span{counts: c, inflight: inflight}, maxSpans)
	}
	h.windowed = false
}

// rates are a demand in starts per second: all of them, and the first
// attempts among them (the rest are retransmits of SYNs the port dropped).
type rates struct{ all, first float64 }

// retx returns the retransmits per second.
func (r rates) retx() float64 { return math.Max(0, r.all-r.first) }

// rate returns the starts per second over the newest span seconds (at
// least the newest record); zero when nothing was counted.
func (h *history) rate(span float64) rates {
	var all, first, dt float64
	for i := len(h.spans) - 1; i >= 0; i-- {
		c := h.spans[i]
		if dt > 0 && dt+c.dt > span+1e-9 {
			break
		}
		all, first, dt = all+c.starts, first+c.first, dt+c.dt
	}
	if dt <= 0 {
		return rates{}
	}
	return rates{all: all / dt, first: first / dt}
}

// of returns D for the law: the starts arriving per second over span
// seconds, the time a shed client stays out (a SYN dropped now returns
// one retransmit timeout later, so over that span each waiting client
// counts once and a wave of returning retransmits is not read as new
// demand); or, while a long queue stands (queued), the larger of that and
// the rate over the last standingSpan. Then admitting less than arrives
// costs nothing, as the service has queued work to answer, while
// admitting more grows the queue: a step up in demand is taken within a
// window rather than a span.
func (h *history) of(span float64, queued bool) rates {
	r := h.rate(span)
	if queued {
		f := h.rate(standingSpan.Seconds())
		r = rates{all: math.Max(r.all, f.all), first: math.Max(r.first, f.first)}
	}
	return r
}

// recent returns the index of the oldest of the newest onset windows that
// fit in standingSpan (at least one); len(spans) when the newest record is
// not a window.
func (h *history) recent() int {
	i, dt := len(h.spans), 0.0
	for i > 0 && h.spans[i-1].window && (dt == 0 || dt+h.spans[i-1].dt <= standingSpan.Seconds()+1e-9) {
		dt += h.spans[i-1].dt
		i--
	}
	return i
}

// standing returns the standing queue: the fewest requests in flight at
// the end of the onset windows of the last standingSpan and at end (end
// alone without onset windows).
func (h *history) standing(end float64) float64 {
	m := end
	for _, s := range h.spans[h.recent():] {
		m = math.Min(m, s.inflight)
	}
	return m
}

// growing reports whether the requests in flight grew by more than by in
// each onset window of the last standingSpan.
func (h *history) growing(by float64) bool {
	i := h.recent()
	if i == len(h.spans) || i == 0 || !h.spans[i-1].window {
		return false
	}
	for ; i < len(h.spans); i++ {
		if h.spans[i].inflight-h.spans[i-1].inflight <= by {
			return false
		}
	}
	return true
}
