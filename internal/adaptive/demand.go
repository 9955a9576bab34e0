package adaptive

import "math"

// demand is a port's arrivals over the recent past, from which the law
// reads D, the starts per second its pass rate applies to
// (docs/controller.md §1): the onset windows' counts when the daemon runs
// them (every 50 ms), the ticks' otherwise.
type demand struct {
	spans []counts // the newest first-attempt and start counts, oldest first
	// windowed is true when an onset window came since the last tick:
	// the windows cover the tick, which then adds nothing.
	windowed bool
}

// maxDemandSpans bounds the spans kept: a SYN retransmit timeout of the
// shortest onset interval or tick (10 ms), which covers the demand span
// (the longer of a retransmit timeout and a tick: one tick, if longer).
const maxDemandSpans = int(SYNRetransmitTimeout / 0.010)

// window adds one onset window's counts.
func (d *demand) window(c counts) {
	d.spans = push(d.spans, c, maxDemandSpans)
	d.windowed = true
}

// tick adds one tick's counts unless onset windows covered it.
func (d *demand) tick(c counts) {
	if !d.windowed {
		d.spans = push(d.spans, c, maxDemandSpans)
	}
	d.windowed = false
}

// rates are a demand in starts per second: all of them, and the first
// attempts among them (the rest are retransmits of SYNs the port dropped).
type rates struct{ all, first float64 }

// retx returns the retransmits per second.
func (r rates) retx() float64 { return math.Max(0, r.all-r.first) }

// rate returns the starts per second over the newest span seconds (at
// least the newest count); zero when nothing was counted.
func (d *demand) rate(span float64) rates {
	var all, first, dt float64
	for i := len(d.spans) - 1; i >= 0; i-- {
		c := d.spans[i]
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
func (d *demand) of(span float64, queued bool) rates {
	r := d.rate(span)
	if queued {
		f := d.rate(standingSpan.Seconds())
		r = rates{all: math.Max(r.all, f.all), first: math.Max(r.first, f.first)}
	}
	return r
}
