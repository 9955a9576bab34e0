package loader

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// maxCeilingCPUs is the most CPUs whose counts a ceiling sums per arrival
// (bpf/olcd.h): on a larger node no ceiling is enforced.
const maxCeilingCPUs = 1024

// SetInFlightCeilings sets the adaptive law's ceiling on each port's requests
// in flight (requests; 0: none), which the datapath compares per arrival
// with the requests its response timer counts in flight (bpf/fair.h,
// olcd_inflight): new work that finds the port at its ceiling is shed with
// the port's action, counted as the law's shed (a static cap's refusals are
// counted capped). The ceiling in force is the lower of this and the static
// cap (PortCaps.InFlight); a port that is not timed
// (Timed) has none. Ports not in m keep theirs; a port that is removed loses
// it. A per-tick call: only the entries that change are written.
//
// Errors: a port without a policy, a negative ceiling, a closed datapath, a
// failed map write. Nothing is changed when validation fails.
func (d *Datapath) SetInFlightCeilings(m map[olc.PortKey]int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("set in-flight ceilings: %w", err)
	}
	var errs []error
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

// InFlightCeiling returns the ceiling on k's requests in flight the datapath
// enforces (0: none).
func (d *Datapath) InFlightCeiling(k olc.PortKey) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return int(d.fair.ceil[k].Max)
}

// ceilingOf is the ceiling k's policy and the law ask for: the lower of the
// two that are set, 0 for none or for a port whose requests nothing counts.
func (d *Datapath) ceilingOf(k olc.PortKey) (olcdOlcdCeiling, error) {
	rs, timed := d.rslots[k]
	pol, ok := d.policies[k]
	if !timed || !ok || d.cfg.ResponseSample != 1 {
		return olcdOlcdCeiling{}, nil
	}
	n, law := d.fair.law[k], uint32(1)
	if s := uint32(max(pol.Caps.InFlight, 0)); s > 0 && (n == 0 || s <= n) {
		n, law = s, 0
	}
	if n == 0 {
		return olcdOlcdCeiling{}, nil
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return olcdOlcdCeiling{}, fmt.Errorf("ceiling of port %s: %w", k, err)
	}
	if cpus > maxCeilingCPUs {
		return olcdOlcdCeiling{}, nil
	}
	return olcdOlcdCeiling{Max: n, HistSlot: rs, Cpus: uint16(cpus), Law: law}, nil
}

// writeCeilings writes the ceiling of each port of keys that changed, and
// the policy of those that gained or lost one (its OLCD_CAP_INFLIGHT bit).
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
		if c.Max == 0 {
			delete(d.fair.ceil, k)
		} else {
			d.fair.ceil[k] = c
		}
		if (c.Max == 0) != (old.Max == 0) {
			if err := d.trackCapped(k, slot); err != nil {
				return err
			}
			if err := d.writePolicy(k); err != nil {
				return err
			}
		}
	}
	return nil
}
