package adaptive

import (
	"fmt"
	"math"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// The onset check on the new connections (Controller.surgeOnset): for
// ports whose queue is not measured, a surge of SYNs against what the
// saturation estimate says fits under the threshold starts the overload
// between ticks and drains what it queued (docs/controller.md §3).

// onsetSigmas is how many standard deviations of a Poisson count at the
// rate that fits a span's count must lie above it. Four let the arrivals of
// independent clients at 0.8–0.93 of the capacity start an overload about
// once a minute in 50 ms windows (the Poisson tail of a mean of 8 is far
// heavier than the normal one); five never did in TestQueuePlantOnsetQuiet,
// while a 3 × surge still passes in one window.
const onsetSigmas = 5

// onsetMinNew is the fewest new connections in one window that can start an
// overload: a handful of simultaneous requests is a burst of any service,
// not a surge, however small its capacity.
const onsetMinNew = 10

// onsetDrained is the backlog (connections) below which the onset's drain
// ends: less than one request of a queue is no queue.
const onsetDrained = 1

// onsetMargin is how much more than the estimated backlog the onset's
// drain serves. The estimate misses what is admitted between the window's
// end and the cut taking hold, and the service runs slower than capRate
// while it also handles the surge's SYNs: on the overload harness the
// latencies after the cut showed about 30 connections queued where the
// estimate said 21, and a drain that stopped at the estimate left the rest
// to empty at the few percent of capacity that what fits leaves free
// (600 ms of requests 30–90 ms late). Serving too much costs a window of
// admissions at most (~9 of 5000 connections in a 30 s step).
const onsetMargin = 0.5

// onsetWindow is one window's counts as the onset check keeps them.
type onsetWindow struct {
	end      time.Time
	w        float64 // length, seconds
	n        float64 // new connections
	demand   [olc.NumClasses]float64
	attempts [olc.NumClasses]float64
}

// onsetState is the onset check's state between its windows.
type onsetState struct {
	active  bool      // a surge's backlog is being drained; the tick holds p
	until   time.Time // the drain ends by then whatever the model says
	backlog float64   // new connections queued beyond what the service served
	offered float64   // new connections/s since the surge began (sumN ÷ sumW)
	sumN    float64   // new connections since the surge's span began
	sumW    float64   // seconds since the surge's span began
	// The estimate the drain was planned with, kept for its whole length:
	// a reload that drops the estimate mid-drain must not leave p at the
	// bound.
	capRate, fit float64
	// The surge's class split: the ticks inside the drain keep it, not
	// the pre-surge demand they measure.
	weights, attempts [olc.NumClasses]float64
	// recent holds the windows since the last overload, newest last, at
	// most onsetMaxWindows and onsetSpan.
	recent []onsetWindow
}

// surgeOnset is the onset check on the new connections, for ports whose
// queue is not measured. Outside an overload, when the new connections of
// the newest windows (any span of them up to onsetSpan) reach OnsetRatio ×
// what the saturation estimate says fits under the threshold, exceed it by
// onsetSigmas Poisson deviations and number at least onsetMinNew, it
// starts the overload at once: it sheds as hard as the bound and the
// classes allow until the backlog the surge queued (the admitted
// connections of the windows kept less what the service serves at full
// speed, capRate per second) is served, tracked window by window, then
// sheds what does not fit. The drain lasts at most one tick interval;
// meanwhile the ticks hold p, and afterwards the law goes on from there as
// from any first cut. Without an estimate on a fraction signal, or inside
// an overload it did not start, it does nothing.
func (c *Controller) surgeOnset(at time.Time, w float64, stats map[olc.PortKey]PortStats) (Decision, bool) {
	prm := &c.cfg.Params
	var n, adm float64
	var demand, attempts [olc.NumClasses]float64
	for i := range c.ports {
		st, ok := stats[c.ports[i].cfg.Key]
		if !ok {
			continue
		}
		cl := c.ports[i].cfg.Class
		n += float64(st.New)
		adm += float64(st.New - min(st.Dropped, st.New))
		demand[cl] += float64(st.Unique())
		attempts[cl] += float64(st.New)
	}
	if c.onset.active {
		return c.onsetDrain(at, w, n, adm)
	}
	if prm.OnsetInterval <= 0 || prm.OnsetInterval >= c.cfg.Interval || c.overloaded {
		// Windows from an overload or from before a pause say nothing
		// about the arrivals after it.
		c.onset.recent = c.onset.recent[:0]
		return Decision{}, false
	}
	c.pushWindow(onsetWindow{end: at, w: w, n: n, demand: demand, attempts: attempts})
	thr := c.cfg.Thresholds[c.capSignal]
	if !c.capOK || thr <= 0 {
		return Decision{}, false
	}
	fit := c.capRate * thr
	span, ok := c.surgeSpan(fit)
	if !ok {
		return Decision{}, false
	}

	// The surge's own split: the tick's smoothed demand still describes
	// the traffic before it.
	var sn, sw, total float64
	demand, attempts = [olc.NumClasses]float64{}, [olc.NumClasses]float64{}
	for _, win := range span {
		sn, sw = sn+win.n, sw+win.w
		for cl := range demand {
			demand[cl] += win.demand[cl]
			attempts[cl] += win.attempts[cl]
		}
	}
	// p was 0: everything that arrived was admitted, and the service
	// served at most capRate per second of it. Lindley's recursion of a
	// fluid queue over every window kept, not only the span: the surge
	// usually began inside the window before the span, whose excess is
	// queued too, and windows before the surge add nothing.
	backlog := 0.0
	for _, win := range c.onset.recent {
		backlog = math.Max(0, backlog+win.n-c.capRate*win.w)
	}
	for _, x := range demand {
		total += x
	}
	if total > 0 {
		c.weights, c.attempts = demand, attempts
	}
	// The rate of the newest window when it holds enough connections,
	// else the span's: the surge may have arrived within the span.
	offered := sn / sw
	if n >= onsetMinNew {
		offered = math.Max(offered, n/w)
	}
	pe := math.Max(0, 1-fit/offered)
	bound := prm.Bound()
	c.onset = onsetState{
		active:  true,
		until:   at.Add(c.cfg.Interval),
		backlog: backlog * (1 + onsetMargin),
		offered: offered,
		sumN:    sn,
		sumW:    sw,
		recent:  c.onset.recent[:0],
		capRate: c.capRate,
		fit:     fit,
		weights: c.weights, attempts: c.attempts,
	}
	c.startOverload(at)
	// The onset's own backlog replaces the tick's estimate.
	c.backlog = 0
	// The smoothed pressure describes the traffic before the surge.
	c.smoothOK = false
	c.p = c.drainP(pe, offered, w)
	d := c.onsetDecision(at)
	d.Reason = fmt.Sprintf("surge: %.0f new/s, %.1f × the %.0f/s that fit under the %s threshold (saturation estimate): shedding before the signals show it, draining a backlog of %.0f connections (%.0f with the margin)",
		offered, offered/fit, fit, c.capSignal, backlog, c.onset.backlog)
	d.Events = append(d.Events, Event{Kind: EventOverloadStart, Reason: d.Reason})
	if c.p >= bound {
		d.Reason += fmt.Sprintf(" at the bound %.2f (min_pass_rate %.2f)", bound, prm.MinPassRate)
	}
	c.allocate(&d)
	c.finish(&d)
	return d, true
}

// drainP is the p for the next window of an onset drain: what serves the
// backlog by the window's end at the service's full speed, at least pe,
// at most what the bound and the classes allow.
func (c *Controller) drainP(pe, offered, w float64) float64 {
	ceil := math.Min(classCeiling(pe, c.cfg.Params.Bound(), c.weights), c.cfg.Params.Bound())
	if offered <= 0 {
		return math.Min(pe, ceil)
	}
	admit := math.Max(0, c.onset.capRate*w-c.onset.backlog) / (offered * w)
	return math.Min(math.Max(pe, 1-admit), ceil)
}

// onsetDrain advances an onset drain by one window of n new connections, adm
// of them admitted: the backlog grows by what was admitted and shrinks by
// what the service served at full speed. When it is served, or the drain
// has lasted a tick interval, p falls to what fits of the rate since the
// surge began.
func (c *Controller) onsetDrain(at time.Time, w, n, adm float64) (Decision, bool) {
	c.onset.backlog = math.Max(0, c.onset.backlog+adm-c.onset.capRate*w)
	// The rate since the surge began: one 50 ms window of a Poisson
	// stream at 600/s scatters by ±18 %, and what fits is sized by it.
	c.onset.sumN, c.onset.sumW = c.onset.sumN+n, c.onset.sumW+w
	c.onset.offered = c.onset.sumN / c.onset.sumW
	if c.onset.backlog > onsetDrained && at.Before(c.onset.until) {
		from := c.p
		c.p = c.drainP(c.onsetPE(), c.onset.offered, w)
		if math.Abs(c.p-from) < 1e-9 {
			return Decision{}, false
		}
		d := c.onsetDecision(at)
		d.Reason = fmt.Sprintf("surge: draining a backlog of %.0f connections", c.onset.backlog)
		c.allocate(&d)
		c.finish(&d)
		return d, true
	}
	d := c.onsetDecision(at)
	d.Reason = c.endOnset(at)
	c.allocate(&d)
	c.finish(&d)
	return d, true
}

// onsetPE is the p that admits what fits (by the estimate the drain was
// planned with) of the rate since the surge began.
func (c *Controller) onsetPE() float64 {
	if c.onset.offered <= 0 {
		return c.p
	}
	return math.Min(math.Max(0, 1-c.onset.fit/c.onset.offered), c.cfg.Params.Bound())
}

// endOnset ends an onset drain, sets p to what fits and hands the overload
// to the law as after a first cut: the next ticks use the estimate, and
// the smoothed pressure restarts. It returns the reason.
func (c *Controller) endOnset(at time.Time) string {
	why := "backlog served"
	if c.onset.backlog > onsetDrained {
		why = fmt.Sprintf("drained for a tick interval, %.0f connections left to the law", c.onset.backlog)
	}
	c.p = c.onsetPE()
	fit, offered := c.onset.fit, c.onset.offered
	c.onset = onsetState{recent: c.onset.recent[:0]}
	c.overTicksIn, c.saturated, c.prevErr, c.backlog, c.draining = 0, 0, 0, 0, false
	c.smoothOK, c.afterOnset, c.pinnedAtFit = false, true, 0
	return fmt.Sprintf("surge: %s, shedding what does not fit (%.0f of %.0f new/s)", why, fit, offered)
}

// pushWindow appends a window to the history and drops what is older than
// onsetSpan or beyond onsetMaxWindows.
func (c *Controller) pushWindow(win onsetWindow) {
	r := c.onset.recent
	// A window that does not follow the previous one (the check paused:
	// a reload, a failed read) starts a new history: older windows
	// describe another moment.
	if n := len(r); n > 0 {
		gap := win.end.Add(-time.Duration(win.w * float64(time.Second))).Sub(r[n-1].end)
		if gap < 0 {
			gap = -gap
		}
		if gap.Seconds() > win.w/2 {
			r = r[:0]
		}
	}
	r = append(r, win)
	var span float64
	keep := 0
	for i := len(r) - 1; i >= 0 && len(r)-i <= onsetMaxWindows; i-- {
		if span += r[i].w; span > onsetSpan.Seconds()+1e-9 && i < len(r)-1 {
			break
		}
		keep++
	}
	c.onset.recent = append(r[:0], r[len(r)-keep:]...)
}

// surgeSpan tests the spans of the newest windows, shortest first, and
// returns the first whose new connections reach OnsetRatio × what fits
// (fit per second), exceed it by onsetSigmas Poisson deviations and number
// at least onsetMinNew.
func (c *Controller) surgeSpan(fit float64) ([]onsetWindow, bool) {
	r := c.onset.recent
	var n, w float64
	for i := len(r) - 1; i >= 0; i-- {
		n, w = n+r[i].n, w+r[i].w
		expect := fit * w
		if n >= onsetMinNew && n >= c.cfg.Params.OnsetRatio*expect && n-expect >= onsetSigmas*math.Sqrt(expect) {
			return r[i:], true
		}
	}
	return nil, false
}
