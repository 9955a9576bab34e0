package loader

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
)

// ProbabilityToFixed converts a drop probability (fraction 0..1) to the
// datapath's 32-bit fixed point, which drops when a uniform 32-bit draw is
// below the value and always at 2^32−1 (the draw: docs/datapath.md).
//
// The endpoints are exact: p <= 0 (and NaN) gives 0, never dropping; p >= 1
// gives 2^32−1, always dropping. In between the result is round(p·2^32)
// clamped to 1..2^32−2, so a p strictly between 0 and 1 drops a fraction
// within 2^−31 of p and never turns into "never" or "always".
func ProbabilityToFixed(p float64) uint32 {
	switch {
	case !(p > 0): // also NaN
		return 0
	case p >= 1:
		return math.MaxUint32
	}
	v := math.Round(p * (1 << 32))
	if v < 1 {
		return 1
	}
	if v > math.MaxUint32-1 {
		return math.MaxUint32 - 1
	}
	return uint32(v)
}

// FixedToProbability is the inverse of ProbabilityToFixed: the fraction 0..1
// of draws that a fixed-point value drops (2^32−1 is exactly 1).
func FixedToProbability(v uint32) float64 {
	if v == math.MaxUint32 {
		return 1
	}
	return float64(v) / (1 << 32)
}

func checkProbability(k olc.PortKey, p float64) error {
	if math.IsNaN(p) || p < 0 || p > 1 {
		return fmt.Errorf("port %s: drop probability %v is outside 0..1", k, p)
	}
	return nil
}

// SetPolicies replaces the whole set of port policies. Ports keep their
// stats slot (and counters) across calls; a port that is new gets a free
// slot with zeroed counters; a port that is gone frees its slot.
//
// Errors: a protocol other than tcp/udp, a duplicate port, an unknown mode,
// action or class, a probability outside 0..1, more ports than
// Config.MaxPorts, a closed datapath, or a failed map write. Nothing is
// changed when validation fails.
func (d *Datapath) SetPolicies(policies []PortPolicy) error {
	var errs []error
	seen := make(map[olc.PortKey]bool, len(policies))
	for _, p := range policies {
		if err := checkKey(p.Key); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[p.Key] {
			errs = append(errs, fmt.Errorf("port %s: listed twice", p.Key))
		}
		seen[p.Key] = true
		if !p.Mode.Valid() {
			errs = append(errs, fmt.Errorf("port %s: unknown mode %d", p.Key, p.Mode))
		}
		if !p.Action.Valid() {
			errs = append(errs, fmt.Errorf("port %s: unknown action %d", p.Key, p.Action))
		}
		if !p.Class.Valid() {
			errs = append(errs, fmt.Errorf("port %s: unknown class %d", p.Key, p.Class))
		}
		errs = append(errs, checkProbability(p.Key, p.DropProbability), checkCaps(p.Key, p))
	}
	if len(policies) > d.cfg.MaxPorts {
		errs = append(errs, fmt.Errorf("%d ports exceed max ports %d", len(policies), d.cfg.MaxPorts))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("set policies: %w", err)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("set policies: %w", err)
	}
	// Fold before slots change hands, so a freed slot's counts are not
	// mistaken for the next owner's.
	if err := d.stats.fold(d.slotList()); err != nil {
		return fmt.Errorf("set policies: %w", err)
	}
	if d.cfg.ResponseSample != 0 {
		if err := d.resp.fold(d.respSlotList()); err != nil {
			return fmt.Errorf("set policies: %w", err)
		}
	}

	next := make(map[olc.PortKey]PortPolicy, len(policies))
	for _, p := range policies {
		next[p.Key] = p
	}
	// Ports that are gone first leave the index, then free their slots,
	// so that a packet never reaches a slot that changes owner under it.
	var gone []olc.PortKey
	for k := range d.policies {
		if _, ok := next[k]; !ok {
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		delete(d.policies, k)
	}
	if err := d.writeIndex(); err != nil {
		return fmt.Errorf("set policies: %w", err)
	}
	for _, k := range gone {
		slot := d.slots[k]
		delete(d.slots, k)
		d.stats.forget(slot)
		d.free = append(d.free, slot)
		if err := d.forgetCaps(k, slot); err != nil {
			return fmt.Errorf("set policies: %w", err)
		}
		if err := d.objs.OlcdPolicies.Update(uint32(slot), &olcdOlcdPolicy{}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("set policies: clear port %s: %w", k, err)
		}
	}
	// Protected ports come first: take back the slots exception ports
	// hold when the new ports need them.
	need := 0
	for _, p := range policies {
		if _, ok := d.slots[p.Key]; !ok {
			need++
		}
	}
	if short := need - len(d.free); short > 0 {
		if err := d.releaseExemptSlots(short); err != nil {
			return fmt.Errorf("set policies: %w", err)
		}
	}
	// New ports get their policy and zeroed counters before the index
	// points at them.
	for _, p := range policies {
		slot, ok := d.slots[p.Key]
		fresh := !ok
		if !ok {
			slot = d.free[len(d.free)-1]
			d.free = d.free[:len(d.free)-1]
			d.slots[p.Key] = slot
			if err := d.stats.reset(slot); err != nil {
				return fmt.Errorf("set policies: port %s: %w", p.Key, err)
			}

		}
		d.policies[p.Key] = p
		if err := d.writeCaps(p.Key, slot, fresh); err != nil {
			return fmt.Errorf("set policies: %w", err)
		}
		if err := d.writePolicy(p.Key); err != nil {
			return fmt.Errorf("set policies: %w", err)
		}
	}
	if err := d.writeIndex(); err != nil {
		return fmt.Errorf("set policies: %w", err)
	}
	// After the index: a new port's histogram slot is given there.
	if err := d.writeCeilings(sortedKeys(d.policies)); err != nil {
		return fmt.Errorf("set policies: %w", err)
	}
	if err := d.syncExemptSlots(); err != nil {
		return fmt.Errorf("set policies: %w", err)
	}
	return nil
}

// SetDropProbabilities sets the drop probability (fraction 0..1) of ports
// that have a policy; ports not in m keep theirs. It is the per-tick call and
// writes only the policy entries of the ports in m whose probability, in the
// datapath's fixed point, changed.
//
// Errors: a port without a policy, a probability outside 0..1 or NaN, a
// closed datapath, or a failed map write. Nothing is changed when validation
// fails.
func (d *Datapath) SetDropProbabilities(m map[olc.PortKey]float64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("set drop probabilities: %w", err)
	}
	var errs []error
	for k, p := range m {
		if _, ok := d.policies[k]; !ok {
			errs = append(errs, fmt.Errorf("port %s has no policy", k))
		}
		errs = append(errs, checkProbability(k, p))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("set drop probabilities: %w", err)
	}
	for k, p := range m {
		pol := d.policies[k]
		// Most ticks change nothing (p stays 0 outside an overload): a
		// write per port per tick would be 100 syscalls for nothing.
		if ProbabilityToFixed(pol.DropProbability) == ProbabilityToFixed(p) {
			continue
		}
		pol.DropProbability = p
		d.policies[k] = pol
		if err := d.writePolicy(k); err != nil {
			return fmt.Errorf("set drop probabilities: %w", err)
		}
	}
	return nil
}

