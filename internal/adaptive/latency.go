package adaptive

import (
	"fmt"
	"math"
	"strings"

	"github.com/olcd/olcd/internal/olc"
)

// ResponseTarget is a port's response-time target: the p95 the law on the
// measured queue holds the port at while it sheds.
type ResponseTarget struct {
	// Seconds is a fixed target (> 0, at most MaxResponseTarget). 0 with
	// Auto false: the port has no latency loop (only the resource law).
	Seconds float64
	// Auto learns the target: Params.TargetFactor × the port's baseline
	// p95, learnt from ticks that are not overloaded, at least
	// MinAutoTarget; Params.InitialTarget until a baseline exists.
	Auto bool
}

// On reports whether the port has a latency loop.
func (t ResponseTarget) On() bool { return t.Auto || t.Seconds > 0 }

// String returns "auto", "50ms" or "off".
func (t ResponseTarget) String() string {
	switch {
	case t.Auto:
		return "auto"
	case t.Seconds > 0:
		return fmt.Sprintf("%gms", t.Seconds*1000)
	}
	return "off"
}

// Limits of the response-time targets.
const (
	// MinAutoTarget floors an auto target (seconds): below a millisecond
	// the scheduler's own wake-up jitter moves a p95 by its size.
	MinAutoTarget = 0.001
	// MaxResponseTarget bounds any target (seconds): the datapath's
	// histogram reaches 30 s.
	MaxResponseTarget = 30.0
)

// PortResponse is a port's measured queue over one tick, from the
// datapath's response timing (internal/resptime).
type PortResponse struct {
	// Available is true when the tick had the minimum of timed responses;
	// P95 is meaningless otherwise (never 0 for "no data").
	Available bool
	// P95 is the 95th percentile of the response times answered in the
	// tick (seconds).
	P95 float64
	// Samples is the number of timed responses in the tick.
	Samples uint64
	// Requests is the number of requests that reached the server in the
	// tick (scaled by the sample rate; 0 when not known).
	Requests float64
	// Responses is the number of requests answered in the tick (scaled
	// by the sample rate; 0 when not known).
	Responses float64
	// Inflight is the number of requests waiting or in service at the
	// tick's end (scaled by the sample rate).
	Inflight float64
}

// latencyLoop is one port's law on its measured queue (docs/controller.md
// §3): the pass rate corrected each tick by the error between the target
// and the measured p95.
type latencyLoop struct {
	pass      float64 // share of new connections admitted, MinPassRate..1
	active    bool    // an overload of the port's queue is on
	since     float64 // seconds since the overload started
	prevErr   float64 // normalised error of the previous usable tick
	errOK     bool
	sinceCut  float64    // seconds since the last tick that lowered pass
	target    float64    // target in force (seconds), 0 when none
	gap       float64    // what the throttle gap widens the target by (seconds): throttleGap
	tickGap   float64    // the watched cgroup's throttle gap this tick (seconds)
	served    float64    // requests/s answered on the last over tick: the measured capacity
	shed      [2]float64 // SYNs dropped in the previous and in this tick
	returning float64    // smoothed share of shed SYNs retransmitted 1 s later
	drain     bool       // the last cut was sized by the measured queue: a drain for one tick
	base      baseline
	cap       capacity // μ̂, the capacity measured while saturated
}

// newLatencyLoop returns an idle loop.
func newLatencyLoop() latencyLoop { return latencyLoop{pass: 1} }

// p returns the loop's drop probability.
func (l *latencyLoop) p() float64 { return 1 - l.pass }

// shedRetransmits reports whether the port's retransmitted SYNs are all
// shed (PortDecision.ShedRetransmits): while the loop sheds, with a target
// below the first retransmit's delay. A retransmit's client has waited 1 s
// already, so its answer is late whatever follows, and a worker spent on
// it is taken from a first attempt that would be on time; this holds for
// clients that retry until a long connect timeout (up to five late
// retransmits each) and for a closed pool's (one: shed, it blocks its
// client until its timeout, which the loop answers with a lower p). On the
// harness's closed pool, drawn like first attempts, they kept the loop at
// p ≈ 0.3 and 0.39 C; shed, 0.74 C (docs/measurements.md §7).
func (l *latencyLoop) shedRetransmits() bool {
	return l.active && l.pass < 1 && l.target > 0 && l.target < SYNRetransmitTimeout
}

