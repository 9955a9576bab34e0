package adaptive

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/resptime"
)

// PortResponse is a port's measured queue over one tick or onset window,
// from the datapath's response timing (internal/resptime).
type PortResponse struct {
	// Available is true when the tick had the minimum of timed responses;
	// P95 is meaningless otherwise (never 0 for "no data").
	Available bool
	// P95 is the 95th percentile of the tick's response times (seconds).
	P95 float64
	// Samples is the number of timed responses in the tick.
	Samples uint64
	// Requests and Responses are the numbers of requests that reached the
	// server and of those answered (scaled by the sample rate; 0: unknown).
	Requests, Responses float64
	// Inflight is the requests waiting or in service at the end, scaled by the sample rate.
	Inflight float64
	// Hist is the tick's histogram of response times (internal/resptime's; nil: only P95 known).
	Hist []uint64
}

// port is one protected port: its law on its measured capacity and queue
// (docs/controller.md §1), and what that law learnt.
type port struct {
	cfg        PortConfig
	cap        capacity        // μ̂ and the answers per start
	base       baseline        // the no-load p95 of an auto target
	pass       float64         // the law's pass rate, MinPassRate..1 (0..1 for retransmits last)
	ceil       int             // the ceiling on requests in flight in force (≥ 1; 0: none; docs/controller.md §1)
	held       int             // the ceiling in force at the previous tick's end (0: none)
	scale      float64         // the ceiling's share of N* that holds the p95 at the target (0 < x ≤ 1; set when a ceiling starts)
	onsetRate  float64         // starts per second over the standingSpan before the ceiling started
	began      float64         // the history's clock when the law (its ceiling) began (seconds)
	retx       olc.Retransmits // what the pass rate applies to while pass < 1
	target     float64         // the target in force (seconds; 0: none)
	hist       history         // the recent windows: D and the standing queue
	idle       bool            // an onset window of this tick ended empty
	prevEnd    float64         // requests in flight at the previous tick's end (−1: no tick yet)
	away       float64         // how long (seconds) a client shed in the last shedding tick or window stays out: 0 after a reject
	demand     float64         // first attempts per second in the last tick: the class split's weight
	recorded   float64         // p at the last probability_change record
	unmeasured float64         // how long (seconds) the port has had no counts
	late       float64         // since the ceiling started: answers past the target (the tail budget's spend),
	answered   float64         // and all answers
	carry      float64         // an open loop's ceiling's fraction carried to the next (0 ≤ x < 1)
}

// The law's constants: docs/controller.md §7 gives each one's meaning.
const (
	standingSpan = 100 * time.Millisecond
	longQueue    = 2.0
	closedFall   = 0.5
	returnShare  = 0.25
	tailShare    = 0.05 // the answers a p95 at the target leaves past it
)

// active reports whether the port's law sheds: its pass rate, or its
// ceiling (settle).
func (p *port) active() bool { return p.pass < 1 || p.ceil > 0 }

// settle sets the ceiling that stands span seconds (docs/controller.md §1): s × N* of μ mu, above it
// the standing queue n's excess drained over h (n past the ceiling in force only in a closed loop);
// held while it refuses.
func (p *port) settle(span, n, mu, h float64) {
	if p.pass >= 1 && (p.ceil == 0 || !p.hist.refused(h)) {
		p.ceil = 0
		return
	}
	if p.ceil == 0 { // a new ceiling starts at N*, its queue unclamped; open reads the starts from here
		p.scale, p.began, p.ceil, p.late, p.answered, p.carry = 1, p.hist.clock, 1<<30, 0, 0, 0.5
		p.onsetRate = p.hist.rate(standingSpan.Seconds()).all
	}
	nSat := math.Max(mu, p.cap.lastSat) * p.target // N* on the larger of μ̂ and the shown figure
	if n > longQueue*nSat {
		h = p.away // an onset's queue: refused while it drains unless its clients come back together
	}
	open := p.open(h)
	if open {
		n = math.Min(n, float64(p.ceil)) // open loop: a queue past the ceiling in force is the count's lag
	}
	nStar := nSat * p.scale
	x := math.Min(nStar+math.Max(0, n-nStar)*math.Max(0, 1-span/math.Max(h, span)), 1<<30)
	k := math.Ceil(x) // a closed loop's clients wait outside: the round-up keeps its service busy
	if open {         // an open loop's ceilings in force average x: the fraction is carried
		k, p.carry = math.Floor(x+p.carry), math.Mod(x+p.carry, 1)
	}
	p.ceil = int(math.Max(1, k))
}

