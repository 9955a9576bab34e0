package adaptive

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/olcd/olcd/internal/sampler"
)

// maxValidFraction is the largest value a fraction signal may take before the
// sample is treated as invalid: accounting jitter pushes honest readings a
// few percent above 1, anything beyond is a broken source.
const maxValidFraction = 1.05

// saturationLevel is the value from which a fraction signal is considered
// pinned at its ceiling: a CPU at 100 % reads 0.95..1.0 through sampling
// jitter and co-scheduled idle moments, and its pressure then says nothing
// about how far it is overloaded.
const saturationLevel = 0.95

// maxSaturatedCut bounds the boosted share of the pass rate removed in one
// tick: at most half of what passes is cut, so three saturated ticks after the
// first still leave 1/8 passing before the law sees the plant again.
const maxSaturatedCut = 0.5

// capacityMinShare is the share of its threshold the driving signal must
// show for a tick to teach the saturation estimate: near idle, a baseline
// that does not scale with new connections dominates the ratio.
const capacityMinShare = 0.3

// capacitySteady is how much the admitted rate may change from one tick to
// the next for the tick to teach the saturation estimate.
const capacitySteady = 0.2

// capacitySmoothing is the weight of the newest tick in the saturation
// estimate.
const capacitySmoothing = 0.5

// learnSteadyP is how much p may have moved since the previous tick for a
// tick inside an overload to teach the saturation estimate.
const learnSteadyP = 0.02

// learnNearTarget is the share of its threshold the driver must show for a
// tick inside an overload to teach the saturation estimate.
const learnNearTarget = 0.8

// estimateTicks is how many over ticks at the start of an overload use the
// saturation estimate even with the driver below its ceiling.
const estimateTicks = 2

// estimateGap is how far p must lie above the saturation estimate's p
// before a recovering tick falls straight to it.
const estimateGap = 0.1

// drainAdmitted is how far above the rate that fits the admitted rate may
// be on a pinned tick for the tick to confirm a backlog: at or under what
// fits, a pinned signal is the queue's work, not the new work's.
const drainAdmitted = 1.1

// drainStart is the backlog, as a share of one tick's work that fits under
// the threshold, from which a confirmed backlog is drained: below it, the
// estimate's own error (a few percent of every tick's work, summed over a
// pinned tick or two) would start drains in a steady overload.
const drainStart = 0.5

// drainMin is the backlog, as a share of one tick's work that fits under
// the threshold, below which a drain ends.
const drainMin = 0.1

// minPassScale floors the pass rate used for gain scheduling so that p can
// leave 1 when MinPassRate is 0 (a pass rate of 0 would make every step 0).
const minPassScale = 0.02

// Controller turns snapshots and port counts into drop probabilities. It is
// not safe for concurrent use; the daemon calls Step from its tick loop only.
type Controller struct {
	cfg     Config
	signals []sampler.Signal // signals with a threshold, canonical order

	p           float64 // node-level drop probability
	overloaded  bool
	since       time.Time
	lastEvent   time.Time // last overload_start/continue
	overTicks   int       // consecutive ticks with pressure > 1 while not overloaded
	healthy     int       // consecutive healthy ticks while overloaded
	smooth      float64   // pressure smoothed with Params.Smoothing while overloaded
	smoothOK    bool      // smooth holds a value
	saturated   int       // consecutive over ticks with the driver at its ceiling
	overTicksIn int       // over ticks since the overload started
	prevErr     float64   // e of the previous tick (velocity form)
	lastAt      time.Time
	started     bool

	// The saturation estimate: admitted new connections per second per unit
	// of the driving signal, learnt on ticks below saturation. When the
	// driver is pinned at its ceiling its pressure no longer tells how far
	// the node is overloaded, but the offered rate does: shedding down to
	// capRate × threshold admits what put the signal at its target.
	capRate   float64
	capSignal sampler.Signal
	capOK     bool
	capQuota  float64 // the cgroup quota (CPUs) capRate is per unit of; 0: not a quota signal
	offered   float64 // this tick's new connections/s over all ports, retransmits included
	admitted  float64 // this tick's new connections/s the datapath let through
	ratesOK   bool    // offered and admitted were measured this tick
	prevAdm   float64 // the previous tick's admitted rate (0: none)
	prevP     float64 // node-level p in force during the previous tick
	prevValue float64 // the previous tick's driver value (-1: none)
	dt        float64 // this tick's length, seconds

	// The backlog estimate: new connections admitted but not yet served,
	// from a fluid queue fed by the admitted rate and drained at capRate ×
	// the driver's value (what the signal says was served).
	backlog  float64
	draining bool // p was lifted above the law to drain the backlog

	// The estimate is checked on every over tick (checkEstimate); a
	// recovery jump to it is undone when the check disproves it within
	// jumpCheckTicks.
	sinceJump   int     // ticks since the last jump, 0 after jumpCheckTicks
	pBeforeJump float64 // p a disproved recovery jump returns to (0: none)
	pinnedAtFit int     // consecutive over ticks pinned while admitting what fits

	// The overload as the decision log sees it: the resource law's or any
	// port's queue loop (mergeOverload).
	merged      bool
	mergedSince time.Time
	mergedEvent time.Time // last overload_start/continue of the merged overload

	lastQuota  float64    // the latest snapshot's CgroupQuotaCPUs (0: none yet)
	onset      onsetState // the onset check between ticks (onset.go)
	afterOnset bool       // the next tick is the first since an onset drain ended
	lastTick   Decision   // the last tick's signals, for decisions between ticks

	recordedNode float64
	classP       [NumClasses]float64 // class probabilities in force (last tick's split)
	weights      [NumClasses]float64 // demand per class used by the split
	attempts     [NumClasses]float64 // new connections/s per class, retransmits included
	ports        []portState
	index        map[PortKey]int
}

