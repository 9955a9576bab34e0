package adaptive

import (
	"fmt"
	"math"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// The onset check on the measured queue: between ticks, a port's requests
// in flight against Little's law. A tick sees a 3 × step up to an interval
// after it arrives, and by then ~25 times the requests that keep the
// target are in flight (the harness: ~158 where ~6 keep it); read every
// onset window, the queue shows the step within three (docs/controller.md
// §0).

// queueWindows is how many onset windows a port's history keeps: the
// served rate is measured over up to onsetSpan of them.
const queueWindows = onsetMaxWindows

// queueOnsetMin is the fewest requests in flight beyond what keeps the
// target from which the onset check cuts: a handful of simultaneous
// requests is a burst of any service, not a queue, however small its
// capacity × target.
const queueOnsetMin = 10

// queueOnsetFirst is how long into an overload of a port's queue the onset
// check may still cut it between ticks (two ticks at the default): the
// first ticks of a step see a queue the law's own steps take seconds to
// drain; afterwards the tick's law alone moves the pass rate.
const queueOnsetFirst = time.Second

// queueOnsetShare is the excess over Little's served × T, as a share of
// it, from which the onset check cuts (besides queueOnsetMin).
const queueOnsetShare = 0.5

// queueBusy is the fewest requests in flight at a window's end from which
// the next window counts as busy from its start: its answers measure the
// served rate.
const queueBusy = queueOnsetMin / 2

// queueWindow is one onset window of a port's measured queue.
type queueWindow struct {
	w         float64 // seconds
	requests  float64 // requests that reached the server (scaled)
	responses float64 // requests answered (scaled)
	inflight  float64 // requests in flight at the window's end (scaled)
}

// queueOnset is one port's onset state on its measured queue.
type queueOnset struct {
	recent [queueWindows]queueWindow // ring, newest at next-1
	next   int
	n      int // windows held
	// cut is set when the onset check cut the port in the current tick:
	// the tick's own counts then mix the arrivals before the cut with
	// those after, and its first cut uses the rate since the cut
	// (afterReq ÷ afterW) instead.
	cut              bool
	afterReq, afterW float64
	pass             float64 // the loop's pass rate while the windows held were taken
}

// push appends a window to the ring.
func (q *queueOnset) push(win queueWindow) {
	q.recent[q.next] = win
	q.next = (q.next + 1) % queueWindows
	q.n = min(q.n+1, queueWindows)
}

// at returns the i-th newest window (0 the newest); i < q.n.
func (q *queueOnset) at(i int) *queueWindow {
	return &q.recent[(q.next-1-i+2*queueWindows)%queueWindows]
}

// outrun reports whether a surge outruns the service: each of the newest
// queueGrowthWindows windows brought queueSurge × as many requests as were
// answered (an open-loop surge: 3 × on the harness), or queueColdSurge ×
// on a cold start (cold: an auto target without a baseline yet), and the
// excess over Little's served × T is at least queueOnsetMin and
// queueOnsetShare × served × T.
//
// A closed pool's clients fill the queue up to their number at up to
// twice the answers (php-closed-pool on the plant: 320–400/s arriving
// against 180/s answered for up to 0.7 s), then each waits for its answer;
// cut at once, they block in a SYN retransmit (1 s) and the pool empties:
// php-closed-pool 0.91–0.93 C against 0.97 C with the ticks alone on the
// plant at a ratio of 1.25–1.5. A service that has no baseline yet has no
// clients blocked in its queue: from idle to 1.5 C at 1.25 × the cold
// starts rose from 0.948/0.938/0.926 C (cpu/pool/php, means of 10 seeds)
// to 0.980/0.976/0.959 C, closed pools' cold starts unchanged.
func (q *queueOnset) outrun(excess, keep float64, cold bool) bool {
	ratio := float64(queueSurge)
	if cold {
		ratio = queueColdSurge
	}
	if q.n < queueGrowthWindows {
		return false
	}
	for i := 0; i < queueGrowthWindows; i++ {
		if win := q.at(i); win.requests < ratio*win.responses || win.requests <= win.responses {
			return false
		}
	}
	return excess >= math.Max(queueOnsetMin, queueOnsetShare*keep)
}

// queueGrowthWindows is how many of the newest windows must each show the
// queue outrun: a closed pool fills within one or two.
const queueGrowthWindows = 3

// queueSurge and queueColdSurge are the ratios of requests to answers in
// each of the newest windows from which the queue counts as outrun by a
// surge, with a baseline and on a cold start.
const (
	queueSurge     = 2
	queueColdSurge = 1.25
)

// rates returns the served rate (requests/s answered over the newest
// windows, up to onsetSpan, in which the service was busy from the start:
// the previous window ended with requests in flight) and the arrival rate
// (the newest window's, or the newest two's when higher).
func (q *queueOnset) rates() (served, arrived, busy float64) {
	var resp, w float64
	for i := 0; i < q.n && w < onsetSpan.Seconds()-1e-9; i++ {
		win := q.at(i)
		if i > 0 && (i+1 >= q.n || q.at(i+1).inflight < queueBusy) {
			break // this window started idle: it served less than it could
		}
		resp, w = resp+win.responses, w+win.w
	}
	if w > 0 {
		served = resp / w
	}
	busy = w
	newest := q.at(0)
	arrived = newest.requests / newest.w
	if q.n > 1 {
		prev := q.at(1)
		arrived = math.Max(arrived, (newest.requests+prev.requests)/(newest.w+prev.w))
	}
	return served, arrived, busy
}

// queueOnsets runs the onset check on every port's measured queue: stats
// hold each port's window counts (Response.Requests, Responses: in the
// window; Inflight at its end; no p95). Outside an overload of the port's
// queue, or in its first queueOnsetFirst, when a surge outruns the
// service (outrun: three windows at twice the answers or more, the
// requests in flight beyond Little's law served × T), the pass rate goes
// at once to what drains the excess within a tick (the
// tick's first-cut rule, queueCut), at most once a tick, and the ticks
// take over from there. It reports whether any port was cut.
func (c *Controller) queueOnsets(w float64, stats map[olc.PortKey]PortStats) (string, bool) {
	why := ""
	acted := false
	// Classes keep their order, as at the tick: a port is not cut while a
	// port of a less protected class sheds with room to shed more.
	lessSheds := false
	for k := int(olc.NumClasses) - 1; k >= 0; k-- {
		sheds := false
		for i := range c.ports {
			ps := &c.ports[i]
			if ps.cfg.Class != olc.Class(k) {
				continue
			}
			if msg, cut := c.queueOnset(ps, w, stats, lessSheds); cut {
				if acted {
					why += "; "
				}
				why, acted = why+msg, true
			}
			sheds = sheds || (ps.loop.active && ps.loop.pass > c.cfg.Params.MinPassRate+1e-9)
		}
		lessSheds = lessSheds || sheds
	}
	return why, acted
}

// queueOnset is queueOnsets for one port: it keeps the port's window and,
// unless held (a less protected class sheds), cuts the port when a surge
// outruns its service. It reports whether it cut, and why.
func (c *Controller) queueOnset(ps *portState, w float64, stats map[olc.PortKey]PortStats, held bool) (string, bool) {
	prm := &c.cfg.Params
	st, ok := stats[ps.cfg.Key]
	if !ok || !ps.cfg.Target.On() {
		return "", false
	}
	r := sanitize(st.Response)
	q, l := &ps.onset, &ps.loop
	if l.pass != q.pass {
		// Windows taken at another pass rate (a cut, the tick's or this
		// check's) say nothing of the arrivals now.
		q.n, q.pass = 0, l.pass
	}
	q.push(queueWindow{w: w, requests: r.Requests, responses: r.Responses, inflight: r.Inflight})
	if q.cut {
		q.afterReq, q.afterW = q.afterReq+r.Requests, q.afterW+w
	}
	T := l.targetFor(ps.cfg.Target, prm)
	// Cut once a tick: the windows right after a cut still bring requests
	// of connections admitted before it (one 50 ms window of a few
	// requests re-cut a 3 × step to half its first cut on the harness),
	// and the tick sizes from the rate since the cut.
	if held || q.cut || T <= 0 || (l.active && l.since >= queueOnsetFirst.Seconds()) {
		return "", false
	}
	served, arrived, busy := q.rates()
	keep := served * T
	excess := r.Inflight - keep
	// A cold start's served rate is measured over the whole span: a
	// service just started answers slowly at first (the harness's
	// capacity-halved start read 80/s of its 180/s over 150 ms, and the
	// cut to 0.17 left it at 0.51 C).
	cold := ps.cfg.Target.Auto && !l.base.ok
	if served <= 0 || arrived <= 0 || (cold && busy < onsetSpan.Seconds()-1e-9) || !q.outrun(excess, keep, cold) {
		return "", false
	}
	// The tick's first-cut rule (queueCut), without its floor of half a
	// tick's work: admit served − excess ÷ tick of what arrives.
	dt := c.cfg.Interval.Seconds()
	ff := math.Max((served-excess/dt)/arrived, 1-maxLatencyCut2)
	next := math.Max(prm.MinPassRate, l.pass*ff)
	if ff >= 1 || next >= l.pass-1e-9 {
		return "", false
	}
	if !l.active {
		l.active, l.since, l.errOK = true, 0, false
	}
	l.pass, l.sinceCut, l.target, l.served = next, 0, T, served
	q.cut, q.afterReq, q.afterW = true, 0, 0
	return fmt.Sprintf("%s: %.0f requests in flight where %.0f keep the target %.3gs (%.0f/s answered, %.0f/s arriving): pass rate %.3f before the tick",
		ps.cfg.Key, r.Inflight, keep, T, served, arrived, l.pass), true
}

// afterQueueOnset is a tick's view of a port the onset check cut during
// it: the requests of the tick are those the pass rate in force admits at
// the rate measured since the cut, so that the tick's first-cut rule sizes
// from the cut's own arrivals rather than cutting again for those before
// it. It clears the mark: from the next tick the counts are the cut's.
func (q *queueOnset) afterQueueOnset(st PortStats, dt float64) PortStats {
	if !q.cut {
		return st
	}
	if q.afterW > 0 && st.Response.Requests > 0 {
		st.Response.Requests = math.Min(st.Response.Requests, q.afterReq/q.afterW*dt)
	}
	q.cut, q.afterReq, q.afterW = false, 0, 0
	return st
}