// targetFor returns the target in force for tgt (seconds) and whether the
// port has one.
func (l *latencyLoop) targetFor(tgt ResponseTarget, prm *Params) float64 {
	switch {
	case tgt.Seconds > 0:
		return tgt.Seconds
	case !tgt.Auto:
		return 0
	case l.base.ok:
		return math.Min(MaxResponseTarget, math.Max(MinAutoTarget, prm.TargetFactor*l.base.value))
	case l.base.floorOK:
		return math.Min(prm.InitialTarget.Seconds(), math.Max(MinAutoTarget, prm.TargetFactor*l.base.floor))
	}
	return prm.InitialTarget.Seconds()
}

// step advances the loop by one tick of dt seconds on the port's measured
// queue r; guardOver is true while the resource law is overloaded (such a
// tick never teaches the baseline). It returns a reason for the decision
// log ("" when the loop is idle and stays so).
//
// The law is that of the "OLC" pass-rate controller olcd descends from
// (new pass rate = pass rate × (1 + Kp × (T − P95) ÷ T + Ki × ∫…)),
// written in velocity form so that p itself is the state (no windup):
//
//	pass ← pass × exp(Kp × (ê − ê_prev) + Ki × ê),   ê = (T − P95) ÷ max(T, dt)
//
// which to first order is pass₀ × (1 + Kp × ê + Ki × Σê). The error is
// normalised by max(T, dt) rather than T: a p95 above the target by x
// seconds stands for x × C requests queued, x ÷ dt of a tick's work, so
// the loop removes the same share of the excess queue per tick whatever
// the target (with ÷ T the gain grew with dt ÷ T, 10 at 50 ms and 500 ms
// ticks, and the loop rang). Below the target the queue is empty and the
// error says only that there is room: pass rises by Ki × (T − P95) ÷ T,
// at most RecoveryStep per tick, and not before ResponseCooldown has passed
// since the last cut (the SYNs just shed come back 1 s later: they are
// demand that has not gone away).
func (l *latencyLoop) step(tgt ResponseTarget, st PortStats, dt float64, guardOver, mayCut bool, prm *Params) string {
	r := sanitize(st.Response)
	st.Response = r
	// The SYNs shed in the last two ticks come back as retransmits within
	// the next two (1 s later): demand that has not gone away.
	// The share of them that does (retrying clients: most; clients that
	// give up before their SYN's first retransmit: none) is measured: the
	// retransmits of this tick against the SYNs shed two ticks ago.
	if back := l.shed[0]; back > 0 {
		l.returning += returnSmoothing * (math.Min(1, float64(st.Retransmits)/back) - l.returning)
	}
	dropped := float64(min(st.Dropped, st.New))
	l.shed[0], l.shed[1] = l.shed[1], dropped
	l.cap.tick(st, dt)
	l.target = l.targetFor(tgt, prm)
	if l.target <= 0 {
		*l = latencyLoop{pass: 1, base: l.base, cap: l.cap}
		return ""
	}
	if tgt.Auto {
		// The tick that teaches the first baseline is judged against
		// the target it teaches.
		steady := l.base.steady(r)
		l.base.learn(r, steady, l.active || guardOver || l.atQuota(r), l.target, prm)
		if l.active && !guardOver {
			l.base.learnFloor(r, steady, l.atQuota(r), l.target+l.gap)
		}
		l.target = l.targetFor(tgt, prm)
	}
	l.sinceCut += dt
	if l.active {
		l.since += dt
	}
	if !r.Available {
		// Too few responses to say anything. An idle port (no requests at
		// all) counts as below the target, so a loop that lost its traffic
		// recovers.
		if !l.active || r.Requests > 0 || r.Samples > 0 {
			if l.active {
				return l.probeUnmeasured(st, dt, guardOver, prm)
			}
			return ""
		}
		r.P95 = 0
	}
	m, T := r.P95, l.target+l.gap
	if !l.active {
		if m <= T {
			l.errOK = false
			return ""
		}
		l.active, l.since, l.pass, l.errOK = true, 0, 1, false
	}
	e := (T - m) / math.Max(T, dt)
	prev := 0.0 // the first tick's P term is the whole error
	if l.errOK {
		prev = l.prevErr
	}
	l.prevErr, l.errOK = e, true
	var delta float64 // change of log(pass)
	sized := false    // the measured queue sized the cut
	reason := ""
	switch {
	case m > T:
		delta = prm.LatencyKp*(e-prev) + prm.LatencyKi*e
		reason = "over the target"
		// The queue measured: at the target, Little's law holds
		// served × T requests in the service; what is beyond must go
		// within a tick, so admit served − excess ÷ dt of the requests
		// that arrived. Cut at once when that asks for more than the
		// law's step: a 3 × step queues a tick of work before the
		// first measurement sees it.
		if ff, ok := queueCut(r, T, dt); ok && math.Log(ff) < delta {
			delta, sized = math.Log(ff), true
			l.drain = true
			reason = fmt.Sprintf("over the target, %.0f requests in flight where %.0f keep it", r.Inflight, r.Responses/dt*T)
		}
		if r.Responses > 0 {
			// The capacity is what a tick that ends with a queue served:
			// a tick whose queue emptied idled for part of it.
			if served := r.Responses / dt; l.served <= 0 || r.Inflight >= served*T {
				l.served = served
			}
			// The p95 of a tick that served an old backlog is history
			// once the requests in flight fit the target: no further cut.
			if r.Inflight < r.Responses/dt*T && delta < 0 {
				delta = 0
				reason = "over the target on a backlog already served, holding"
			} else if r.Requests < r.Responses && delta < 0 && !sized {
				// Fewer requests arrived than were answered: the pass
				// rate in force already drains the queue.
				delta = 0
				reason = "over the target, the queue draining, holding"
			}
		}
	default:
		// A tick below the target that answered more than the capacity
		// measured, its queue kept in check, shows a capacity at least that
		// large (one that grew: a quota raised): without it the probe
		// above would crawl up from a stale capacity (1.5 C after the
		// capacity doubled: 0.68 C against 0.84 C on the plant).
		if a := r.Responses / dt; l.served > 0 && a > l.served && r.Inflight <= a*T {
			l.served = a
		}
		// Room below the target: the law's own step, or the probe of
		// the pass rate upwards after the cooldown.
		delta = prm.LatencyKp*(e-prev) + prm.LatencyKi*e
		if l.sinceCut >= prm.ResponseCooldown.Seconds() {
			delta = math.Max(delta, prm.LatencyKi*(T-m)/T)
			// Back up to what the capacity measured on the last over tick
			// admits (90 % of it), when the law's step is below it.
			if want, ok := l.recoverPass(st, dt); ok && want > l.pass {
				if j := math.Log(want / l.pass); j > delta {
					delta = j
				}
			}
			reason = "below the target, recovering"
		} else {
			delta = math.Min(delta, 0)
			reason = "below the target, cooling down"
		}
	}
	// A cut sized by the measured queue drains the excess within a tick;
	// it is no estimate of what fits. The first tick whose requests in
	// flight fit the target goes back at once, cooldown or not, to what
	// the measured capacity admits (recoverPass): rising by the recovery
	// step instead idled the harness's service at 0.1–0.5 C for 3 s after
	// each such cut of its cold start (docs/measurements.md §10).
	want, wantOK := l.recoverPass(st, dt)
	back := false
	if l.drain && !sized && r.Responses > 0 && r.Inflight <= r.Responses/dt*T {
		l.drain = false
		if wantOK && want > l.pass*math.Exp(delta) {
			delta, back = math.Log(want/l.pass), true
			reason = "the queue drained, back to the measured capacity"
		}
	}
	// An idle service: far fewer requests in flight than Little's μ̂ × T
	// and the p95 far below the target. Its clients wait (a closed pool's
	// dropped SYNs sit out their 1 s retransmit) while it could serve: the
	// pass rate goes back in one tick, cooldown or not, to what admits
	// the capacity measured (issue 24: a rise by steps after a cooldown
	// served 0.63–0.79 of a 0.5 C phase after the overload).
	if mu := l.cap.mu(); !back && !sized && wantOK && mu > 0 && m < recoverLatency*T && r.Inflight < recoverQueue*mu*T {
		if want > l.pass*math.Exp(delta) {
			delta, back = math.Log(want/l.pass), true
			reason = fmt.Sprintf("below the target, %.0f requests in flight where %.0f keep it: back to the capacity measured, %.0f/s", r.Inflight, mu*T, mu)
		}
	}
	if !mayCut && delta < 0 {
		delta = 0
		reason += ", held while a less protected class sheds"
	}
	next := l.pass * math.Exp(math.Max(delta, math.Log(1-maxLatencyCut2)))
	if !sized && next < l.pass {
		// The law's own cuts at most add half of what is shed (and
		// minStep): with closed-loop clients a drop probability of a few
		// percent already blocks a good part of them in a retransmit, and
		// doubling it in one tick idles the service a second later.
		next = math.Max(next, l.pass-math.Max((1-l.pass)*lawCutShare, minStep))
	}
	if delta > 0 {
		// A rise is at most recovery_step, or a jump of at most
		// maxRecoverJump back towards the measured capacity.
		lim := prm.RecoveryStep
		if l.served > 0 {
			lim = math.Max(lim, maxRecoverJump)
		}
		// ... and never more than half of what is shed: a small p
		// holds back clients whose retransmits return within a second.
		lim = math.Min(lim, math.Max((1-l.pass)/2, minShed))
		if !back {
			next = math.Min(next, l.pass+lim)
			// Past what the measured capacity admits a rise is a probe
			// of probeStep a tick, unless the tick ended with under
			// probeRoom of Little's a × T in flight (room the queue
			// shows): a service at its capacity shows no queue until the
			// excess has built one, and the law's step (up to
			// maxRecoverJump) overshot the capacity by 40–50 % within
			// 2 s before the first p95 over the target.
			if fit := want / recoverShare; wantOK && next > fit && r.Inflight >= probeRoom*r.Responses/dt*T {
				next = math.Min(next, math.Max(l.pass, fit)+probeStep)
			}
		}
	}
	if next < l.pass-1e-12 {
		l.sinceCut = 0
	}
	l.pass = math.Min(1, math.Max(prm.MinPassRate, next))
	why := fmt.Sprintf("response_time_p95 %.3gs %s %.3gs (target %s): pass rate %.3f", m, reason, T, tgtName(tgt, l), l.pass)
	if mu := l.cap.mu(); mu > 0 {
		// The figure an operator wants beside the cut, in the decision log.
		why += fmt.Sprintf(", capacity %.0f/s measured %.1fs ago", mu, l.cap.age)
	}
	return why + l.endIfRecovered()
}

