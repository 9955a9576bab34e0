package loader

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// Exception ports without a policy of their own (a health-check port, SSH)
// get a stats slot each while free slots remain, so that their new
// connections are counted per port (Stats.ExemptPorts): an operator can see
// that a balancer's health checks reach the exempt port and pass. Their
// policy entry is the shared exception entry's copy (exempt, not protected)
// with its own stats slot; the datapath reads the slot from the entry, so
// nothing changes in bpf/. Protected ports come first: when SetPolicies
// needs slots the exception ports hold, those ports go back to the shared
// entry, counted in "other" as before.

// exemptSlotList appends the exception ports' slots to s.
func (d *Datapath) exemptSlotList(s []uint16) []uint16 {
	for _, v := range d.eslots {
		s = append(s, v)
	}
	return s
}

// releaseExemptSlots takes up to n slots (all with n < 0) from exception
// ports, which go back to the shared entry (dropExemptSlots). The ports are
// taken in key order, so that which ones keep a slot is stable.
func (d *Datapath) releaseExemptSlots(n int) error {
	if n == 0 || len(d.eslots) == 0 {
		return nil
	}
	keys := keysInOrder(d.eslots)
	if n > 0 && n < len(keys) {
		keys = keys[len(keys)-n:]
	}
	return d.dropExemptSlots(keys)
}

// dropExemptSlots sends the exception ports keys back to the shared entry:
// the index first, so that no packet reaches a slot that changes owner,
// then each slot is forgotten, freed and its policy entry cleared.
func (d *Datapath) dropExemptSlots(keys []olc.PortKey) error {
	slots := make([]uint16, 0, len(keys))
	for _, k := range keys {
		slots = append(slots, d.eslots[k])
		delete(d.eslots, k)
	}
	if err := d.writeIndex(); err != nil {
		return err
	}
	for _, slot := range slots {
		d.stats.forget(slot)
		d.free = append(d.free, slot)
		if err := d.objs.OlcdPolicies.Update(uint32(slot), &olcdOlcdPolicy{}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("clear exception port slot %d: %w", slot, err)
		}
	}
	return nil
}

// syncExemptSlots gives every exception port without a policy a slot while
// free slots remain, and frees the slots of ports that are no longer
// exception ports or now have a policy. Counters were folded by the caller.
func (d *Datapath) syncExemptSlots() error {
	var gone []olc.PortKey
	for k := range d.eslots {
		if _, protected := d.policies[k]; protected || !d.exempt[k] {
			gone = append(gone, k)
		}
	}
	if len(gone) > 0 {
		if err := d.dropExemptSlots(gone); err != nil {
			return err
		}
	}
	added := false
	for _, k := range keysInOrder(d.exempt) {
		if _, protected := d.policies[k]; protected || len(d.free) == 0 {
			continue
		}
		if _, ok := d.eslots[k]; ok {
			continue
		}
		slot := d.free[len(d.free)-1]
		d.free = d.free[:len(d.free)-1]
		if err := d.stats.reset(slot); err != nil {
			return fmt.Errorf("exception port %s: %w", k, err)
		}
		// The entry before the index points at it.
		v := olcdOlcdPolicy{Flags: uint8(olcdOlcdPolicyFlagOLCD_POLICY_EXEMPT), StatsSlot: slot}
		if err := d.objs.OlcdPolicies.Update(uint32(slot), &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write exception port %s: %w", k, err)
		}
		d.eslots[k] = slot
		added = true
	}
	if added {
		return d.writeIndex()
	}
	return nil
}

// keysInOrder returns m's keys in (proto, port) order.
func keysInOrder[V any](m map[olc.PortKey]V) []olc.PortKey {
	keys := make([]olc.PortKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b olc.PortKey) int {
		if a.Proto != b.Proto {
			return int(a.Proto) - int(b.Proto)
		}
		return int(a.Port) - int(b.Port)
	})
	return keys
}