// SetRetransmits sets what each port in m applies its drop probability to,
// as its retransmitted SYNs are told from first attempts
// (PortPolicy.Retransmits); ports not in m keep theirs. Like
// SetDropProbabilities it is a per-tick call and writes only the entries
// that change.
//
// Errors: a port without a policy, an invalid rule, a closed datapath, or a
// failed map write. Nothing is changed when validation fails.
func (d *Datapath) SetRetransmits(m map[olc.PortKey]olc.Retransmits) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("set retransmits: %w", err)
	}
	var errs []error
	for k, r := range m {
		if _, ok := d.policies[k]; !ok {
			errs = append(errs, fmt.Errorf("port %s has no policy", k))
		}
		if !r.Valid() {
			errs = append(errs, fmt.Errorf("port %s: invalid retransmit rule %d", k, uint8(r)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("set retransmits: %w", err)
	}
	for k, r := range m {
		pol := d.policies[k]
		if pol.Retransmits == r {
			continue
		}
		pol.Retransmits = r
		d.policies[k] = pol
		if err := d.writePolicy(k); err != nil {
			return fmt.Errorf("set retransmits: %w", err)
		}
	}
	return nil
}

// SetExceptions replaces the exception ports and source prefixes. New
// connections to an exception port or from an exception prefix always pass
// and are counted as exempt (in the port's slot, or "other" for a TCP port
// without a policy). A prefix is masked to its length; IPv4 prefixes match
// IPv4 packets and IPv6 prefixes IPv6 packets.
//
// Errors: a protocol other than tcp/udp, an invalid prefix, more prefixes of
// one family than Config.MaxPrefixes, a closed datapath, or a failed map
// write. Nothing is changed when validation fails.
func (d *Datapath) SetExceptions(ports []olc.PortKey, sources []netip.Prefix) error {
	var errs []error
	exempt := make(map[olc.PortKey]bool, len(ports))
	for _, k := range ports {
		if err := checkKey(k); err != nil {
			errs = append(errs, err)
		}
		exempt[k] = true
	}
	prefixes := make(map[netip.Prefix]bool, len(sources))
	var n4, n6 int
	for _, p := range sources {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("source prefix %q is invalid", p))
			continue
		}
		p = p.Masked()
		if prefixes[p] {
			continue
		}
		prefixes[p] = true
		if p.Addr().Is4() {
			n4++
		} else {
			n6++
		}
	}
	if n4 > d.cfg.MaxPrefixes || n6 > d.cfg.MaxPrefixes {
		errs = append(errs, fmt.Errorf("%d IPv4 and %d IPv6 prefixes exceed max prefixes %d per family",
			n4, n6, d.cfg.MaxPrefixes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("set exceptions: %w", err)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("set exceptions: %w", err)
	}
	changed := make(map[olc.PortKey]bool)
	for k := range d.exempt {
		changed[k] = true
	}
	for k := range exempt {
		changed[k] = !changed[k] // ports in both sets do not change
	}
	// Fold before exception ports' slots change hands.
	if err := d.stats.fold(d.slotList()); err != nil {
		return fmt.Errorf("set exceptions: %w", err)
	}
	d.exempt = exempt
	for k, c := range changed {
		if _, ok := d.policies[k]; ok && c {
			if err := d.writePolicy(k); err != nil {
				return fmt.Errorf("set exceptions: %w", err)
			}
		}
	}
	if err := d.writeIndex(); err != nil {
		return fmt.Errorf("set exceptions: %w", err)
	}
	if err := d.syncExemptSlots(); err != nil {
		return fmt.Errorf("set exceptions: %w", err)
	}

	// Tries: add first, publish the counts, then delete, so that a prefix
	// in both the old and new set is never missing.
	for p := range prefixes {
		if !d.prefixes[p] {
			if err := d.updatePrefix(p, false); err != nil {
				return fmt.Errorf("set exceptions: %w", err)
			}
		}
	}
	d.ctl.Prefixes4, d.ctl.Prefixes6 = uint32(n4), uint32(n6)
	if err := d.writeControl(); err != nil {
		return fmt.Errorf("set exceptions: %w", err)
	}
	for p := range d.prefixes {
		if !prefixes[p] {
			if err := d.updatePrefix(p, true); err != nil {
				return fmt.Errorf("set exceptions: %w", err)
			}
		}
	}
	d.prefixes = prefixes
	return nil
}

func (d *Datapath) updatePrefix(p netip.Prefix, remove bool) error {
	var (
		m   *ebpf.Map
		key any
	)
	if p.Addr().Is4() {
		k := olcdOlcdLpm4Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As4()}
		m, key = d.objs.OlcdExempt4, &k
	} else {
		k := olcdOlcdLpm6Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}
		m, key = d.objs.OlcdExempt6, &k
	}
	if remove {
		if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove source prefix %s: %w", p, err)
		}
		return nil
	}
	if err := m.Update(key, uint8(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("add source prefix %s: %w", p, err)
	}
	return nil
}