// probeUnmeasured is a tick of an active loop without enough timed
// responses. A port that sheds most of its SYNs serves too few requests to
// time, so holding would hold for good: after the cooldown the pass rate
// probes upwards by the recovery step, as below the target, while the
// requests in flight fit what the measured capacity keeps at the target
// (a server that stopped answering piles them up: hold) and no resource
// guard is over.
func (l *latencyLoop) probeUnmeasured(st PortStats, dt float64, guardOver bool, prm *Params) string {
	r := st.Response
	hold := fmt.Sprintf("response time unavailable (%d samples): holding pass rate %.3f", r.Samples, l.pass)
	mu, T := l.cap.mu(), l.target+l.gap
	if want, ok := l.recoverPass(st, dt); ok && !guardOver && mu > 0 && r.Inflight < recoverQueue*mu*T && want > l.pass {
		// Too few answers to time, and nothing queued: idle (above).
		l.pass = want
		why := fmt.Sprintf("response time unavailable (%d samples), %.0f requests in flight where %.0f keep the target: back to the capacity measured, %.0f/s, pass rate %.3f",
			r.Samples, r.Inflight, mu*T, mu, l.pass)
		return why + l.endIfRecovered()
	}
	switch {
	case guardOver:
		return hold + ", a resource guard is over"
	case l.sinceCut < prm.ResponseCooldown.Seconds():
		return hold + ", cooling down"
	case r.Inflight > math.Max(1, l.served*(l.target+l.gap)):
		return fmt.Sprintf("%s, %.0f requests in flight", hold, r.Inflight)
	}
	l.pass = math.Min(1, l.pass+math.Min(prm.RecoveryStep, math.Max((1-l.pass)/2, minShed)))
	why := fmt.Sprintf("response time unavailable (%d samples), %.0f requests in flight: probing, pass rate %.3f", r.Samples, r.Inflight, l.pass)
	return why + l.endIfRecovered()
}