// open reports whether the clients the ceiling refuses do not wait for it: the starts stayed at
// closedFall of their rate when it started, and under returnShare of the shed came back a timeout later.
func (p *port) open(h float64) bool {
	return p.hist.rate(standingSpan.Seconds()).all >= closedFall*p.onsetRate && !p.hist.returning(h)
}

// noteShed sets away from st: a retransmit timeout after a drop, none after a reject or reset.
func (p *port) noteShed(st PortStats) {
	if shed := float64(st.Dropped) + float64(st.Resets); shed > 0 {
		p.away = SYNRetransmitTimeout * float64(st.Dropped-min(st.Rejected, st.Dropped)) / shed
	}
}

// retransmits returns the datapath's rule for retransmitted SYNs
// (PortDecision.Retransmits).
func (p *port) retransmits() olc.Retransmits {
	if !p.active() {
		return olc.RetransmitsAsFirst
	}
	return p.retx
}

// counts are one tick's or window's counts in the law's units.
type counts struct {
	starts   float64 // new connections and request starts on open connections
	first    float64 // starts less the SYN retransmits among them
	admitted float64 // starts not shed
	ceiled   float64 // starts the ceiling refused (or would)
	dt       float64 // the span counted (seconds; 0: none)
}

func countsOf(st PortStats, dt float64) counts {
	starts := float64(st.New) + float64(st.Reused)
	shed := math.Min(float64(st.Dropped)+float64(st.Resets), starts)
	return counts{starts: starts, first: starts - float64(min(st.Retransmits, st.New)), admitted: starts - shed, ceiled: float64(st.Ceiled), dt: dt}
}

// step advances the port's law (docs/controller.md §1) by a tick of dt seconds; busy: the node's
// law sheds (no baseline is learnt). It returns the reason for the decision log ("": quiet).
func (p *port) step(st PortStats, dt float64, busy bool, prm *Params) string {
	r := sanitize(st.Response)
	c := countsOf(st, dt)
	p.demand = c.first / dt
	defer func() { // the ceiling that stood through this tick, read below; the tail budget's count
		if p.held = p.ceil; p.ceil > 0 && len(r.Hist) > 0 {
			p.late, p.answered = p.late+r.Responses*resptime.Above(r.Hist, p.target), p.answered+r.Responses
		}
	}()
	p.noteShed(st)
	// Saturated: requests waited through the tick and N* of them stand at its end (full), or the
	// ceiling refused arrivals; a pool of 8 workers with 3 busy answers its demand, not μ̂.
	standing := p.hist.standing(r.Inflight)
	waited := r.Responses > 0 && p.prevEnd >= 1 && r.Inflight >= 1 && !p.idle
	full := waited && p.target > 0 && standing >= p.cap.now()*p.target
	prevEnd := p.prevEnd
	p.prevEnd, p.idle = r.Inflight, false
	p.cap.tick(r.Responses, c.admitted, r.Inflight-math.Max(prevEnd, 0), dt, full, full || (waited && c.ceiled > 0))
	p.hist.add(c, r.Inflight, false)
	if !p.cfg.Target.On() {
		p.pass, p.target, p.ceil = 1, 0, 0
		return ""
	}
	p.base.learn(r, prevEnd, p.active() || busy, p.target)
	p.target = p.base.targetFor(p.cfg.Target, prm)
	over := r.Available && r.P95 > p.target
	if p.held > 0 && p.ceil > 0 && st.Ceiled > 0 && st.Dropped > 0 && r.Available && p.hist.below(dt, longQueue*float64(p.ceil)) {
		// The queue stood at the ceiling, enforced, no burst past it: q is its,
		// the p95 or past the tail budget the quantile that repays it, and a
		// sojourn scales with it (docs/controller.md §1, "Its share").
		floor, q := 1/prm.TargetFactor, r.P95
		if p.base.ok {
			floor = p.base.value / p.target
		}
		if debt := p.late - tailShare*p.answered; debt > 0 && len(r.Hist) > 0 && r.Responses > 0 {
			q, _ = resptime.Quantile(r.Hist, 1-math.Max(tailShare/2, tailShare-debt/r.Responses))
		}
		p.scale = math.Min(1, math.Max(floor, p.scale*p.target/q))
	}
	if !p.active() && !over {
		return ""
	}
	mu, a, h := p.cap.now(), p.cap.perStart(), math.Max(p.away, dt)
	d := p.hist.of(h, standing > longQueue*mu*p.target)
	was := p.active()
	why := fmt.Sprintf("response_time_p95 %.3gs, target %s", r.P95, p.targetName())
	if !r.Available {
		why = fmt.Sprintf("response time unavailable (%d samples), target %s", r.Samples, p.targetName())
	}
	switch {
	case d.all <= 0:
		p.pass, p.ceil = 1, 0
		why += ": no new work arriving, pass rate 1"
	case mu <= 0 || a <= 0:
		// Nothing measured to size the admission by: a hung service stays cut.
		why += fmt.Sprintf(": no answers in the capacity window, holding pass rate %.3f", p.pass)
	default:
		d = p.law(mu, a, standing, h, d, prm)
		p.settle(math.Min(dt, cmp.Or(prm.OnsetInterval.Seconds(), dt)), standing, mu, h) // until the next window, or tick
		why += fmt.Sprintf(": capacity %.0f answers/s, %.0f in flight standing where %.1f keep the target, %.0f starts/s arriving (%.0f retransmits) at %.2f answers each: %s",
			mu, standing, mu*p.target, d.all, d.retx(), a, p.passName())
	}
	if was && !p.active() {
		why += ", the port's overload is over"
	}
	return why
}

