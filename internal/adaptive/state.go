package adaptive

import (
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// State is what a restart of the daemon keeps of the controller: the drop
// probabilities in force and what it learnt of each port (internal/statefile
// writes it between restarts). Export fills it; Restore puts it back.
type State struct {
	// DropProbability is the node-level p (0..1).
	DropProbability float64 `json:"drop_probability"`
	// Overloaded says the resource law's overload was on.
	Overloaded bool `json:"overloaded"`
	// ClassP are the class probabilities in force, by olc.Class.
	ClassP [olc.NumClasses]float64 `json:"class_p"`
	// Ports are the configured ports' states.
	Ports []PortState `json:"ports"`
}

// PortState is one port's part of State.
type PortState struct {
	Key olc.PortKey `json:"port"`
	// DropProbability is the port's p from the law on its queue (0..1).
	DropProbability float64 `json:"drop_probability"`
	// QueueOverload says the law on the port's queue was in an overload.
	QueueOverload bool `json:"queue_overload"`
	// Target is the response target in force, seconds (0: none).
	Target float64 `json:"target_s"`
	// Baseline is the learnt no-load p95, seconds (0: not learnt).
	Baseline float64 `json:"baseline_s"`
	// Capacity is μ̂, the answers per second measured while saturated (0:
	// not measured), and CapacityAge the seconds since its newest
	// saturated tick at export.
	Capacity    float64 `json:"capacity_rps"`
	CapacityAge float64 `json:"capacity_age_s"`
	// Demand is the smoothed unique new connections per second.
	Demand float64 `json:"demand_per_s"`
}

// Export returns the controller's State.
func (c *Controller) Export() State {
	s := State{DropProbability: c.p, Overloaded: c.overloaded, ClassP: c.classP}
	for _, ps := range c.ports {
		l := &ps.loop
		st := PortState{Key: ps.cfg.Key, DropProbability: l.p(), QueueOverload: l.active, Target: l.target, Demand: ps.demand}
		if l.base.ok {
			st.Baseline = l.base.value
		}
		if l.cap.ok {
			st.Capacity, st.CapacityAge = l.cap.lastReq, l.cap.age
		}
		s.Ports = append(s.Ports, st)
	}
	return s
}

// Restore puts back a State exported by another controller of the same
// config, at time at (the overloads restored count from then). Ports of s
// that are not configured are ignored; configured ports missing from s
// keep their fresh state. Probabilities are clamped to 0..Params.Bound.
func (c *Controller) Restore(s State, age time.Duration, at time.Time) {
	bound := c.cfg.Params.Bound()
	clamp := func(p float64) float64 { return min(max(p, 0), bound) }
	c.p = clamp(s.DropProbability)
	c.overloaded = s.Overloaded && c.p > 0
	if c.overloaded {
		c.since, c.merged, c.mergedSince = at, true, at
	}
	for i, p := range s.ClassP {
		c.classP[i] = clamp(p)
	}
	for _, st := range s.Ports {
		i, ok := c.index[st.Key]
		if !ok {
			continue
		}
		ps := &c.ports[i]
		l := &ps.loop
		l.pass = 1 - clamp(st.DropProbability)
		l.active = st.QueueOverload && l.pass < 1
		l.target = st.Target
		if st.Baseline > 0 {
			l.base.value, l.base.ok = st.Baseline, true
		}
		if st.Capacity > 0 {
			l.cap.lastReq, l.cap.age, l.cap.ok = st.Capacity, st.CapacityAge+age.Seconds(), true
		}
		ps.demand = st.Demand
		ps.p = clamp(max(st.DropProbability, c.classP[ps.cfg.Class]))
		ps.recorded = ps.p
	}
	c.recordedNode = c.p
}