// endIfRecovered ends the overload once the pass rate is back at 1,
// keeping what the loop has learnt (baseline, target, returning shares),
// and says so for the decision log.
func (l *latencyLoop) endIfRecovered() string {
	if l.pass < 1 {
		return ""
	}
	*l = latencyLoop{pass: 1, base: l.base, target: l.target, shed: l.shed, returning: l.returning, cap: l.cap}
	return ", overload of the queue over"
}

// queueCut returns the factor of the pass rate that admits what drains
// the measured queue down to the target within one tick, and false when
// the tick lacks the counts.
func queueCut(r PortResponse, T, dt float64) (float64, bool) {
	if r.Requests <= 0 || r.Responses <= 0 || dt <= 0 {
		return 0, false
	}
	served, arrived := r.Responses/dt, r.Requests/dt
	excess := r.Inflight - served*T
	// Only a queue of half a tick's work or more: below it the law's
	// own steps suffice, and the in-flight count's noise would cut.
	if excess < queueCutMin*served*dt {
		return 0, false
	}
	want := served - excess/dt
	return math.Max(want/arrived, 1-maxLatencyCut2), true
}

// lawCutShare and minStep bound a cut of the law's own (not sized by the
// measured queue) to max(lawCutShare × p, minStep) per tick.
const (
	lawCutShare = 0.5
	minStep     = 0.02
)

