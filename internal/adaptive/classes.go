package adaptive

import (
	"fmt"
	"math"
	"strings"

	"github.com/olcd/olcd/internal/olc"
)

// Demand, gain scheduling and the class split (docs/controller.md §4).

// minPassScale floors the pass rate used for gain scheduling so that p can
// leave 1 when MinPassRate is 0 (a pass rate of 0 would make every step 0).
const minPassScale = 0.02

// measure updates the ports' smoothed demand and attempts from stats and
// the class weights the law and the split use.
func (c *Controller) measure(s *olc.Snapshot, stats map[olc.PortKey]PortStats) {
	prm := &c.cfg.Params
	dt := s.Interval.Seconds()
	if dt <= 0 {
		dt = c.cfg.Interval.Seconds()
	}
	c.dt = dt
	var demand, attempts, count [olc.NumClasses]float64
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
		c.weights = [olc.NumClasses]float64{1, 1, 1}
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
	for _, cl := range [...]olc.Class{olc.ClassBestEffort, olc.ClassNormal, olc.ClassCritical} {
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
			ResponseTarget: ps.loop.target, QueueP: ps.loop.p(), ShedRetransmits: ps.loop.shedRetransmits()}
		if mu := ps.loop.cap.mu(); mu > 0 {
			d.Ports[i].Capacity, d.Ports[i].ConnCapacity, d.Ports[i].CapacityAge = mu, ps.loop.cap.lastConn, ps.loop.cap.age
		}
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
func splitClasses(p, bound float64, weights [olc.NumClasses]float64) [olc.NumClasses]float64 {
	var out [olc.NumClasses]float64
	var total float64
	for _, w := range weights {
		total += w
	}
	if p <= 0 || total <= 0 {
		return out
	}
	remaining := p * total
	for _, cl := range [...]olc.Class{olc.ClassBestEffort, olc.ClassNormal, olc.ClassCritical} {
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
func ClassSummary(classes [olc.NumClasses]float64) string {
	var b strings.Builder
	for cl := olc.Class(0); cl < olc.NumClasses; cl++ {
		if cl > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%.3f", cl, classes[cl])
	}
	return b.String()
}