type portState struct {
	loop     latencyLoop // the law on the port's measured queue
	cfg      PortConfig
	demand   float64 // smoothed unique new connections per second
	attempts float64 // smoothed new connections per second, retransmits included
	measured bool
	p        float64
	recorded float64 // p at the last probability_change record
}

// New returns a controller for cfg, or an error naming every invalid field.
func New(cfg Config) (*Controller, error) {
	c := &Controller{prevValue: -1}
	if err := c.Reconfigure(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// validate checks cfg and reports every problem at once.
func validate(cfg Config) error {
	var errs []error
	if cfg.Interval <= 0 {
		errs = append(errs, fmt.Errorf("interval %v: must be positive", cfg.Interval))
	}
	for s, t := range cfg.Thresholds {
		if math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
			errs = append(errs, fmt.Errorf("threshold of %s = %v: must be 0 (unused) or positive", sampler.Signal(s), t))
		}
	}
	if err := cfg.Params.Validate(); err != nil {
		errs = append(errs, err)
	}
	seen := make(map[PortKey]bool, len(cfg.Ports))
	for _, pc := range cfg.Ports {
		switch {
		case pc.Key.Proto != ProtoTCP && pc.Key.Proto != ProtoUDP:
			errs = append(errs, fmt.Errorf("port %s: protocol must be tcp or udp", pc.Key))
		case pc.Key.Port == 0:
			errs = append(errs, fmt.Errorf("port %s: port 0 cannot be protected", pc.Key))
		case pc.Class >= NumClasses:
			errs = append(errs, fmt.Errorf("port %s: unknown %s", pc.Key, pc.Class))
		case seen[pc.Key]:
			errs = append(errs, fmt.Errorf("port %s: listed twice", pc.Key))
		case pc.Target.Seconds < 0 || pc.Target.Seconds > MaxResponseTarget || math.IsNaN(pc.Target.Seconds) || (pc.Target.Auto && pc.Target.Seconds != 0):
			errs = append(errs, fmt.Errorf("port %s: response target %v: must be auto or in (0, %gs]", pc.Key, pc.Target.Seconds, MaxResponseTarget))
		}
		seen[pc.Key] = true
	}
	return errors.Join(errs...)
}

// Reconfigure switches to cfg between ticks. The node-level p, the overload
// state and the smoothed demand of ports that stay are kept, so a reload
// neither releases nor restarts shedding; new ports start with their class's
// probability. On error the controller is unchanged.
func (c *Controller) Reconfigure(cfg Config) error {
	if err := validate(cfg); err != nil {
		return fmt.Errorf("controller config: %w", err)
	}
	cfg.Ports = append([]PortConfig(nil), cfg.Ports...)
	signals := make([]sampler.Signal, 0, sampler.NumSignals)
	for s, t := range cfg.Thresholds {
		if t > 0 {
			signals = append(signals, sampler.Signal(s))
		}
	}
	ports := make([]portState, len(cfg.Ports))
	index := make(map[PortKey]int, len(cfg.Ports))
	for i, pc := range cfg.Ports {
		ports[i] = portState{cfg: pc, loop: newLatencyLoop()}
		if j, ok := c.index[pc.Key]; ok {
			old := c.ports[j]
			ports[i].loop = old.loop
			ports[i].demand, ports[i].attempts, ports[i].measured = old.demand, old.attempts, old.measured
			ports[i].p, ports[i].recorded = old.p, old.recorded
		}
		index[pc.Key] = i
	}
	// The estimate counts the configured ports' connections: another set
	// of ports carries another share of the work the signal shows.
	if len(ports) != len(c.ports) {
		c.forgetEstimate()
	} else {
		for _, pc := range cfg.Ports {
			if _, ok := c.index[pc.Key]; !ok {
				c.forgetEstimate()
				break
			}
		}
	}
	c.cfg, c.signals, c.ports, c.index = cfg, signals, ports, index
	if b := cfg.Params.Bound(); c.p > b {
		c.p = b
	}
	return nil
}

// Config returns the configuration in force.
func (c *Controller) Config() Config { return c.cfg }

// DropProbability returns the node-level p after the last Step.
func (c *Controller) DropProbability() float64 { return c.p }

// validSample reports whether v is a usable value of sig: finite, not
// negative, and for fractions not above maxValidFraction.
func validSample(sig sampler.Signal, v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return false
	}
	return !sig.IsFraction() || v <= maxValidFraction
}

// confirmed reports whether one of sigs shows at least ratio × its threshold
// (or its ConfirmThreshold when it has none) in s.
func (c *Controller) confirmed(s *sampler.Snapshot, sigs []sampler.Signal) bool {
	for _, sig := range sigs {
		v, ok := s.Get(sig)
		if !ok || !validSample(sig, v) {
			continue
		}
		ref := c.cfg.Thresholds[sig]
		if ref <= 0 {
			ref = ConfirmThreshold(sig)
		}
		if v >= c.cfg.Params.CorroborationRatio*ref {
			return true
		}
	}
	return false
}

