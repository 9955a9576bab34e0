package adaptive

import (
	"math"
	"slices"
)

// history is a port's recent windows (the ticks when no windows run): their
// counts and the requests in flight at their ends, which D (of) and the
// standing queue (standing) read.
type history struct {
	spans    []span  // oldest first; the newest maxSpans are read, up to twice that kept
	windowed bool    // an onset window came since the last tick, so the windows cover it
	clock    float64 // the seconds recorded
}

// span is one window's or tick's record.
type span struct {
	counts
	inflight float64 // requests in flight at its end
	window   bool    // an onset window, not a tick
}

// maxSpans is two retransmit timeouts of the shortest windows (docs/controller.md §7).
const maxSpans = int(2 * SYNRetransmitTimeout * 1e9 / float64(minInterval)) // minInterval in ns

// add records an onset window, or a tick unless windows covered it.
func (h *history) add(c counts, inflight float64, window bool) {
	if window || !h.windowed { // trimmed by half when full: no shift every window
		h.clock += c.dt
		if h.spans = append(h.spans, span{counts: c, inflight: inflight, window: window}); len(h.spans) >= 2*maxSpans {
			h.spans = append(h.spans[:0], h.spans[maxSpans:]...)
		}
	}
	h.windowed = window
}

// rates are a demand in starts per second: all, and the first attempts (the rest retransmit SYNs the port dropped).
type rates struct{ all, first float64 }

// retx returns the retransmits per second.
func (r rates) retx() float64 { return math.Max(0, r.all-r.first) }

// newest returns the newest records that fit in secs seconds, at least the newest one.
func (h *history) newest(secs float64) []span {
	i, dt := len(h.spans), 0.0
	for i > max(0, len(h.spans)-maxSpans) && (dt == 0 || dt+h.spans[i-1].dt <= secs+1e-9) {
		dt += h.spans[i-1].dt
		i--
	}
	return h.spans[i:]
}

// sum returns the counts of the newest records that fit in secs seconds.
func (h *history) sum(secs float64) (c counts) {
	for _, s := range h.newest(secs) {
		c.starts, c.first, c.admitted, c.dt = c.starts+s.starts, c.first+s.first, c.admitted+s.admitted, c.dt+s.dt
	}
	return c
}

// rate returns the starts per second over the newest secs seconds.
func (h *history) rate(secs float64) rates {
	c := h.sum(secs)
	return rates{all: c.starts / math.Max(c.dt, 1e-9), first: c.first / math.Max(c.dt, 1e-9)}
}

// of returns D (docs/controller.md §1): the starts per second over span seconds, the time a shed client
// stays out, so that each waiting client counts once; while a long queue stands (queued), at least the
// rate over the last standingSpan, so that a step up is taken within a window.
func (h *history) of(span float64, queued bool) rates {
	r := h.rate(span)
	if !queued {
		return r
	}
	f := h.rate(standingSpan.Seconds())
	return rates{all: math.Max(r.all, f.all), first: math.Max(r.first, f.first)}
}

// recent returns the index of the oldest of the newest onset windows that fit in standingSpan (at least one);
// len(spans) when the newest record is not a window.
func (h *history) recent() int {
	i := len(h.spans)
	for n := len(h.newest(standingSpan.Seconds())); n > 0 && h.spans[i-1].window; n-- {
		i--
	}
	return i
}

// standing returns the standing queue: the fewest requests in flight at the end of the onset windows of the last
// standingSpan and at end (end alone without onset windows).
func (h *history) standing(end float64) float64 {
	m := end
	for _, s := range h.spans[h.recent():] {
		m = math.Min(m, s.inflight)
	}
	return m
}

// growing reports whether the requests in flight grew by more than by in each onset window of the last standingSpan.
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

// refused reports whether the ceiling refused a start in the newest secs
// seconds; below, whether every record of them ended with at most n in flight.
func (h *history) refused(secs float64) bool {
	return slices.ContainsFunc(h.newest(secs), func(s span) bool { return s.ceiled > 0 })
}
func (h *history) below(secs, n float64) bool {
	return !slices.ContainsFunc(h.newest(secs), func(s span) bool { return s.inflight > n })
}

// returning reports whether at least returnShare of the starts shed
// between 2 × secs and secs ago came back as SYN retransmits in the newest
// secs (a retransmit timeout).
func (h *history) returning(secs float64) bool {
	now, both := h.sum(secs), h.sum(2*secs)
	shed := both.starts - both.admitted - (now.starts - now.admitted)
	return shed > 0 && now.starts-now.first >= returnShare*shed
}