// law sets the pass rate and the retransmit rule that admit A = μ̂ + (N* −
// n) ÷ h answers per second of the demand d (starts of a answers each), n
// the queue; with retransmits ranked, first attempts first. It returns the
// demand it met: d, or within h of its start the starts since it began.
func (p *port) law(mu, a, n, h float64, d rates, prm *Params) rates {
	nStar, base := mu*p.target, mu
	if n > nStar {
		// What drains a queue comes off what arrives, when that is less
		// than μ̂ (a closed pool whose clients all wait inside sends little).
		base = math.Min(mu, a*d.all)
	}
	A := base + (nStar-n)/h
	if since := p.hist.clock - p.began; p.ceil > 0 && since < h && a*d.all <= A && p.open(h) {
		if s := p.hist.rate(math.Max(standingSpan.Seconds(), since)); s.all > d.all {
			d = s // within h of its start the law ends only if the starts since it began fit too
		}
	}
	share := func(x, y float64) float64 {
		if y <= 0 || x <= 0 {
			return prm.MinPassRate
		}
		return math.Min(1, math.Max(prm.MinPassRate, x/y))
	}
	switch {
	case !(p.target > 0 && p.target < SYNRetransmitTimeout): // a retransmit is not late yet
		p.retx, p.pass = olc.RetransmitsAsFirst, share(A, a*d.all)
	case a*d.first >= A:
		p.retx, p.pass = olc.RetransmitsShed, share(A, a*d.first)
	case a*d.all > A:
		// No floor: min_pass_rate keeps new work passing, and every
		// first attempt does.
		p.retx, p.pass = olc.RetransmitsLast, math.Max(0, math.Min(1, (A-a*d.first)/(a*d.retx())))
	default:
		p.retx, p.pass = olc.RetransmitsAsFirst, 1
	}
	return d
}

// passName renders the pass rate, what it applies to and the ceiling, for
// a reason.
func (p *port) passName() string {
	s := fmt.Sprintf("pass rate %.3f", p.pass)
	switch p.retransmits() {
	case olc.RetransmitsShed:
		s += ", retransmits shed"
	case olc.RetransmitsLast:
		s = fmt.Sprintf("first attempts pass, retransmits at pass rate %.3f", p.pass)
	}
	if p.ceil > 0 {
		s += fmt.Sprintf(", ceiling %d in flight", p.ceil)
	}
	return s
}