// Step runs one tick: it evaluates the signals of s, advances the control
// law, splits the node-level p over the classes by the ports' demand in
// stats (counts since the previous tick; a port missing from stats keeps
// its previous demand estimate) and returns the decision. Time comes only
// from s.At; a snapshot not later than the previous one is stale and counts
// as a tick without usable signals.
func (c *Controller) Step(s sampler.Snapshot, stats map[PortKey]PortStats) Decision {
	d := Decision{At: s.At}
	stale := c.started && !s.At.After(c.lastAt)
	if !stale {
		c.lastAt = s.At
	}
	c.started = true

	// Signals → pressure.
	d.Signals = make([]SignalState, len(c.signals))
	var cpuOK, cgroupOK, cpuDone, cgroupDone bool
	for i, sig := range c.signals {
		st := SignalState{Signal: sig, Threshold: c.cfg.Thresholds[sig]}
		if v, ok := s.Get(sig); ok && !stale {
			st.Value = v
			// A value so large that its pressure overflows (1e308 from a
			// corrupt source) is as invalid as +Inf: an infinite pressure
			// would turn the smoothed pressure into NaN and freeze p.
			if pr := v / st.Threshold; validSample(sig, v) && !math.IsInf(pr, 0) {
				st.Available = true
				st.Pressure = pr
			} else {
				st.Invalid = true
			}
		}
		st.Corroborated = st.Available
		switch {
		case st.Available && needsCPUConfirmation(sig):
			if !cpuDone {
				cpuOK, cpuDone = c.confirmed(&s, cpuConfirmers), true
			}
			st.Corroborated = cpuOK
		case st.Available && needsCgroupConfirmation(sig):
			if !cgroupDone {
				cgroupOK, cgroupDone = c.confirmed(&s, cgroupConfirmers), true
			}
			st.Corroborated = cgroupOK
		}
		if st.Corroborated && (!d.PressureAvailable || st.Pressure > d.Pressure) {
			d.Pressure, d.Driver, d.PressureAvailable = st.Pressure, sig, true
		}
		d.Signals[i] = st
	}

	c.measure(&s, stats)
	rescaled := ""
	if !stale {
		rescaled = c.rescaleEstimate(&s)
		c.learnCapacity(&d)
	}
	// Every tick, not only over ones: the tick in which a step arrives
	// often reads below the threshold, yet its latter part already queued.
	c.trackBacklog(&s, stale)
	inForce := c.p
	c.law(&d)
	d.Reason += rescaled
	c.prevP, c.prevValue = inForce, -1
	if st := driverState(&d); st != nil && !stale {
		c.prevValue = st.Value
	}
	c.queueLaws(&d, stats, stale)
	c.allocate(&d)
	c.lastTick = Decision{Signals: d.Signals, Pressure: d.Pressure, SmoothedPressure: d.SmoothedPressure,
		PressureAvailable: d.PressureAvailable, Driver: d.Driver}
	return d
}

// minError floors the law's error: e = −1 (pressure 0.5) already asks to
// double the admitted work, more than any recovery step allows. Without the
// floor a tick at pressure 0 (an idle PSI resource) gives e = −Inf, and the
// next over tick's Kp × (e − e_prev) is +Inf, or NaN with Kp = 0, which
// would leave p at NaN for good.
const minError = -1

// errorOf is the law's error for node pressure P: e = 1 − 1/P, the share of
// the currently admitted work that is above the target (0 at the target,
// P − 1 to first order), floored at minError for P ≤ 0.5.
func errorOf(pressure float64) float64 {
	if pressure <= 0.5 {
		return minError
	}
	return 1 - 1/pressure
}

