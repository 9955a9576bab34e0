package adaptive

import (
	"fmt"
	"time"
)

// mergeOverload makes one overload of the resource law's and the ports'
// queue loops: it starts when either starts and ends when both have ended.
// The resource law's own start and end events inside a merged overload
// are dropped; the loops' are added.
func (c *Controller) mergeOverload(d *Decision, loops bool, why string) {
	was, now := c.merged, c.overloaded || loops
	if now && !was {
		c.mergedSince, c.mergedEvent = d.At, d.At
	}
	evs := d.Events[:0]
	started, ended := false, false
	for _, ev := range d.Events {
		switch {
		case ev.Kind == EventOverloadStart && was:
			continue
		case ev.Kind == EventOverloadEnd && now:
			continue
		case ev.Kind == EventOverloadStart:
			started = true
		case ev.Kind == EventOverloadEnd:
			ended = true
		case ev.Kind == EventOverloadContinue:
			c.mergedEvent = d.At
		}
		ev.OverloadSince = c.mergedSince
		evs = append(evs, ev)
	}
	d.Events = evs
	ev := Event{At: d.At, Pressure: d.Pressure, DropProbability: c.p, Signals: d.Signals, OverloadSince: c.mergedSince}
	switch {
	case now && !was && !started:
		ev.Kind, ev.Reason = EventOverloadStart, why
		d.Events = append(d.Events, ev)
	case was && !now && !ended:
		ev.Kind = EventOverloadEnd
		ev.Reason = fmt.Sprintf("response times back under their targets: drop probability back to 0 after %s", d.At.Sub(c.mergedSince).Round(time.Millisecond))
		d.Events = append(d.Events, ev)
	case now && !c.overloaded && d.At.Sub(c.mergedEvent) >= c.cfg.Params.ContinueEvery:
		c.mergedEvent = d.At
		ev.Kind = EventOverloadContinue
		ev.Reason = fmt.Sprintf("%s: overloaded for %s", why, d.At.Sub(c.mergedSince).Round(time.Millisecond))
		d.Events = append(d.Events, ev)
	}
	c.merged = now
	d.Overloaded = now
	d.OverloadSince = time.Time{}
	if now {
		d.OverloadSince = c.mergedSince
	} else {
		c.mergedSince = time.Time{}
	}
}
