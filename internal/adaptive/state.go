package adaptive

import (
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// State is what a restart of the daemon keeps of the controller: the drop
// probabilities in force and what each port's law learnt (internal/statefile
// writes it between restarts). Export fills it; Restore puts it back.
type State struct {
	// DropProbability is the node's resource law's p (0..1), Overloaded
	// whether it was shedding, ClassP its class split (by olc.Class).
	DropProbability float64                 `json:"drop_probability"`
	Overloaded      bool                    `json:"overloaded"`
	ClassP          [olc.NumClasses]float64 `json:"class_p"`
	// Ports are the configured ports' states.
	Ports []PortState `json:"ports"`
}

// PortState is one port's part of State.
type PortState struct {
	Key olc.PortKey `json:"port"`
	// DropProbability is the p of the port's own law (0..1), QueueOverload
	// whether it was shedding, Target the target in force (seconds; 0:
	// none) and Baseline the learnt no-load p95 (seconds; 0: not learnt).
	DropProbability float64 `json:"drop_probability"`
	QueueOverload   bool    `json:"queue_overload"`
	Target          float64 `json:"target_s"`
	Baseline        float64 `json:"baseline_s"`
	// Retransmits is what DropProbability applies to
	// (PortDecision.Retransmits); absent in a state of an earlier build,
	// which ranked none apart: as-first.
	Retransmits olc.Retransmits `json:"retransmits,omitzero"`
	// Capacity is μ̂, the answers per second measured while saturated (0:
	// not measured), CapacityAge the seconds since its newest saturated
	// tick at export, and PerStart the answers per admitted start.
	Capacity    float64 `json:"capacity_rps"`
	CapacityAge float64 `json:"capacity_age_s"`
	PerStart    float64 `json:"answers_per_start"`
	// Demand is the first attempts per second of the last tick (starts less SYN retransmits).
	Demand float64 `json:"demand_per_s"`
	// InFlightCeiling is the law's ceiling on requests in flight
	// (PortDecision.InFlightCeiling; 0: none, as in a state of an earlier
	// build): a restart in an overload keeps it.
	InFlightCeiling int `json:"in_flight_ceiling,omitzero"`
	// CeilingShare is the share of N* the ceiling holds to keep the p95 at
	// the target (0 < x ≤ 1; 0 without a ceiling, or in a state of an
	// earlier build: 1).
	CeilingShare float64 `json:"ceiling_share,omitzero"`
	// OnsetRate is the starts per second when the ceiling started (0: none),
	// against which a closed loop's fall is read (docs/controller.md §1).
	OnsetRate float64 `json:"onset_rate_per_s,omitzero"`
}

// Export returns the controller's State.
func (c *Controller) Export() State {
	s := State{DropProbability: 1 - c.node.pass, Overloaded: c.node.on, ClassP: c.classP}
	for i := range c.ports {
		ps := &c.ports[i]
		st := PortState{Key: ps.cfg.Key, DropProbability: 1 - ps.pass, QueueOverload: ps.active(), Target: ps.target,
			Demand: ps.demand, PerStart: ps.cap.perStart(), Retransmits: ps.retransmits(), InFlightCeiling: ps.ceil}
		if ps.ceil > 0 {
			st.CeilingShare, st.OnsetRate = ps.scale, ps.onsetRate
		}
		if ps.base.ok {
			st.Baseline = ps.base.value
		}
		if ps.cap.lastSat > 0 {
			st.Capacity, st.CapacityAge = ps.cap.lastSat, ps.cap.satAge
		}
		s.Ports = append(s.Ports, st)
	}
	return s
}

// Restore puts back a State exported age ago by a controller of the same
// config, at time at. Ports of s that are not configured are ignored;
// configured ports missing from s keep their fresh state. A capacity
// younger than the capacity window (with its answers per start) seeds the
// window as one saturated tick; an older one is only reported.
// Probabilities are clamped to 0..Params.Bound, a port's under retransmits
// last to 0..1 (every first attempt passes), an unknown rule read as
// as-first.
func (c *Controller) Restore(s State, age time.Duration, at time.Time) {
	prm := c.cfg.Params
	clamp := func(p float64) float64 { return min(max(p, 0), prm.Bound()) }
	c.node.pass, c.node.on = 1, s.Overloaded && s.DropProbability > 0
	if c.node.on {
		c.node.pass = 1 - clamp(s.DropProbability)
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
		ps.retx = st.Retransmits
		if !ps.retx.Valid() {
			ps.retx = olc.RetransmitsAsFirst
		}
		ps.pass, ps.target, ps.demand = 1-clamp(st.DropProbability), st.Target, st.Demand
		if ps.retx == olc.RetransmitsLast {
			ps.pass = 1 - min(max(st.DropProbability, 0), 1)
		}
		if ps.scale = st.CeilingShare; !(ps.scale > 0 && ps.scale <= 1) {
			ps.scale = 1
		}
		if ps.ceil, ps.onsetRate = max(st.InFlightCeiling, 0), max(st.OnsetRate, 0); !st.QueueOverload {
			ps.pass, ps.ceil = 1, 0
		}
		ps.base.value, ps.base.ok = max(st.Baseline, 0), st.Baseline > 0
		ps.cap.lastSat, ps.cap.satAge = max(st.Capacity, 0), st.CapacityAge+age.Seconds()
		if st.PerStart > 0 {
			// One slot carries the answers per start, and a fresh capacity as a saturated tick.
			slot := capSlot{answers: st.PerStart, admitted: 1}
			if st.Capacity > 0 && ps.cap.satAge < prm.CapacityWindow.Seconds() {
				slot.rate, slot.saturated = st.Capacity, true
			}
			ps.cap.slots = []capSlot{slot}
		}
		ps.recorded = 1 - ps.pass
	}
	c.nodeRec = 1 - c.node.pass
	if c.over.on = c.node.on || c.portsActive(); c.over.on {
		c.over.since, c.over.lastEvent = at, at
	}
}
