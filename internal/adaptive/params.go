package adaptive

import (
	"errors"
	"fmt"
	"time"

	"github.com/olcd/olcd/internal/ranges"
)

// Params are the law's parameters, each a time, a rate or a share; their
// defaults and reasons are in docs/config.md, the law they enter in
// docs/controller.md. Each field's tags declare, once, its config key
// (controller.<key>) and its valid range (internal/ranges): Validate checks
// them, and internal/rules decodes and reports by them.
type Params struct {
	// Ki is the integral gain of the node's resource law (0 < x ≤ 2): the
	// share of the admitted work above the target the pass rate removes per
	// tick (velocity form: pass ← pass × (1 − Ki × e − Kp × Δe)).
	Ki float64 `yaml:"ki" range:"(0, 2]"`
	// Kp is the proportional gain of the node's resource law (0..2), on the
	// change of the error between ticks: it answers a signal that lags
	// (avg10, load) sooner, and adds noise on fast ones.
	Kp float64 `yaml:"kp" range:"[0, 2]"`
	// ActivationTicks is how many consecutive ticks the node pressure must
	// be above 1 before the resource law sheds (1..10).
	ActivationTicks int `yaml:"activation_ticks" range:"[1, 10]" hint:"2 ignores single-tick spikes and acts at the second tick"`
	// Hysteresis is the width of the band below a signal's threshold, as a
	// share of it (0..0.5), in which the resource law holds its pass rate.
	Hysteresis float64 `yaml:"hysteresis" range:"[0, 0.5]"`
	// MinPassRate is the share of new work always admitted (0..1), so that
	// a faulty measurement can never silence a service; a port is held at
	// its capacity up to an offered load of about 1 ÷ MinPassRate times it.
	MinPassRate float64 `yaml:"min_pass_rate" range:"[0, 1]" suggest:"percent"`
	// CorroborationRatio is the share of its threshold (0 < x ≤ 1) a
	// confirming signal must show for a signal that needs corroboration
	// (load, run queue, cgroup throttling) to count.
	CorroborationRatio float64 `yaml:"corroboration_ratio" range:"(0, 1]"`
	// CapacityWindow is how long a port's measured capacity μ̂ holds
	// (1 s..60 s): μ̂ is the most it answered per second over this window,
	// so a capacity that fell is believed within it.
	CapacityWindow time.Duration `yaml:"capacity_window" range:"[1s, 60s]" hint:"3s, three SYN retransmit timeouts, is the default"`
	// TargetFactor is the multiple of a port's learnt no-load p95 an auto
	// target holds (1.2..20).
	TargetFactor float64 `yaml:"target_factor" range:"[1.2, 20]"`
	// InitialTarget is an auto target before its no-load p95 is learnt
	// (1 ms..30 s).
	InitialTarget time.Duration `yaml:"initial_target" range:"[1ms, 30s]" hint:"100ms is the default"`
	// OnsetInterval is the length of the onset windows in which the daemon
	// reads each timed port's counts between ticks (Controller.Onset): 0
	// turns them off; otherwise 10 ms..1 s, and off at or above the tick.
	OnsetInterval time.Duration `yaml:"onset_interval" range:"[10ms, 1s]" off:"0" hint:"0 turns the onset windows off; 50ms is the default"`
	// ContinueEvery is the period of overload_continue events (≥ 1 s).
	ContinueEvery time.Duration `yaml:"continue_every" range:"[1s, ∞)" hint:"overload_continue is meant for people reading the log; 10s is the default"`
	// RecordChange is the change of a port's p (share, 0 < x ≤ 1) since its
	// last probability_change record that makes a new record.
	RecordChange float64 `yaml:"record_change" range:"(0, 1]"`
}

// DefaultParams returns the defaults; docs/config.md gives each one's
// reason.
func DefaultParams() Params {
	return Params{
		Ki: 0.5, Kp: 0.1, ActivationTicks: 2, Hysteresis: 0.05, MinPassRate: 0.1,
		CorroborationRatio: 0.5, CapacityWindow: 3 * time.Second, TargetFactor: 3,
		InitialTarget: 100 * time.Millisecond, OnsetInterval: 50 * time.Millisecond,
		ContinueEvery: 10 * time.Second, RecordChange: 0.01,
	}
}

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