// law advances the overload state machine and the velocity-form PI law.
//
// A tick is over (pressure > 1), healthy (pressure ≤ 1, or no usable
// signal) or, inside the hysteresis band [1 − Hysteresis, 1], healthy but
// not low enough to release. Over ticks raise p by the law; p falls only on
// ticks below the band (or without signal) that follow at least Cooldown
// healthy ticks, by the law's own decrease and at most RecoveryStep.
func (c *Controller) law(d *Decision) {
	prm := &c.cfg.Params
	bound := prm.Bound()
	// Outside an overload the raw pressure and the activation count decide;
	// inside, the smoothed pressure does, so that noise neither ratchets p up
	// nor releases it.
	switch {
	case !d.PressureAvailable:
		c.smoothOK = false
	case c.overloaded && c.smoothOK:
		c.smooth += prm.Smoothing * (d.Pressure - c.smooth)
	default:
		c.smooth, c.smoothOK = d.Pressure, true
	}
	d.SmoothedPressure = c.smooth
	over := c.smoothOK && c.smooth > 1
	below := !c.smoothOK || c.smooth < 1-prm.Hysteresis

	// An onset drain (onset.go) runs at the onset check's cadence; this
	// tick's signals still mix the traffic before the surge with the
	// drain, so the tick holds p, or ends a drain that outlived its limit.
	if c.onset.active {
		if d.At.Before(c.onset.until) {
			// The split of the surge the drain was planned for, not the
			// pre-surge demand this tick measured: a drain capped at the
			// less protected classes stays there.
			c.weights, c.attempts = c.onset.weights, c.onset.attempts
			d.Reason = fmt.Sprintf("%s: holding while a surge's backlog drains (%.0f connections)", describe(d), c.onset.backlog)
		} else {
			d.Reason = c.endOnset(d.At)
		}
		c.finish(d)
		return
	}

	if !c.overloaded {
		if over {
			c.overTicks++
		} else {
			c.overTicks = 0
		}
		if c.overTicks < prm.ActivationTicks {
			d.Reason = c.quietReason(d)
			c.finish(d)
			return
		}
		c.startOverload(d.At)
		d.Events = append(d.Events, Event{Kind: EventOverloadStart, Reason: fmt.Sprintf(
			"%s over its threshold for %d consecutive ticks", describe(d), prm.ActivationTicks)})
	}

	if over {
		c.healthy = 0
	} else {
		c.healthy++
	}
	var delta float64
	saturated := false
	understated := c.afterOnset && !over && c.estimateUnderstated(d)
	forgot := c.checkEstimate(d, over)
	// The queue has emptied once the driver reads below its threshold: the
	// service idled during the tick.
	drained := c.draining && d.PressureAvailable && d.Pressure < 1
	if drained {
		c.backlog = 0
	}
	switch {
	case understated:
		// The onset check cut on an estimate that the first tick after
		// its drain disproves the other way: the service did far less
		// work than the estimate predicted for what was admitted.
		c.saturated, c.prevErr, c.smoothOK = 0, 0, false
		pe, rate, _ := c.sustainableP(d)
		delta = pe - c.p
		c.healthy = prm.Cooldown - 1
		d.Reason = fmt.Sprintf("%s while %.0f new/s were admitted: the saturation estimate understated the capacity, relearnt (%.0f of %.0f new/s fit under the threshold)",
			describe(d), c.admitted, rate, c.offered)
	case drained:
		c.saturated, c.draining = 0, false
		c.prevErr = errorOf(d.Pressure)
		// The smoothed pressure carries the drain's pinned ticks: it
		// restarts from the next tick's reading, the first of the new p.
		c.smoothOK = false
		note := ""
		if pe, rate, ok := c.sustainableP(d); ok && pe < c.p {
			delta = pe - c.p
			note = fmt.Sprintf(" to the saturation estimate (%.0f of %.0f new/s fit under the threshold)", rate, c.offered)
		}
		// Hold the next tick: the signal shows the new p a tick later.
		c.healthy = prm.Cooldown - 1
		if delta < 0 {
			// Nothing to return to: the p before was the drain's.
			c.sinceJump, c.pBeforeJump = 1, 0
		}
		d.Reason = fmt.Sprintf("%s: backlog drained, shedding down%s", describe(d), note)
	case over:
		e := errorOf(c.smooth)
		note := ""
		saturated = c.saturatedDriver(d)
		// The ceiling caps the driver's pressure, and while a queue builds
		// the signal lags the work admitted; the admitted rate against
		// what fit under the threshold does neither. Only at the start of
		// an overload: later the admitted rate also carries the retries
		// of what was shed, which the signal already answers.
		useEstimate := saturated || c.overTicksIn < estimateTicks
		if useEstimate {
			if est, rate, ok := c.saturationPressure(d); ok && est > c.smooth {
				e = errorOf(est)
				note = fmt.Sprintf("; estimate: %.0f new/s admitted, %.0f/s fit under the threshold (pressure %.2f)", c.admitted, rate, est)
			}
		}
		c.overTicksIn++
		gain := prm.Ki * e
		if saturated {
			// The driver sits at its ceiling: the pressure understates the
			// overload, so each further saturated tick multiplies the step.
			gain *= math.Pow(prm.SaturationBoost, float64(c.saturated))
			gain = math.Min(gain, maxSaturatedCut)
			c.saturated++
		} else {
			c.saturated = 0
		}
		delta = c.scale(true) * (gain + prm.Kp*(e-c.prevErr))
		// Falling but still above target: hold rather than release
		// before the cooldown.
		delta = math.Min(math.Max(delta, 0), prm.MaxStep)
		c.prevErr = e
		// Where the estimate sizes the overload, p goes straight to what
		// admits the work that fits less the backlog to drain within the
		// next tick, not by the law's bounded steps: every tick of a 3×
		// overload at a partial cut queues work its clients abandon.
		if wasDraining := c.draining; useEstimate || wasDraining {
			if pf, ok := c.feedforward(d, saturated); ok && (pf > c.p+delta || wasDraining) {
				// While draining, p follows the plan down as the backlog
				// empties although the signal stays pinned until the
				// queue is gone: holding the bound would idle the service.
				delta = pf - c.p
				rate, _ := c.fitRate(d)
				note = fmt.Sprintf("; estimate: %.0f new/s admitted, %.0f/s fit under the threshold", c.admitted, rate)
				if c.draining {
					note += fmt.Sprintf(", draining a backlog of %.0f connections", c.backlog)
				}
			}
		}
		d.Reason = fmt.Sprintf("%s: shedding%s", describe(d), note)
	case !below:
		c.saturated = 0
		c.prevErr = errorOf(c.smooth)
		d.Reason = fmt.Sprintf("%s: within %.0f%% below the target, holding", describe(d), prm.Hysteresis*100)
	case c.healthy <= prm.Cooldown:
		c.saturated = 0
		if c.smoothOK {
			c.prevErr = errorOf(c.smooth)
		}
		d.Reason = fmt.Sprintf("%s: healthy for %d of %d cooldown ticks, holding", describe(d), c.healthy, prm.Cooldown)
	case !c.smoothOK:
		c.saturated = 0
		delta = -prm.RecoveryStep
		c.prevErr = 0
		d.Reason = "no usable signal: recovering"
	default:
		c.saturated = 0
		e := errorOf(c.smooth)
		want := c.scale(false) * (prm.Ki*e + prm.Kp*(e-c.prevErr))
		// The law's own decrease, at most RecoveryStep: progressive
		// recovery that probes capacity rather than jumping back.
		fall := math.Min(prm.RecoveryStep, math.Max(-want, 0))
		if math.IsNaN(fall) {
			fall = prm.RecoveryStep
		}
		note := ""
		// Far above what the saturation estimate says fits (typically
		// after shedding at the bound to drain a backlog), fall straight
		// to it: it admits what put the signal at its threshold. Near it
		// the estimate's noise would make p jitter, and the law decides.
		if pe, rate, ok := c.sustainableP(d); ok && c.p-pe > math.Max(fall, estimateGap) {
			fall = c.p - pe
			note = fmt.Sprintf(" to the saturation estimate (%.0f of %.0f new/s fit under the threshold)", rate, c.offered)
			// The signal shows this jump one tick later: hold for that
			// tick rather than keep falling on a reading of the old p.
			c.healthy = prm.Cooldown - 1
			c.sinceJump, c.pBeforeJump = 1, c.p
			// The smoothed pressure describes the old p.
			c.smoothOK = false
		}
		delta = -fall
		c.prevErr = e
		d.Reason = fmt.Sprintf("%s: healthy, recovering%s", describe(d), note)
	}
	if forgot {
		d.Reason += "; the saturation estimate is forgotten: pinned on two ticks while admitting what it says fits (the capacity is lower than when it was learnt)"
		// A recovery jump was a probe the signal answered: back to the
		// p that held the signal before it, from where the law recovers.
		if back := c.pBeforeJump - c.p; back > delta {
			delta = back
			d.Reason += fmt.Sprintf(", p back to %.2f", c.pBeforeJump)
		}
		c.pBeforeJump = 0
	}
	c.p = math.Min(math.Max(c.p+delta, 0), bound)
	if c.p == bound && over {
		d.Reason += fmt.Sprintf(" at the bound %.2f (min_pass_rate %.2f)", bound, prm.MinPassRate)
	}

	if c.p == 0 && below {
		d.Events = append(d.Events, Event{Kind: EventOverloadEnd, OverloadSince: c.since, Reason: fmt.Sprintf(
			"%s: drop probability back to 0 after %s", describe(d), d.At.Sub(c.since).Round(time.Millisecond))})
		c.overloaded, c.healthy, c.prevErr = false, 0, 0
		c.draining, c.sinceJump, c.pinnedAtFit, c.pBeforeJump = false, 0, 0, 0
		c.since = time.Time{}
	} else if d.At.Sub(c.lastEvent) >= prm.ContinueEvery {
		c.lastEvent = d.At
		d.Events = append(d.Events, Event{Kind: EventOverloadContinue, Reason: fmt.Sprintf(
			"%s: overloaded for %s", d.Reason, d.At.Sub(c.since).Round(time.Millisecond))})
	}
	c.finish(d)
}

