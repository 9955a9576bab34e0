package loader

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// maxCeilingCPUs is the most CPUs whose counts a ceiling sums per arrival
// (bpf/olcd.h, OLCD_CEIL_MAX_CPUS): on a larger node no ceiling is enforced.
const maxCeilingCPUs = 1024

// SetInFlightCeilings sets the adaptive law's ceiling on each port's requests
// in flight (requests; 0: none), which the datapath compares per arrival
// with the requests its response timer counts in flight (bpf/fair.h,
// olcd_inflight): a new connection (the request gate's request starts
// meet no ceiling) that finds the port at its ceiling is shed with the
// port's action, but for a share floor (0..1, the law's min_pass_rate) of
// them, and counted as the law's shed (Counters.Ceiled). Beside it the static cap
// (PortCaps.InFlight) refuses new connections at its own ceiling, counted
// capped. With one flow timed in N (Config.ResponseSample) the count is of
// the sampled flows, and the law's ceiling is divided by N; a port that is
// not timed (Timed) has none. Ports not in m keep theirs; a port that is
// removed loses it. A per-tick call: only the entries that change are
// written.
//
// Errors: a port without a policy, a negative ceiling, a floor outside
// 0..1, a closed datapath, a failed map write. Nothing is changed when
// validation fails.
func (d *Datapath) SetInFlightCeilings(m map[olc.PortKey]int, floor float64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("set in-flight ceilings: %w", err)
	}
	var errs []error
	if !(floor >= 0 && floor <= 1) {
		errs = append(errs, fmt.Errorf("floor %v is outside 0..1", floor))
	}
	for k, n := range m {
		if _, ok := d.policies[k]; !ok {
			errs = append(errs, fmt.Errorf("port %s has no policy", k))
		}
		if n < 0 {
			errs = append(errs, fmt.Errorf("port %s: in-flight ceiling %d is negative", k, n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("set in-flight ceilings: %w", err)
	}
	d.fair.floor = ProbabilityToFixed(floor)
	for k, n := range m {
		if n == 0 {
			delete(d.fair.law, k)
		} else {
			d.fair.law[k] = uint32(min(n, 1<<30))
		}
	}
	if err := d.writeCeilings(slices.Collect(maps.Keys(m))); err != nil {
		return fmt.Errorf("set in-flight ceilings: %w", err)
	}
	return nil
}

// InFlightCeiling returns the ceilings on k's requests in flight the
// datapath enforces: the static cap's and the law's, in the response
// timer's count (0: none).
func (d *Datapath) InFlightCeiling(k olc.PortKey) (static, law int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.fair.ceil[k]
	return int(c.Cap), int(c.Law)
}

// ceilingOf is the entry k's policy and the law ask for (zero: none, or a
// port whose requests nothing counts).
func (d *Datapath) ceilingOf(k olc.PortKey) (olcdOlcdCeiling, error) {
	rs, timed := d.rslots[k]
	pol, ok := d.policies[k]
	if !timed || !ok || d.cfg.ResponseSample == 0 {
		return olcdOlcdCeiling{}, nil
	}
	c := olcdOlcdCeiling{HistSlot: rs, Floor: d.fair.floor}
	if d.cfg.ResponseSample == 1 { // the static cap needs every flow (rules.Config's check)
		c.Cap = uint32(max(pol.Caps.InFlight, 0))
	}
	if n := d.fair.law[k]; n > 0 {
		c.Law = uint32(max(1, math.Ceil(float64(n)/float64(d.cfg.ResponseSample))))
	}
	if c.Cap == 0 && c.Law == 0 {
		return olcdOlcdCeiling{}, nil
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return olcdOlcdCeiling{}, fmt.Errorf("ceiling of port %s: %w", k, err)
	}
	if cpus > maxCeilingCPUs {
		if !d.fair.tooManyCPUs {
			d.fair.tooManyCPUs = true
			d.log.Warn("no ceiling on requests in flight: the datapath sums them over at most this many CPUs",
				"max", maxCeilingCPUs, "possible_cpus", cpus)
		}
		return olcdOlcdCeiling{}, nil
	}
	c.Cpus = uint16(cpus)
	return c, nil
}

// writeCeilings writes the ceilings of each port of keys that changed, and
// the policy of those that gained or lost one (its OLCD_CAP_INFLIGHT bit).
// The shadow moves only once both are written.
func (d *Datapath) writeCeilings(keys []olc.PortKey) error {
	for _, k := range keys {
		slot, ok := d.slots[k]
		if !ok {
			continue
		}
		c, err := d.ceilingOf(k)
		if err != nil {
			return err
		}
		old := d.fair.ceil[k]
		if c == old {
			continue
		}
		if err := d.objs.OlcdCeil.Update(uint32(slot), &c, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write in-flight ceiling of port %s: %w", k, err)
		}
		d.fair.ceil[k] = c
		if c == (olcdOlcdCeiling{}) {
			delete(d.fair.ceil, k)
		}
		if hasCeiling(c) == hasCeiling(old) {
			continue
		}
		if err := d.trackCapped(k, slot); err != nil {
			return err
		}
		if err := d.writePolicy(k); err != nil {
			d.fair.ceil[k] = old // written again by the next call
			return err
		}
	}
	return nil
}

// hasCeiling reports whether an entry holds a ceiling.
func hasCeiling(c olcdOlcdCeiling) bool { return c.Cap > 0 || c.Law > 0 }
