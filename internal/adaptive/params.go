package adaptive

import (
	"errors"
	"fmt"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/ranges"
)

// Params are the control-law parameters. docs/controller.md gives the law
// they enter; docs/tuning.md what each one trades off. DefaultParams returns
// the defaults with their reasons. Each field's tags declare, once, its
// config key (controller.<key>) and its valid range (internal/ranges):
// Validate checks them, and internal/rules decodes and reports by them.
type Params struct {
	// Ki is the integral gain of the velocity-form PI law (> 0, ≤ 2). With
	// the gain scheduling of the law (see docs/controller.md) Ki = 1 removes
	// the whole excess of a load proportional to admitted work in one tick;
	// smaller values take that fraction of the step per tick.
	Ki float64 `yaml:"ki" range:"(0, 2]"`
	// Kp is the proportional gain of the velocity-form PI law (≥ 0, ≤ 2): it
	// reacts to the change of the error between ticks, which helps signals
	// that lag (avg10, load averages) and adds noise on fast ones.
	Kp float64 `yaml:"kp" range:"[0, 2]"`
	// ActivationTicks is how many consecutive ticks the node pressure must be
	// above 1 before an overload starts (1..10). 2 makes a single-tick spike
	// noise while a real step is acted on at its second tick.
	ActivationTicks int `yaml:"activation_ticks" range:"[1, 10]" hint:"2 ignores single-tick spikes and acts at the second tick"`
	// Smoothing is the weight (0 < x ≤ 1) of the newest tick in the
	// exponential average of the node pressure that the law uses while an
	// overload is on; 1 disables smoothing.
	Smoothing float64 `yaml:"smoothing" range:"(0, 1]"`
	// Cooldown is how many consecutive healthy ticks (pressure below
	// 1 − Hysteresis, or no usable signal) must pass before p may fall
	// (0..1000).
	Cooldown int `yaml:"cooldown_ticks" range:"[0, 1000]" hint:"5 (2.5 s at 500ms) outlasts the 1 s SYN retransmit"`
	// Hysteresis is the width of the band below the target, as a fraction of
	// the threshold (0..0.5), in which p holds: a tick with pressure in
	// [1 − Hysteresis, 1] is neither overloaded nor healthy.
	Hysteresis float64 `yaml:"hysteresis" range:"[0, 0.5]"`
	// SaturationBoost (1..4) multiplies the integral step for every further
	// consecutive over-target tick in which the driving signal is a fraction
	// pinned at its ceiling (≥ 0.95): a CPU at 100 % shows pressure
	// 1/threshold whatever the overload, so the law would otherwise creep.
	// 1 disables the boost.
	SaturationBoost float64 `yaml:"saturation_boost" range:"[1, 4]"`
	// MaxStep bounds the increase of the node-level p per tick (0 < x ≤ 1).
	MaxStep float64 `yaml:"max_step" range:"(0, 1]"`
	// RecoveryStep bounds the decrease of the node-level p per tick once the
	// cooldown has passed (0 < x ≤ 1).
	RecoveryStep float64 `yaml:"recovery_step" range:"(0, 1]"`
	// MinPassRate is the share of new work that is always admitted (0..1):
	// p never exceeds 1 − MinPassRate, so a faulty metric can never silence
	// a service completely.
	MinPassRate float64 `yaml:"min_pass_rate" range:"[0, 1]" suggest:"percent"`
	// CorroborationRatio is the share of its threshold (0 < x ≤ 1) a
	// confirming signal must show for a signal that needs corroboration to
	// count (see docs/controller.md).
	CorroborationRatio float64 `yaml:"corroboration_ratio" range:"(0, 1]"`
	// DemandSmoothing is the weight (0 < x ≤ 1) of the newest tick in the
	// exponentially smoothed per-port demand; 1 uses the last tick alone.
	DemandSmoothing float64 `yaml:"demand_smoothing" range:"(0, 1]"`
	// ContinueEvery is the period of overload_continue events (≥ 1 s).
	ContinueEvery time.Duration `yaml:"continue_every" range:"[1s, ∞)" hint:"overload_continue is meant for people reading the log; 10s is the default"`
	// RecordChange is the change of a port's p (fraction, 0 < x ≤ 1) since
	// its last probability_change record that makes a new record.
	RecordChange float64 `yaml:"record_change" range:"(0, 1]"`
	// OnsetInterval is how often, between ticks, the daemon reads each
	// timed port's requests in flight against Little's law, and the new
	// connections of the other ports against what the saturation estimate
	// says fits (Controller.Onset): 0 turns the onset check off, otherwise
	// 10 ms..1 s.
	// At or above the tick interval it is off too: the tick sees the
	// arrival as early.
	OnsetInterval time.Duration `yaml:"onset_interval" range:"[10ms, 1s]" off:"0" hint:"0 turns the onset check off; 50ms is the default"`
	// OnsetRatio is how many times what fits under the threshold the new
	// connections of the newest onset windows (a span of up to 200 ms)
	// must arrive at for the onset check to start an overload before the
	// signals show it (1.1..10); the span must also exceed what fits by 5
	// Poisson deviations and hold at least 10 connections.
	OnsetRatio float64 `yaml:"onset_ratio" range:"[1.1, 10]"`
	// LatencyKp is the proportional gain of the law on the measured queue
	// (0..4): it acts on the change of the normalised p95 error between
	// ticks, which is the queue's growth, and damps the loop.
	LatencyKp float64 `yaml:"latency_kp" range:"[0, 4]"`
	// LatencyKi is the integral gain of the law on the measured queue
	// (0 < x ≤ 2): the share of the excess queue (in ticks of work) the
	// pass rate removes per tick, and the rate of the rise below target.
	LatencyKi float64 `yaml:"latency_ki" range:"(0, 2]"`
	// TargetFactor is the multiple of a port's baseline p95 an auto target
	// holds (1.2..20).
	TargetFactor float64 `yaml:"target_factor" range:"[1.2, 20]"`
	// InitialTarget is an auto target before its baseline is learnt (1 ms
	// .. 30 s): a port overloaded from its first tick is held there.
	InitialTarget time.Duration `yaml:"initial_target" range:"[1ms, 30s]" hint:"100ms is the default"`
	// ResponseCooldown is how long after the last cut the law on the
	// measured queue waits before raising the pass rate (0..30 s).
	ResponseCooldown time.Duration `yaml:"response_cooldown" range:"[0, 30s]" hint:"1s, the first SYN retransmit, is the default"`
}