// startOverload enters an overload at at, with nothing of a previous one
// carried over (the backlog estimate is the caller's: the tick keeps what
// it tracked before the start).
func (c *Controller) startOverload(at time.Time) {
	c.overloaded, c.since, c.lastEvent = true, at, at
	c.healthy, c.prevErr, c.overTicks, c.saturated, c.overTicksIn = 0, 0, 0, 0, 0
	c.draining, c.sinceJump, c.pinnedAtFit, c.pBeforeJump = false, 0, 0, 0
}

// jumpCheckTicks is how many ticks after a recovery jump to the estimate a
// disproof of it returns p to where it was before the jump.
const jumpCheckTicks = 4

// checkEstimate forgets the saturation estimate when the signal disproves
// it, and reports whether it did: the driver pinned on two over ticks in a
// row while no more than drainAdmitted × what the estimate says fits was
// admitted and no backlog (by the estimate's own model) explains it. The
// estimate then overstates the capacity, which has fallen since it was
// learnt; jumping to it would pin the service again and again.
func (c *Controller) checkEstimate(d *Decision, over bool) bool {
	if c.sinceJump > 0 {
		if c.sinceJump++; c.sinceJump > jumpCheckTicks {
			c.sinceJump, c.pBeforeJump = 0, 0
		}
	}
	// The first tick after an onset drain also served the surge's
	// backlog: pinned, but not by what fits.
	first := c.afterOnset
	c.afterOnset = false
	rate, ok := c.fitRate(d)
	if ok && over && !first && !c.draining && c.saturatedDriver(d) &&
		c.admitted <= drainAdmitted*rate && c.backlog <= drainStart*rate*c.dt {
		c.pinnedAtFit++
	} else {
		c.pinnedAtFit = 0
	}
	if c.pinnedAtFit < 2 {
		return false
	}
	c.forgetEstimate()
	return true
}

// forgetEstimate drops the saturation estimate and everything built on it.
func (c *Controller) forgetEstimate() {
	c.capOK, c.draining, c.backlog = false, false, 0
	c.sinceJump, c.pinnedAtFit = 0, 0
}

// onsetUnderstated is the share of the work the saturation estimate
// predicts for what was admitted below which the first tick after an onset
// drain says the estimate understated the capacity.
const onsetUnderstated = 0.8

// estimateUnderstated reports whether the tick disproves the estimate the
// other way from checkEstimate, and relearns it then: the driver (the
// estimate's signal) reads below onsetUnderstated × what the estimate
// predicts for the admitted rate (admitted ÷ capRate), with at least
// capacityMinShare of what fits admitted. Only the first tick after an
// onset drain asks: there the estimate alone started the overload, and
// an understated one would otherwise shed a load that fits through the
// whole cooldown and recovery.
func (c *Controller) estimateUnderstated(d *Decision) bool {
	st := driverState(d)
	if st == nil || !c.capOK || st.Signal != c.capSignal || !c.ratesOK || st.Value <= 0 || c.capRate <= 0 {
		return false
	}
	if c.admitted < capacityMinShare*c.capRate*st.Threshold || st.Value >= onsetUnderstated*c.admitted/c.capRate {
		return false
	}
	c.capRate = c.admitted / st.Value
	return true
}