// returnSmoothing is the weight of the newest tick in the share of shed
// SYNs that come back.
const returnSmoothing = 0.3

// minShed is the drop probability below which a recovering tick may end
// the shedding at once.
const minShed = 0.01

// recoverPass returns the pass rate that admits recoverShare of the
// capacity measured on the last over tick, against the demand of this
// tick plus the share of the SYNs shed in the last two ticks that comes
// back (their retransmits arrive within the next two); false without the
// counts.
func (l *latencyLoop) recoverPass(st PortStats, dt float64) (float64, bool) {
	r := st.Response
	admitted := float64(st.New - min(st.Dropped, st.New))
	// Both measure the capacity while a queue stood: the last over tick's
	// answers, and μ̂ over the saturated ticks of the last seconds.
	served := math.Max(l.served, l.cap.mu())
	if served <= 0 || r.Requests <= 0 || admitted <= 0 || dt <= 0 {
		return 0, false
	}
	perConn := r.Requests / admitted // requests per admitted connection (keep-alive)
	demand := (float64(st.New) + l.returning*(l.shed[0]+l.shed[1])/2) / dt
	if l.shedRetransmits() {
		// Every retransmit is shed: the pass rate applies to first
		// attempts alone.
		demand = float64(st.New-min(st.Retransmits, st.New)) / dt
	}
	return math.Min(1, recoverShare*served/(perConn*demand)), true
}

// probeStep is the most a recovering tick raises the pass rate beyond
// what the measured capacity admits.
const probeStep = 0.01

// probeRoom is the share of Little's a × T in flight at a tick's end below
// which a rise past the measured capacity is not held to probeStep: the
// service answered its arrivals with room to spare (the capacity measured
// is stale: a cold start's first windows answer slowly).
const probeRoom = 0.25

// recoverQueue and recoverLatency say when the service is idle: fewer in
// flight than recoverQueue × Little's μ̂ × T, a p95 below recoverLatency ×
// T.
const (
	recoverQueue   = 0.5
	recoverLatency = 0.5
)

// maxRecoverJump bounds the rise of the pass rate in one recovering tick.
const maxRecoverJump = 0.1

// recoverShare is the share of the measured capacity a recovering tick
// raises the admitted requests to at once.
const recoverShare = 0.9

// queueCutMin is the excess queue, in ticks of served work, from which
// the measured queue sizes the cut.
const queueCutMin = 0.5

// maxLatencyCut2 bounds the measured queue's cut per tick.
const maxLatencyCut2 = 0.9

// sanitize treats a response measurement with a p95 that is not a finite
// positive number as unavailable, and counts that are not finite and ≥ 0
// as unknown (0): a broken source holds the loop, never drives it to NaN.
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

// tgtName renders the target for a reason: "auto from baseline 5ms",
// "50ms", with "+ throttle gap 75ms" when the gap widens it.
func tgtName(tgt ResponseTarget, l *latencyLoop) string {
	name := tgt.String()
	switch {
	case !tgt.Auto:
	case !l.base.ok && l.base.floorOK:
		name = fmt.Sprintf("auto from the no-load floor %.3gs", l.base.floor)
	case !l.base.ok:
		name = "auto, no baseline yet"
	default:
		name = fmt.Sprintf("auto from baseline %.3gs", l.base.value)
	}
	if l.gap > 0 {
		name += fmt.Sprintf(" + throttle gap %.3gs", l.gap)
	}
	return name
}