// SetMode sets the global mode, which caps every port's mode.
// Errors: an unknown mode, a closed datapath, or a failed map write.
func (d *Datapath) SetMode(m olc.Mode) error {
	if !m.Valid() {
		return fmt.Errorf("set mode: unknown mode %d", m)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("set mode: %w", err)
	}
	for k, p := range d.policies {
		if err := d.stats.setKind(d.slots[k], policyKind(cMode(m), cMode(p.Mode), p.Action, k.Proto)); err != nil {
			return fmt.Errorf("set mode: %w", err)
		}
	}
	d.ctl.Mode = cMode(m)
	if err := d.writeControl(); err != nil {
		return fmt.Errorf("set mode: %w", err)
	}
	return nil
}

// Heartbeat writes the current CLOCK_MONOTONIC time (ns, the clock of
// bpf_ktime_get_ns) into the control record. The daemon calls it every tick;
// when the last heartbeat is older than Config.StaleAfter the datapath fails
// open. Errors: reading the clock, a closed datapath, or a failed map write.
func (d *Datapath) Heartbeat() error {
	now, err := monotonicNow()
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return d.setHeartbeat(now)
}

func (d *Datapath) setHeartbeat(ns uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	d.ctl.HeartbeatNs = ns
	if err := d.writeControl(); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// monotonicNow returns CLOCK_MONOTONIC as bpf_ktime_get_ns reads it: the
// host's. In a time namespace (time_namespaces(7): containers, CRIU
// restores) the process's clock is shifted by an offset the BPF clock does
// not have; left in, a heartbeat ahead of the host's clock would keep the
// datapath "fresh" after the daemon died, one behind it stale forever.
func monotonicNow() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("read CLOCK_MONOTONIC: %w", err)
	}
	off, err := timensOffset()
	if err != nil {
		return 0, err
	}
	return uint64(ts.Nano() - off), nil
}