// driverState returns the state of the tick's driving signal, or nil when
// no signal drives it.
func driverState(d *Decision) *SignalState {
	if !d.PressureAvailable {
		return nil
	}
	for i := range d.Signals {
		if st := &d.Signals[i]; st.Signal == d.Driver {
			return st
		}
	}
	return nil
}

// learnCapacity updates the saturation estimate from a tick whose driver
// is a fraction between capacityMinShare of its threshold and its ceiling,
// at an admitted rate within capacitySteady of the previous tick's. Inside
// an overload the signal also carries what was admitted before the
// shedding took hold, so such a tick teaches only from a steady state: no
// drain, no backlog, no jump under check, p below the bound and unchanged
// since the previous tick, the driver near its target and steady, below
// its ceiling on both ticks (docs/controller.md §3). Learning
// inside an overload is what corrects an estimate learnt at low load, where
// each request costs more CPU (idle wake-ups, no batching), and one learnt
// before the capacity changed.
func (c *Controller) learnCapacity(d *Decision) {
	st := driverState(d)
	if st == nil || !st.Signal.IsFraction() || !c.ratesOK || c.admitted <= 0 {
		return
	}
	// Only a steady admitted rate: while it ramps up the signal lags the
	// work admitted (a queue is building), and the ratio overstates what
	// fits.
	if c.prevAdm <= 0 || math.Abs(c.admitted-c.prevAdm) > capacitySteady*math.Max(c.admitted, c.prevAdm) {
		return
	}
	if st.Value < capacityMinShare*st.Threshold || st.Value >= saturationLevel {
		return
	}
	if c.overloaded {
		// The signal steady too, and below its ceiling on the previous
		// tick as well: while a queue drains (even at the bound, with p
		// steady) the signal falls tick by tick and says nothing about
		// the admitted work.
		steady := !c.draining && c.sinceJump == 0 && math.Abs(c.p-c.prevP) <= learnSteadyP &&
			c.p < c.cfg.Params.Bound() && st.Value >= learnNearTarget*st.Threshold &&
			c.prevValue >= 0 && c.prevValue < saturationLevel &&
			math.Abs(st.Value-c.prevValue) <= capacitySteady*math.Max(st.Value, c.prevValue)
		if c.capOK && c.capSignal == st.Signal {
			steady = steady && c.backlog <= drainMin*c.capRate*st.Threshold*c.dt
		}
		if !steady {
			return
		}
	}
	r := c.admitted / st.Value
	if c.capOK && c.capSignal == st.Signal {
		c.capRate += capacitySmoothing * (r - c.capRate)
	} else {
		c.capRate, c.capSignal, c.capOK = r, st.Signal, true
		c.capQuota = 0
		if st.Signal == sampler.CgroupCPUUsageOfQuota {
			c.capQuota = c.lastQuota
		}
	}
}

// rescaleEstimate follows a change of the watched cgroup's CPU quota with
// an estimate learnt on cgroup_cpu_usage_of_quota: that signal is a share
// of the quota, so the admitted work per unit of it scales with the quota
// (halving the quota halves what fits under the same threshold). Without
// it the estimate would say twice what fits until two pinned ticks disprove
// it, and the first cut after the change would be the law's. It returns a
// note for the reason ("" when nothing changed).
func (c *Controller) rescaleEstimate(s *sampler.Snapshot) string {
	q := s.CgroupQuotaCPUs
	if q <= 0 {
		return ""
	}
	c.lastQuota = q
	if !c.capOK || c.capSignal != sampler.CgroupCPUUsageOfQuota || c.capQuota <= 0 || q == c.capQuota {
		if c.capOK && c.capSignal == sampler.CgroupCPUUsageOfQuota && c.capQuota <= 0 {
			c.capQuota = q
		}
		return ""
	}
	prev, k := c.capQuota, q/c.capQuota
	c.capRate *= k
	if c.onset.active {
		c.onset.capRate *= k
		c.onset.fit *= k
	}
	c.capQuota = q
	return fmt.Sprintf("; the cgroup's quota went from %.3g to %.3g CPUs: the saturation estimate scaled with it (%.0f new/s per unit of %s)",
		prev, q, c.capRate, sampler.CgroupCPUUsageOfQuota)
}

// fitRate is the rate (new connections/s) that the saturation estimate
// says fits under the driver's threshold, and false without an estimate for
// the driver or without rates this tick.
func (c *Controller) fitRate(d *Decision) (float64, bool) {
	st := driverState(d)
	if st == nil || !c.capOK || c.capSignal != st.Signal || !c.ratesOK {
		return 0, false
	}
	rate := c.capRate * st.Threshold
	return rate, rate > 0
}

// saturationPressure estimates the pressure of a driver pinned at its
// ceiling as this tick's admitted rate over fitRate.
func (c *Controller) saturationPressure(d *Decision) (pressure, rate float64, ok bool) {
	rate, ok = c.fitRate(d)
	if !ok {
		return 0, 0, false
	}
	return c.admitted / rate, rate, true
}