// throttleGap sets the gap the port's target is widened by from the watched
// cgroup's throttle gap this tick (olc.Snapshot.CgroupThrottleGap, seconds):
// the larger of this tick's and the previous one's, since a request that
// waited out a tick's last gap is answered in the next. Under a CFS quota a
// service at its capacity runs in bursts: once a period's quota is spent,
// every request waits for the next period, so the p95 and the requests in
// flight hold the gap without any queue olcd could drain. Read as a queue
// against a target below the gap (auto: 3 × an unthrottled baseline), it
// shed the service to where it is no longer throttled, 0.73–0.78 of its
// capacity (capacity-halved, docs/measurements.md §5); so an auto target learnt
// from a baseline is what the service answers within plus what the quota
// makes it wait, up to Params.InitialTarget: a target already that loose
// holds the gap (with the initial target widened too, the p95 ran at
// 0.27–0.45 s, past the 200 ms SLO: 0.62 C' against 0.77–0.85 without).
// A fixed target is the user's latency and is not widened.
func (l *latencyLoop) throttleGap(gap float64, tgt ResponseTarget, prm *Params) {
	if math.IsNaN(gap) || gap < 0 {
		gap = 0
	}
	gap = math.Min(gap, maxThrottleGap)
	measured := math.Max(gap, l.tickGap)
	l.tickGap = gap
	l.gap = 0
	if tgt.Auto && (l.base.ok || l.base.floorOK) {
		l.gap = math.Min(measured, math.Max(0, prm.InitialTarget.Seconds()-l.targetFor(tgt, prm)))
	}
}

// atQuota reports whether the tick's p95 holds the throttle gap: the
// cgroup spent its quota and waited at least a quarter of the p95. Such a
// tick does not teach the baseline (the service ran at its capacity; a
// baseline that held the gap would widen the target by it twice).
func (l *latencyLoop) atQuota(r PortResponse) bool {
	return l.tickGap > 0 && l.tickGap >= r.P95/4
}

// maxThrottleGap bounds the gap a target is widened by (seconds): the
// longest CFS period (cpu.cfs_period_us, 1 s).
const maxThrottleGap = 1.0

// queueLaws steps every port's law on its measured queue and adds the
// loops' state to d. Classes keep their order: a port does not cut while a
// port of a less protected class is over its own target with room to shed
// (they likely share the bottleneck, and the less protected one goes
// first). A port missing from stats, or a stale tick, holds its loop.
//
// gap is the watched cgroup's throttle gap (olc.Snapshot.CgroupThrottleGap):
// every port's target is widened by it (latencyLoop.throttleGap), the
// watched cgroup being the protected service's.
func (c *Controller) queueLaws(d *Decision, stats map[olc.PortKey]PortStats, stale bool, gap float64) {
	prm := &c.cfg.Params
	if !stale {
		for i := range c.ports {
			c.ports[i].loop.throttleGap(gap, c.ports[i].cfg.Target, prm)
		}
	}
	var sheddable [olc.NumClasses]bool // a port of the class is over target and above its bound
	for i := range c.ports {
		ps := &c.ports[i]
		st, ok := stats[ps.cfg.Key]
		if st.Response = sanitize(st.Response); !ok || stale || !ps.cfg.Target.On() || !st.Response.Available {
			continue
		}
		if T := ps.loop.targetFor(ps.cfg.Target, prm); T > 0 && st.Response.P95 > T+ps.loop.gap && ps.loop.pass > prm.MinPassRate+1e-9 {
			sheddable[ps.cfg.Class] = true
		}
	}
	var reasons []string
	active := false
	for i := range c.ports {
		ps := &c.ports[i]
		st, ok := stats[ps.cfg.Key]
		if !ps.cfg.Target.On() {
			ps.loop = latencyLoop{pass: 1, base: ps.loop.base}
			continue
		}
		if ok && !stale {
			st = ps.onset.afterQueueOnset(st, c.dt)
			mayCut := true
			for cl := ps.cfg.Class + 1; cl < olc.NumClasses; cl++ {
				if sheddable[cl] {
					mayCut = false
				}
			}
			if why := ps.loop.step(ps.cfg.Target, st, c.dt, c.overloaded, mayCut, prm); why != "" {
				reasons = append(reasons, fmt.Sprintf("%s: %s", ps.cfg.Key, why))
			}
		}
		active = active || ps.loop.active
	}
	c.mergeOverload(d, active, strings.Join(reasons, "; "))
	if len(reasons) > 0 {
		d.Reason = strings.Join(reasons, "; ") + "; " + d.Reason
	}
}
