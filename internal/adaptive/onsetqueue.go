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
// onset window, the queue shows the step within one window.

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

// queueOnsetWork is the excess, in seconds of served work, from which the
// onset check cuts (a fifth of the tick's own floor, queueCutMin): a
// closed pool of 64 clients fills its queue up to its number in the first
// windows of a step and then waits for its answers, and cut at once its
// clients block in a SYN retransmit (1 s) and the pool empties
// (cpu-closed-pool on the plant: 0.83 C against 0.94 C without it).
const queueOnsetWork = 0.1

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

// growing reports whether each of the newest queueGrowthWindows windows
// brought more requests than were answered, together queueGrowth × as
// many: arrivals that outrun the service. A closed pool's clients fill the
// queue up to their number in the first window or two of a step and then
// each waits for its answer (arrivals ≈ answers): cut at once, they block
// in a SYN retransmit (1 s) and the pool empties (cpu-closed-pool on the
// plant: 92 % of 1 s windows at 0.8 × the mean with two windows); the
// tick's law sizes theirs.
func (q *queueOnset) growing() bool {
	if q.n < queueGrowthWindows {
		return false
	}
	var req, resp float64
	for i := 0; i < queueGrowthWindows; i++ {
		win := q.at(i)
		if win.requests <= win.responses {
			return false
		}
		req, resp = req+win.requests, resp+win.responses
	}
	return req >= queueGrowth*resp
}

// queueGrowthWindows is how many of the newest windows must each show the
// queue growing.
const queueGrowthWindows = 2

// queueGrowth is the ratio of requests to answers over the newest two
// windows from which the queue counts as outrun (growing).
const queueGrowth = 1.25

// rates returns the served rate (requests/s answered over the newest
// windows, up to onsetSpan, in which the service was busy from the start:
// the previous window ended with requests in flight) and the arrival rate
// (the newest window's, or the newest two's when higher).
func (q *queueOnset) rates() (served, arrived float64) {
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
	newest := q.at(0)
	arrived = newest.requests / newest.w
	if q.n > 1 {
		prev := q.at(1)
		arrived = math.Max(arrived, (newest.requests+prev.requests)/(newest.w+prev.w))
	}
	return served, arrived
}

// queueOnsets runs the onset check on every port's measured queue: stats
// hold each port's window counts (Response.Requests, Responses: in the
// window; Inflight at its end; no p95). Outside an overload of the port's
// queue, or in its first queueOnsetFirst, when the requests in flight
// exceed Little's law served × T by queueOnsetMin and by served × T (the
// queue holds twice what keeps the target) and grew in the window, the
// pass rate goes at once to what drains the excess within a tick (the
// tick's first-cut rule, queueCut), at most once a tick, and the ticks
// take over from there. It reports whether any port was cut.
func (c *Controller) queueOnsets(at time.Time, w float64, stats map[olc.PortKey]PortStats) (string, bool) {
	prm := &c.cfg.Params
	why := ""
	acted := false
	for i := range c.ports {
		ps := &c.ports[i]
		st, ok := stats[ps.cfg.Key]
		if !ok || !ps.cfg.Target.On() {
			continue
		}
		r := sanitize(st.Response)
		q := &ps.onset
		q.push(queueWindow{w: w, requests: r.Requests, responses: r.Responses, inflight: r.Inflight})
		if q.cut {
			q.afterReq, q.afterW = q.afterReq+r.Requests, q.afterW+w
		}
		l := &ps.loop
		T := l.targetFor(ps.cfg.Target, prm)
		// Cut once a tick: the windows right after a cut still bring
		// requests of connections admitted before it (one 50 ms window
		// of a few requests re-cut a 3 × step to half its first cut on
		// the harness), and the tick sizes from the rate since the cut.
		if q.cut || T <= 0 || (l.active && l.since >= queueOnsetFirst.Seconds()) {
			continue
		}
		served, arrived := q.rates()
		keep := served * T
		excess := r.Inflight - keep
		if served <= 0 || arrived <= 0 || excess < math.Max(math.Max(queueOnsetMin, queueOnsetShare*keep), queueOnsetWork*served) || !q.growing() {
			continue
		}
		// The tick's first-cut rule (queueCut), without its floor of half
		// a tick's work: admit served − excess ÷ tick of what arrives.
		dt := c.cfg.Interval.Seconds()
		ff := math.Max((served-excess/dt)/arrived, 1-maxLatencyCut2)
		if ff >= 1 {
			continue
		}
		next := math.Max(prm.MinPassRate, l.pass*ff)
		if next >= l.pass-1e-9 {
			continue
		}
		if !l.active {
			l.active, l.since, l.errOK = true, 0, false
		}
		l.pass, l.sinceCut, l.target, l.served = next, 0, T, served
		q.cut, q.afterReq, q.afterW = true, 0, 0
		acted = true
		if why != "" {
			why += "; "
		}
		why += fmt.Sprintf("%s: %.0f requests in flight where %.0f keep the target %.3gs (%.0f/s answered, %.0f/s arriving): pass rate %.3f before the tick",
			ps.cfg.Key, r.Inflight, keep, T, served, arrived, l.pass)
	}
	return why, acted
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