// trackBacklog advances the backlog estimate by one tick: what was
// admitted less what the estimate's signal says was served (capRate ×
// its value, at most 1). A signal below its ceiling idled during the tick,
// so the queue emptied and only this tick's excess can remain; a pinned one
// adds to what was there. A stale tick, or one without the signal or the
// counts, holds the estimate: a starved sampler is likeliest when the CPU
// is pinned, and dropping the backlog then would end a drain with the queue
// still full. Without an estimate it is 0.
func (c *Controller) trackBacklog(s *sampler.Snapshot, stale bool) {
	if !c.capOK {
		c.backlog = 0
		return
	}
	v, ok := s.Get(c.capSignal)
	if stale || !c.ratesOK || !ok || !validSample(c.capSignal, v) {
		return
	}
	excess := (c.admitted - c.capRate*math.Min(v, 1)) * c.dt
	if v < saturationLevel {
		c.backlog = math.Max(0, excess)
	} else {
		c.backlog = math.Max(0, c.backlog+excess)
	}
}

// feedforward returns the p the saturation estimate asks for on an over
// tick, and whether it has one: the p that admits what fits under the
// threshold, or, while a backlog drains, what fits less the backlog spread
// over one tick. A drain starts only once the signal confirms the backlog —
// still pinned although no more than drainAdmitted × what fits was admitted
// — and the backlog is at least drainStart of a tick's work; it never
// reaches a class the p that fits leaves untouched: a backlog is no reason
// to shed critical work.
func (c *Controller) feedforward(d *Decision, saturated bool) (float64, bool) {
	pe, rate, ok := c.sustainableP(d)
	if !ok || c.dt <= 0 {
		c.draining = false
		return 0, false
	}
	minDrain := drainMin * rate * c.dt
	if !c.draining && saturated && c.admitted <= drainAdmitted*rate && c.backlog > drainStart*rate*c.dt {
		c.draining = true
	}
	if !c.draining {
		return pe, true
	}
	c.draining = c.backlog > minDrain
	pf := math.Max(pe, 1-(rate-c.backlog/c.dt)/c.offered)
	return math.Min(pf, classCeiling(pe, c.cfg.Params.Bound(), c.weights)), true
}

// classCeiling is the node-level p at which the class that p reaches is at
// its bound: the most a node-level p may grow without shedding a class
// more protected than the ones p already sheds.
func classCeiling(p, bound float64, weights [NumClasses]float64) float64 {
	var total float64
	for _, w := range weights {
		total += w
	}
	if total <= 0 {
		return bound
	}
	var cum float64
	for _, cl := range [...]Class{ClassBestEffort, ClassNormal, ClassCritical} {
		cum += weights[cl]
		if ceil := bound * cum / total; ceil >= p-1e-12 && weights[cl] > 0 {
			return ceil
		}
	}
	return bound
}

// sustainableP returns the node-level p that admits fitRate of this tick's
// offered rate.
func (c *Controller) sustainableP(d *Decision) (p, rate float64, ok bool) {
	rate, ok = c.fitRate(d)
	if !ok || c.offered <= 0 {
		return 0, 0, false
	}
	return math.Max(0, 1-rate/c.offered), rate, true
}

// saturatedDriver reports whether the driving signal is a fraction at its
// ceiling (≥ saturationLevel), where its pressure no longer grows with the
// overload.
func (c *Controller) saturatedDriver(d *Decision) bool {
	st := driverState(d)
	return st != nil && st.Signal.IsFraction() && st.Value >= saturationLevel
}

// finish copies the state into d and completes the overload events.
func (c *Controller) finish(d *Decision) {
	d.DropProbability = c.p
	d.Overloaded = c.overloaded
	if c.overloaded {
		d.OverloadSince = c.since
	}
	for i := range d.Events {
		ev := &d.Events[i]
		ev.At, ev.Pressure, ev.DropProbability, ev.Signals = d.At, d.Pressure, c.p, d.Signals
		if ev.OverloadSince.IsZero() {
			ev.OverloadSince = d.OverloadSince
		}
	}
}

// quietReason explains a tick outside an overload.
func (c *Controller) quietReason(d *Decision) string {
	switch {
	case !d.PressureAvailable:
		return "no usable signal"
	case d.Pressure > 1:
		return fmt.Sprintf("%s over its threshold for %d of %d activation ticks",
			describe(d), c.overTicks, c.cfg.Params.ActivationTicks)
	}
	return fmt.Sprintf("%s: below the target", describe(d))
}

// describe names the driving signal with its value and pressure, e.g.
// "cpu_busy 0.98 (pressure 1.23, threshold 0.8)".
func describe(d *Decision) string {
	if !d.PressureAvailable {
		return "no usable signal"
	}
	for _, st := range d.Signals {
		if st.Signal == d.Driver {
			return fmt.Sprintf("%s %.3g (pressure %.2f, threshold %.3g)", st.Signal, st.Value, st.Pressure, st.Threshold)
		}
	}
	return fmt.Sprintf("pressure %.2f", d.Pressure)
}

// measure updates the ports' smoothed demand and attempts from stats and
// the class weights the law and the split use.
func (c *Controller) measure(s *sampler.Snapshot, stats map[PortKey]PortStats) {
	prm := &c.cfg.Params
	dt := s.Interval.Seconds()
	if dt <= 0 {
		dt = c.cfg.Interval.Seconds()
	}
	c.dt = dt
	var demand, attempts, count [NumClasses]float64
	var total float64
	c.prevAdm = 0
	if c.ratesOK {
		c.prevAdm = c.admitted
	}
	c.offered, c.admitted, c.ratesOK = 0, 0, false
	for i := range c.ports {
		ps := &c.ports[i]
		if st, ok := stats[ps.cfg.Key]; ok {
			rate, all := float64(st.Unique())/dt, float64(st.New)/dt
			c.offered += all
			c.admitted += float64(st.New-min(st.Dropped, st.New)) / dt
			c.ratesOK = true
			if ps.measured {
				ps.demand += prm.DemandSmoothing * (rate - ps.demand)
				ps.attempts += prm.DemandSmoothing * (all - ps.attempts)
			} else {
				ps.demand, ps.attempts, ps.measured = rate, all, true
			}
		}
		cl := ps.cfg.Class
		demand[cl] += ps.demand
		attempts[cl] += ps.attempts
		count[cl]++
		total += ps.demand
	}
	// Without measured demand the split assumes every port carries the same
	// load (and, without ports, every class): the priority order still holds
	// and the node-level share is still what the law asked for.
	switch {
	case total > 0:
		c.weights, c.attempts = demand, attempts
	case len(c.ports) > 0:
		c.weights, c.attempts = count, count
	default:
		c.weights = [NumClasses]float64{1, 1, 1}
		c.attempts = c.weights
	}
}