// timensOffset is the CLOCK_MONOTONIC offset of this process's time
// namespace in ns (0 without time namespaces). A process cannot change its
// time namespace once it runs threads, so it is read once. It is the loader's
// one /proc read: the kernel shows a time namespace's offsets nowhere else.
var timensOffset = sync.OnceValues(func() (int64, error) {
	data, err := os.ReadFile("/proc/self/timens_offsets")
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil // kernel without CONFIG_TIME_NS
	}
	if err != nil {
		return 0, fmt.Errorf("read time namespace offsets: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || (f[0] != "monotonic" && f[0] != "1") { // name, or CLOCK_MONOTONIC's id
			continue
		}
		sec, err1 := strconv.ParseInt(f[1], 10, 64)
		nsec, err2 := strconv.ParseInt(f[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, fmt.Errorf("parse time namespace offsets %q: %w", line, err)
		}
		return sec*1e9 + nsec, nil
	}
	return 0, nil
})

// writePolicy writes the policy entry of a port that has a slot.
func (d *Datapath) writePolicy(k olc.PortKey) error {
	p := d.policies[k]
	slot := d.slots[k]
	flags := uint8(olcdOlcdPolicyFlagOLCD_POLICY_PROTECTED)
	if d.exempt[k] {
		flags |= uint8(olcdOlcdPolicyFlagOLCD_POLICY_EXEMPT)
	}
	v := olcdOlcdPolicy{
		DropProb:        ProbabilityToFixed(p.DropProbability),
		StatsSlot:       slot,
		Flags:           flags,
		ShedRetransmits: uint8(p.Retransmits),
		RequestGate:     b2u8(p.RequestGate && k.Proto == olc.ProtoTCP),
		Mode:            cMode(p.Mode),
		Action:          cAction(p.Action),
		Class:           cClass(p.Class),
	}
	fairFields(p, d.fair.srcCaps[k], hasCeiling(d.fair.ceil[k]), &v)
	if err := d.stats.setKind(slot, policyKind(d.ctl.Mode, v.Mode, p.Action, k.Proto)); err != nil {
		return fmt.Errorf("write policy of port %s: %w", k, err)
	}
	if err := d.objs.OlcdPolicies.Update(uint32(slot), &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write policy of port %s: %w", k, err)
	}
	return nil
}

// writeIndex rebuilds the port index from the policies and exceptions and
// writes it whole (256 KiB; only when the port set changes).
func (d *Datapath) writeIndex() error {
	next := new(olcdOlcdPortIndex)
	for k := range d.exempt {
		idx := uint16(d.exemptIndex())
		if s, ok := d.eslots[k]; ok {
			idx = s
		}
		next.Idx[protoIndex(k.Proto)][k.Port] = idx
	}
	for k := range d.policies {
		next.Idx[protoIndex(k.Proto)][k.Port] = d.slots[k]
	}
	if *next != *d.index {
		if err := d.objs.OlcdPorts.Set(next); err != nil {
			return fmt.Errorf("write port index: %w", err)
		}
		d.index = next
	}
	return d.writeRespPorts()
}

func protoIndex(p olc.Proto) int {
	if p == olc.ProtoUDP {
		return int(olcdOlcdGeometryOLCD_INDEX_UDP)
	}
	return int(olcdOlcdGeometryOLCD_INDEX_TCP)
}

// slotList returns the stats slots in use, "other" first.
func (d *Datapath) slotList() []uint16 {
	s := make([]uint16, 0, len(d.slots)+len(d.eslots)+1)
	s = append(s, uint16(olcdOlcdGeometryOLCD_SLOT_OTHER))
	for _, v := range d.slots {
		s = append(s, v)
	}
	s = d.exemptSlotList(s)
	slices.Sort(s)
	return s
}

// b2u8 is a C boolean field's value.
func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