// DefaultParams returns the defaults. The figures that justify them are the
// plant test's (TestPlantStep) and are written down in docs/tuning.md.
func DefaultParams() Params {
	return Params{
		// Ki = 0.5 removes half the measured excess per tick: with the gain
		// scheduling of the law the closed-loop error halves every tick,
		// and measurement noise reaches p at half strength. Larger values
		// settle faster and ring; see docs/tuning.md.
		Ki: 0.5,
		// Kp = 0.1 is a small derivative-like kick that shortens the reaction
		// to lagging signals without making the fast ones ring.
		Kp: 0.1,
		// 2 ticks: one 500 ms spike is noise, a real step is acted on at
		// the second tick (1 s at the default interval).
		ActivationTicks: 2,
		// 0.5: the noise of one sample reaches the law at half strength
		// (standard deviation × 0.58) for a lag of about one tick.
		Smoothing: 0.5,
		// 5 healthy ticks (2.5 s) before p may fall: longer than the 1 s SYN
		// retransmit timeout, so the retries of the connections just shed do
		// not arrive to a controller that has already let go.
		Cooldown: 5,
		// A 5 % band below the target in which p holds: noise of a few
		// percentage points on CPU busy does not move p either way.
		Hysteresis: 0.05,
		// Doubling: a CPU pinned at 100 % under 3× overload (with
		// retrying clients) is brought to ≤ 1.05 C of admitted work within
		// 4.5 s in the plant test, while a signal below its ceiling (which
		// shows the size of the overload) is never boosted.
		SaturationBoost: 2,
		// At most +0.25 per tick: a wild sample cannot shed everything at
		// once, and the default bound is still reachable in 3 ticks.
		MaxStep: 0.25,
		// At most −0.05 per tick: from the default bound 0.7 back to 0 in
		// 14 ticks (7 s) after the cooldown, 9.5 s in all, slow enough to
		// let the server's queues drain and probe capacity progressively.
		RecoveryStep: 0.05,
		// 30 % always pass (OLC practice): a stuck or lying metric can at
		// most cut a service to 30 %, never to zero. The price: once the
		// offered load exceeds about target ÷ 0.3 ≈ 3× the capacity at
		// the target (less when dropped clients retry), the bound is
		// reached and the node is no longer held at its target.
		MinPassRate: 0.3,
		// Half the threshold: a confirming signal at half its target shows
		// real CPU pressure; below it, load or throttling are artefacts.
		CorroborationRatio: 0.5,
		// 0.5: demand follows a change within 2-3 ticks while a burst of one
		// tick moves the class split by half its size only.
		DemandSmoothing: 0.5,
		// Every 10 s: a long overload stays visible in the decision log
		// without writing a line per tick.
		ContinueEvery: 10 * time.Second,
		// 0.01: a change of one percentage point is recorded; smaller
		// moves are noise in a log meant for people.
		RecordChange: 0.01,
		// 50 ms: a surge is cut a tenth of a default tick after it
		// arrives, so the requests admitted before the cut wait at most
		// about 100 ms behind it at 3 × the capacity; spans of several
		// windows (up to 200 ms) catch smaller surges. What reading the
		// counters twenty times a second costs: BenchmarkStats,
		// docs/datapath.md.
		OnsetInterval: 50 * time.Millisecond,
		// 1.5: only a surge clearly beyond the capacity; the estimate's
		// own error is about 10 %, and a load near what fits is the law's
		// to follow.
		OnsetRatio: 1.5,
		// Kp 0.5 damps the queue's integration: the loop's closed-loop
		// poles stay real on the plant test's queues.
		LatencyKp: 0.5,
		// Ki 0.25: a quarter of the excess queue (in ticks of work) per
		// tick; below the target the pass rate rises by a quarter of the
		// relative room, at most recovery_step.
		LatencyKi: 0.25,
		// 3 × the baseline p95: the queue the loop keeps is about twice
		// the service time, enough that the workers never idle while
		// clients wait, and the p99 stays within 3 × its unloaded value.
		TargetFactor: 3,
		// 100 ms before a baseline exists: a cold start into overload is
		// held at what a person does not notice.
		InitialTarget: 100 * time.Millisecond,
		// 1 s: the first retransmit of a SYN shed now arrives 1 s later.
		ResponseCooldown: time.Second,
	}
}