// scale converts the law's relative change of admitted work into a change
// of the node-level p (gain scheduling). For new work W = Σ attempts_c ×
// (1 − p_c) admitted, a step Δp of the node moves only the marginal class m
// (the first below its bound when rising, the last above 0 when falling) by
// Δp × D ÷ D_m, so ΔW ÷ W = −Δp × attempts_m × D ÷ (D_m × W): scale is the
// inverse factor. Attempts include SYN retransmits, which is where the
// retries' amplification of a heavily shed class enters. Without
// measurements every port is assumed to carry the same load and no retries,
// which reduces scale to 1 − p for a single class.
func (c *Controller) scale(rising bool) float64 {
	bound := c.cfg.Params.Bound()
	var total, admitted float64
	for cl := range c.weights {
		total += c.weights[cl]
		admitted += c.attempts[cl] * (1 - c.classP[cl])
	}
	m := -1
	for _, cl := range [...]Class{ClassBestEffort, ClassNormal, ClassCritical} {
		if c.weights[cl] <= 0 {
			continue
		}
		if rising && c.classP[cl] < bound {
			m = int(cl)
			break
		}
		if !rising && c.classP[cl] > 0 {
			m = int(cl)
		}
	}
	if m < 0 || c.attempts[m] <= 0 || total <= 0 {
		return math.Max(1-c.p, minPassScale)
	}
	return math.Max(admitted*c.weights[m]/(c.attempts[m]*total), minPassScale)
}

// allocate splits the node-level p over the classes, best-effort first, up
// to the bound, then normal, then critical, and records the changes.
func (c *Controller) allocate(d *Decision) {
	prm := &c.cfg.Params
	d.Classes = splitClasses(c.p, prm.Bound(), c.weights)

	d.Ports = make([]PortDecision, len(c.ports))
	for i := range c.ports {
		ps := &c.ports[i]
		ps.p = math.Max(d.Classes[ps.cfg.Class], ps.loop.p())
		d.Ports[i] = PortDecision{Key: ps.cfg.Key, Class: ps.cfg.Class, DropProbability: ps.p, Demand: ps.demand,
			ResponseTarget: ps.loop.target, QueueP: ps.loop.p()}
		if ps.loop.base.ok {
			d.Ports[i].Baseline = ps.loop.base.value
		}
		if changed(ps.recorded, ps.p, prm.RecordChange) {
			d.Events = append(d.Events, Event{
				Kind: EventProbabilityChange, At: d.At, Port: ps.cfg.Key, Class: ps.cfg.Class,
				From: ps.recorded, To: ps.p, Pressure: d.Pressure, DropProbability: c.p,
				Signals: d.Signals, OverloadSince: d.OverloadSince,
				Reason: d.Reason, // Port and Class name the port

			})
			ps.recorded = ps.p
		}
	}
	if changed(c.recordedNode, c.p, prm.RecordChange) {
		d.Events = append(d.Events, Event{
			Kind: EventProbabilityChange, At: d.At, From: c.recordedNode, To: c.p,
			Pressure: d.Pressure, DropProbability: c.p, Signals: d.Signals,
			OverloadSince: d.OverloadSince, Reason: d.Reason,
		})
		c.recordedNode = c.p
	}
	c.classP = d.Classes
}

// changed reports whether p moved by more than step since recorded, or
// reached 0 (so that the log always shows the end of shedding).
func changed(recorded, p, step float64) bool {
	return math.Abs(p-recorded) > step || (p == 0 && recorded != 0)
}

// splitClasses distributes the node-level share p of the total weight over
// the classes, least protected first, each class up to bound. A class with
// no weight gets bound when shedding remains at its turn (its first new
// connections would be shed like the rest of its class), else 0.
func splitClasses(p, bound float64, weights [NumClasses]float64) [NumClasses]float64 {
	var out [NumClasses]float64
	var total float64
	for _, w := range weights {
		total += w
	}
	if p <= 0 || total <= 0 {
		return out
	}
	remaining := p * total
	for _, cl := range [...]Class{ClassBestEffort, ClassNormal, ClassCritical} {
		w := weights[cl]
		if remaining <= 1e-12*total {
			break
		}
		if w <= 0 {
			out[cl] = bound
			continue
		}
		q := math.Min(bound, remaining/w)
		out[cl] = q
		remaining -= q * w
	}
	return out
}

// ClassSummary renders the class probabilities for logs:
// "critical=0.000 normal=0.120 best-effort=0.700".
func ClassSummary(classes [NumClasses]float64) string {
	var b strings.Builder
	for cl := Class(0); cl < NumClasses; cl++ {
		if cl > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%.3f", cl, classes[cl])
	}
	return b.String()
}
