package adaptive

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/pressure"
)

// Controller turns snapshots and port counts into drop probabilities
// (docs/controller.md). It is not safe for concurrent use; the daemon calls
// Step and Onset from its tick loop only.
type Controller struct {
	cfg     Config
	node    nodeLaw
	ports   []port
	index   map[olc.PortKey]int
	over    overload  // the overload as the decision log tells it
	lastAt  time.Time // the last snapshot's time; zero before the first
	classP  [olc.NumClasses]float64
	weights [olc.NumClasses]float64 // first attempts per second per class, the split's weights
	last    Decision                // the last tick's signals, for Onset's decisions
	nodeRec float64                 // the node's p at its last probability_change record
}

// New returns a controller for cfg, or an error naming every invalid field.
func New(cfg Config) (*Controller, error) {
	c := &Controller{node: nodeLaw{pass: 1}}
	if err := c.Reconfigure(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// minInterval is the shortest tick (docs/controller.md §7; the daemon's: rules.MinInterval).
const minInterval = 10 * time.Millisecond

// validate checks cfg and reports every problem at once.
func validate(cfg Config) error {
	var errs []error
	if cfg.Interval < minInterval {
		errs = append(errs, fmt.Errorf("interval %v: must be at least %v", cfg.Interval, minInterval))
	}
	for s, t := range cfg.Thresholds {
		if math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
			errs = append(errs, fmt.Errorf("threshold of %s = %v: must be 0 (unused) or positive", olc.Signal(s), t))
		}
	}
	errs = append(errs, cfg.Params.Validate()) // errors.Join drops a nil
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

// Reconfigure switches to cfg between ticks. The node's law and the state of
// ports that stay (pass rate, capacity, learnt target) are kept, so a reload
// neither releases nor restarts shedding; new ports start idle. On error the
// controller is unchanged.
func (c *Controller) Reconfigure(cfg Config) error {
	if err := validate(cfg); err != nil {
		return fmt.Errorf("controller config: %w", err)
	}
	cfg.Ports = append([]PortConfig(nil), cfg.Ports...)
	ports := make([]port, len(cfg.Ports))
	index := make(map[olc.PortKey]int, len(cfg.Ports))
	for i, pc := range cfg.Ports {
		p := &ports[i]
		*p = port{pass: 1, prevEnd: -1, away: SYNRetransmitTimeout} // idle
		if j, ok := c.index[pc.Key]; ok {
			*p = c.ports[j]
		}
		if p.cfg = pc; p.retx != olc.RetransmitsLast { // under last, the retransmits' pass rate has no floor
			p.pass = math.Min(1, math.Max(p.pass, cfg.Params.MinPassRate))
		}
		p.cap.resize(cfg.Params, cfg.Interval)
		index[pc.Key] = i
	}
	c.cfg, c.ports, c.index = cfg, ports, index
	c.node.pass = math.Max(c.node.pass, cfg.Params.MinPassRate)
	return nil
}

// Config returns the configuration in force.
func (c *Controller) Config() Config { return c.cfg }

// Shedding reports whether a law sheds now: the node's resource law (its
// pass rate below 1) or a port's own (most overloads are a port's alone).
func (c *Controller) Shedding() bool { return c.node.pass < 1 || c.portsActive() }

// portsActive reports whether a port's law sheds.
func (c *Controller) portsActive() bool {
	return slices.ContainsFunc(c.ports, func(p port) bool { return p.active() })
}

// Step runs one tick on snapshot s and the ports' counts since the previous
// tick (a port missing from stats holds its law). Time comes only from s.At;
// a snapshot not later than the previous one is stale: its signals count as
// unavailable and no port's law moves.
func (c *Controller) Step(s olc.Snapshot, stats map[olc.PortKey]PortStats) Decision {
	d := Decision{At: s.At}
	stale := !c.lastAt.IsZero() && !s.At.After(c.lastAt)
	if !stale {
		c.lastAt = s.At
	}
	dt := s.Interval.Seconds()
	if dt <= 0 {
		dt = c.cfg.Interval.Seconds()
	}
	n := pressure.Evaluate(&s, &c.cfg.Thresholds, c.cfg.Params.CorroborationRatio, stale)
	d.Signals, d.Pressure, d.PressureAvailable, d.Driver = n.Signals, n.Pressure, n.Available, n.Driver
	nodeWhy := c.node.step(&d, &c.cfg.Params)
	var reasons []string
	c.weights = [olc.NumClasses]float64{}
	for i := range c.ports {
		ps := &c.ports[i]
		st, ok := stats[ps.cfg.Key]
		switch {
		case ok && !stale:
			ps.unmeasured = 0
			if why := ps.step(st, dt, c.node.on, &c.cfg.Params); why != "" {
				reasons = append(reasons, fmt.Sprintf("%s: %s", ps.cfg.Key, why))
			}
		case !stale:
			// Nothing measured for a capacity window: the law has
			// nothing to hold its cut on, and lets go.
			if ps.unmeasured += dt; ps.unmeasured >= c.cfg.Params.CapacityWindow.Seconds() && ps.active() {
				ps.pass, ps.ceil = 1, 0
				reasons = append(reasons, fmt.Sprintf("%s: no counts for %s: pass rate 1", ps.cfg.Key, c.cfg.Params.CapacityWindow))
			}
		}
		c.weights[ps.cfg.Class] += ps.demand
	}
	if c.weights == ([olc.NumClasses]float64{}) {
		// No demand measured: each port weighs the same, each class without ports.
		for i := range c.ports {
			c.weights[c.ports[i].cfg.Class]++
		}
		if len(c.ports) == 0 {
			c.weights = [olc.NumClasses]float64{1, 1, 1}
		}
	}
	d.Reason = strings.Join(append(reasons, nodeWhy), "; ")
	c.finish(&d)
	c.last = Decision{Signals: d.Signals, Pressure: d.Pressure, PressureAvailable: d.PressureAvailable, Driver: d.Driver}
	return d
}

// Onset runs between ticks, every Params.OnsetInterval, on the datapath's
// counts of the window of length window that ends at at (each timed port's
// queue, no p95; docs/controller.md §1). It reports whether a port's pass
// rate changed, and the decision to write then, with the last tick's signals.
func (c *Controller) Onset(at time.Time, window time.Duration, stats map[olc.PortKey]PortStats) (Decision, bool) {
	prm := &c.cfg.Params
	w := window.Seconds()
	if w <= 0 || prm.OnsetInterval <= 0 || prm.OnsetInterval >= c.cfg.Interval {
		return Decision{}, false
	}
	var reasons []string
	for i := range c.ports {
		ps := &c.ports[i]
		if st, ok := stats[ps.cfg.Key]; ok {
			if why := ps.window(st, w, c.cfg.Interval.Seconds(), prm); why != "" {
				reasons = append(reasons, fmt.Sprintf("%s: %s", ps.cfg.Key, why))
			}
		}
	}
	if len(reasons) == 0 {
		return Decision{}, false
	}
	d := c.last
	d.At, d.Reason = at, strings.Join(reasons, "; ")
	c.finish(&d)
	return d, true
}

// finish fills d from the state: the class split of the node's p, each
// port's p, the overload events and the probability_change records.
func (c *Controller) finish(d *Decision) {
	prm := &c.cfg.Params
	d.DropProbability = 1 - c.node.pass
	d.Classes = splitClasses(d.DropProbability, prm.Bound(), c.weights)
	c.classP = d.Classes
	d.Ports = make([]PortDecision, len(c.ports))
	for i := range c.ports {
		d.Ports[i] = c.ports[i].decision(d.Classes[c.ports[i].cfg.Class], prm)
	}
	c.over.track(d, c.node.on || c.portsActive(), prm.ContinueEvery)
	for i := range c.ports {
		ps := &c.ports[i]
		c.record(d, &ps.recorded, ps.cfg.Key, ps.cfg.Class, d.Ports[i].DropProbability)
	}
	c.record(d, &c.nodeRec, olc.PortKey{}, 0, d.DropProbability)
}

// record adds to d the probability_change event of a port (the zero key: the
// node) whose p moved by more than RecordChange since *rec, or reached 0.
func (c *Controller) record(d *Decision, rec *float64, key olc.PortKey, cl olc.Class, p float64) {
	if math.Abs(p-*rec) > c.cfg.Params.RecordChange || (p == 0 && *rec != 0) {
		d.Events = append(d.Events, Event{Kind: EventProbabilityChange, At: d.At, Port: key, Class: cl, From: *rec, To: p,
			Pressure: d.Pressure, DropProbability: d.DropProbability, Signals: d.Signals,
			OverloadSince: d.OverloadSince, Reason: d.Reason})
		*rec = p
	}
}

// overload is the overload as the decision log tells it: from the first
// tick in which any law sheds to the first in which none does.
type overload struct {
	on        bool
	since     time.Time
	lastEvent time.Time // the last overload_start or overload_continue
}

// track adds the overload events of a decision whose laws are active or not.
func (o *overload) track(d *Decision, active bool, every time.Duration) {
	ev := Event{At: d.At, Pressure: d.Pressure, DropProbability: d.DropProbability, Signals: d.Signals, OverloadSince: o.since}
	switch {
	case active && !o.on:
		o.on, o.since, o.lastEvent, ev.OverloadSince = true, d.At, d.At, d.At
		ev.Kind, ev.Reason = EventOverloadStart, d.Reason
	case !active && o.on:
		ev.Kind = EventOverloadEnd
		ev.Reason = fmt.Sprintf("%s: every law back to pass rate 1 after %s", d.Reason, d.At.Sub(o.since).Round(time.Millisecond))
		o.on, o.since = false, time.Time{}
	case active && d.At.Sub(o.lastEvent) >= every:
		o.lastEvent, ev.Kind = d.At, EventOverloadContinue
		ev.Reason = fmt.Sprintf("%s: overloaded for %s", d.Reason, d.At.Sub(o.since).Round(time.Millisecond))
	}
	d.Overloaded, d.OverloadSince = o.on, o.since
	if ev.Kind != 0 {
		d.Events = append(d.Events, ev)
	}
}