// window takes an onset window of w seconds between ticks of tick seconds (docs/controller.md
// §1, "Between ticks"): it feeds the history; while the port sheds or surges, the law runs.
func (p *port) window(st PortStats, w, tick float64, prm *Params) string {
	r := sanitize(st.Response)
	c := countsOf(st, w)
	prev := -1.0 // in flight at the newest record's end
	if n := len(p.hist.spans); n > 0 {
		prev = p.hist.spans[n-1].inflight
	}
	p.hist.add(c, r.Inflight, true)
	p.noteShed(st)
	p.idle = p.idle || r.Inflight < 1
	if !p.cfg.Target.On() || p.target <= 0 {
		return ""
	}
	mu := p.cap.now()
	if mu <= 0 && p.prevEnd >= 1 && r.Inflight >= 1 {
		mu = r.Responses / w // a cold start: the window itself, saturated
	}
	if mu > 0 && prev >= mu*p.target && r.Inflight >= mu*p.target {
		// N* stood from the window's start to its end: it answered at
		// capacity. An underestimate shows only here: a law on it cuts
		// the queue that would show it at the tick.
		mu = math.Max(mu, p.cap.window(r.Responses, w))
	}
	a := p.cap.perStart()
	if a <= 0 && r.Requests > 0 && c.admitted > 0 {
		a = r.Requests / c.admitted
	}
	surge := mu > 0 && r.Inflight-mu*p.target > mu*w && p.hist.growing(mu*w)
	h := math.Max(p.away, tick)
	d := p.hist.of(h, p.hist.standing(r.Inflight) > longQueue*mu*p.target)
	if mu <= 0 || a <= 0 || d.all <= 0 || (!p.active() && !surge) {
		return ""
	}
	pass, retx, ceiling := p.pass, p.retransmits(), p.ceil
	d = p.law(mu, a, r.Inflight, h, d, prm)
	p.settle(w, p.hist.standing(r.Inflight), mu, h)
	if math.Abs(pass-p.pass) < 1e-9 && retx == p.retransmits() && ceiling == p.ceil {
		return ""
	}
	return fmt.Sprintf("%.0f requests in flight where %.1f keep the target %s, capacity %.0f answers/s, %.0f starts/s (%.0f retransmits): %s between ticks",
		r.Inflight, mu*p.target, p.targetName(), mu, d.all, d.retx(), p.passName())
}

// targetName renders the target for a reason.
func (p *port) targetName() string {
	switch {
	case !p.cfg.Target.Auto:
		return p.cfg.Target.String()
	case p.base.ok:
		return fmt.Sprintf("%.3gs (auto: %.3g × no-load p95 %.3gs)", p.target, p.target/p.base.value, p.base.value)
	}
	return fmt.Sprintf("%.3gs (auto, no-load p95 not learnt yet)", p.target)
}

// decision returns the port's decision, its p the larger of its own law's
// and classP, its class's share of the node's resource law.
func (p *port) decision(classP float64, prm *Params) PortDecision {
	q, retx := 1-p.pass, p.retransmits()
	drop := math.Min(prm.Bound(), math.Max(q, classP))
	switch {
	case retx == olc.RetransmitsLast && classP > 0:
		// The node's cap sheds first attempts too; retransmits stay behind,
		// and the port's own law asks nothing of first attempts.
		drop, retx, q = math.Min(prm.Bound(), classP), olc.RetransmitsShed, 0
	case retx == olc.RetransmitsLast:
		drop = q // first attempts all pass: the bound holds
	}
	pd := PortDecision{Key: p.cfg.Key, Class: p.cfg.Class, DropProbability: drop,
		Demand: p.demand, ResponseTarget: p.target, QueueP: q, Retransmits: retx, InFlightCeiling: p.ceil}
	if p.cfg.Target.Auto && p.base.ok {
		pd.Baseline = p.base.value
	}
	if mu := p.cap.lastSat; mu > 0 {
		pd.Capacity, pd.CapacityAge = mu, p.cap.satAge
		if a := p.cap.perStart(); a > 0 {
			pd.ConnCapacity = mu / a
		}
	}
	return pd
}

// sanitize treats a p95 that is not a finite positive number as unavailable,
// and counts that are not finite and ≥ 0 as unknown (0): a broken source
// holds the law, never drives it to NaN.
func sanitize(r PortResponse) PortResponse {
	ok := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) && x >= 0 }
	if !ok(r.P95) || r.P95 <= 0 {
		r.Available, r.P95 = false, 0
	}
	for _, x := range []*float64{&r.Requests, &r.Responses, &r.Inflight} {
		if !ok(*x) {
			*x = 0
		}
	}
	return r
}
