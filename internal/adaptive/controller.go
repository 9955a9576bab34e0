package adaptive

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// Controller turns snapshots and port counts into drop probabilities. It is
// not safe for concurrent use; the daemon calls Step from its tick loop only.
type Controller struct {
	cfg     Config
	signals []olc.Signal // signals with a threshold, canonical order

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
	capSignal olc.Signal
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

	measuredFor int // ticks left in which a port's queue counts as measured

	lastQuota  float64    // the latest snapshot's CgroupQuotaCPUs (0: none yet)
	onset      onsetState // the onset check between ticks (onset.go)
	afterOnset bool       // the next tick is the first since an onset drain ended
	lastTick   Decision   // the last tick's signals, for decisions between ticks

	recordedNode float64
	classP       [olc.NumClasses]float64 // class probabilities in force (last tick's split)
	weights      [olc.NumClasses]float64 // demand per class used by the split
	attempts     [olc.NumClasses]float64 // new connections/s per class, retransmits included
	ports        []portState
	index        map[olc.PortKey]int
}

type portState struct {
	loop     latencyLoop // the law on the port's measured queue
	onset    queueOnset  // the onset check on it between ticks (onsetqueue.go)
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
			errs = append(errs, fmt.Errorf("threshold of %s = %v: must be 0 (unused) or positive", olc.Signal(s), t))
		}
	}
	if err := cfg.Params.Validate(); err != nil {
		errs = append(errs, err)
	}
	seen := make(map[olc.PortKey]bool, len(cfg.Ports))
	for _, pc := range cfg.Ports {
		switch {
		case pc.Key.Proto != olc.ProtoTCP && pc.Key.Proto != olc.ProtoUDP:
			errs = append(errs, fmt.Errorf("port %s: protocol must be tcp or udp", pc.Key))
		case pc.Key.Port == 0:
			errs = append(errs, fmt.Errorf("port %s: port 0 cannot be protected", pc.Key))
		case pc.Class >= olc.NumClasses:
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
	signals := make([]olc.Signal, 0, olc.NumSignals)
	for s, t := range cfg.Thresholds {
		if t > 0 {
			signals = append(signals, olc.Signal(s))
		}
	}
	ports := make([]portState, len(cfg.Ports))
	index := make(map[olc.PortKey]int, len(cfg.Ports))
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

// Step runs one tick: it evaluates the signals of s, advances the control
// law, splits the node-level p over the classes by the ports' demand in
// stats (counts since the previous tick; a port missing from stats keeps
// its previous demand estimate) and returns the decision. Time comes only
// from s.At; a snapshot not later than the previous one is stale and counts
// as a tick without usable signals.
func (c *Controller) Step(s olc.Snapshot, stats map[olc.PortKey]PortStats) Decision {
	d := Decision{At: s.At}
	stale := c.started && !s.At.After(c.lastAt)
	if !stale {
		c.lastAt = s.At
	}
	c.started = true

	c.evaluate(&s, stale, &d)

	c.measure(&s, stats)
	rescaled := ""
	if c.queueMeasured(stats, stale) {
		// The queue is measured: the estimate that infers it from a CPU
		// signal stands down (estimate.go), and with it the drain, the
		// onset check and the recovery jumps.
		c.forgetEstimate()
	} else if !stale {
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
	c.queueLaws(&d, stats, stale, s.CgroupThrottleGap)
	c.allocate(&d)
	c.lastTick = Decision{Signals: d.Signals, Pressure: d.Pressure, SmoothedPressure: d.SmoothedPressure,
		PressureAvailable: d.PressureAvailable, Driver: d.Driver}
	return d
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