// The range of Params.OnsetInterval when it is not 0: below 10 ms a window
// holds too few connections to measure a rate; above 1 s the check is
// slower than any sensible tick.
const (
	MinOnsetInterval = 10 * time.Millisecond
	MaxOnsetInterval = time.Second
)

// Bound returns the upper bound of every drop probability, 1 − MinPassRate.
func (p Params) Bound() float64 { return 1 - p.MinPassRate }

// Validate checks every parameter against the range its field's tag
// declares (the one declaration internal/rules also decodes and reports
// with file:line) and reports every violation, joined with errors.Join.
func (p Params) Validate() error {
	var errs []error
	for _, pr := range ranges.Check(p) {
		errs = append(errs, fmt.Errorf("%s: %s", pr.Key, pr.Msg))
	}
	return errors.Join(errs...)
}

// ConfirmThreshold is the reference a confirming signal is compared with
// when it has no threshold of its own configured (see docs/controller.md):
// a signal counts as confirming when its value is at least
// CorroborationRatio × its threshold, or × this reference without one.
func ConfirmThreshold(sig olc.Signal) float64 {
	switch sig {
	case olc.CPUBusy:
		// 0.8 is the usual CPU target; half of it (40 % busy) is clearly
		// a working CPU, not one whose load comes from tasks blocked on I/O.
		return 0.8
	case olc.PSICPUSomeAvg10, olc.PSICPUSome,
		olc.CgroupPSICPUSomeAvg10, olc.CgroupPSICPUSome:
		// Tasks waiting for a CPU 20 % of the time is real contention;
		// half of it (10 %) already shows runnable work queueing.
		return 0.2
	case olc.CgroupCPUUsageOfQuota:
		// A cgroup using 90 % of its quota is about to be throttled for
		// good; at half of that (45 %) throttling is plausibly load, below
		// it bursts of a few threads.
		return 0.9
	}
	return 0
}

// cpuConfirmers confirm the load and run-queue signals; cgroupConfirmers
// confirm the cgroup throttling signals.
var (
	cpuConfirmers    = []olc.Signal{olc.CPUBusy, olc.PSICPUSomeAvg10, olc.PSICPUSome}
	cgroupConfirmers = []olc.Signal{olc.CgroupCPUUsageOfQuota, olc.CgroupPSICPUSomeAvg10, olc.CgroupPSICPUSome}
)

// needsCPUConfirmation reports whether sig counts only with CPU pressure:
// the load average and the run queue include tasks in uninterruptible sleep
// and grow on an idle CPU that waits on I/O.
func needsCPUConfirmation(sig olc.Signal) bool {
	switch sig {
	case olc.Load1, olc.Load1PerCore, olc.Runnable, olc.RunqPerCore:
		return true
	}
	return false
}

// needsCgroupConfirmation reports whether sig counts only with cgroup CPU
// usage or cgroup CPU PSI: bursty multi-threaded programs are throttled in
// many periods while using a small part of their quota.
func needsCgroupConfirmation(sig olc.Signal) bool {
	return sig == olc.CgroupThrottledRatio || sig == olc.CgroupThrottledS
}

// Confirmers returns the signals that can corroborate sig, or nil when sig
// counts on its own.
func Confirmers(sig olc.Signal) []olc.Signal {
	switch {
	case needsCPUConfirmation(sig):
		return cpuConfirmers
	case needsCgroupConfirmation(sig):
		return cgroupConfirmers
	}
	return nil
}
