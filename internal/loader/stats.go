package loader

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// Counters are cumulative counts of one stats slot, summed over CPUs, since
// the port got its slot (or since Load for "other").
type Counters struct {
	// NewConns counts new connections: TCP SYNs with ACK, RST and FIN
	// clear, and datagrams to a UDP-protected port. Every one of them is
	// either dropped or passed: NewConns = Dropped + Passed.
	NewConns uint64
	// Passed counts new connections let through, including the marked,
	// would-drop, exempt and stale ones.
	Passed uint64
	// Dropped counts new connections dropped (enforce mode, drop action).
	Dropped uint64
	// Marked counts new connections marked and passed (enforce, mark action).
	Marked uint64
	// WouldDrop counts new connections the draw selected in observe mode.
	WouldDrop uint64
	// Exempt counts new connections to an exception port or from an
	// exception source prefix.
	Exempt uint64
	// Stale counts new connections the draw selected while the heartbeat
	// was older than Config.StaleAfter, passed instead (fail-open).
	Stale uint64
	// SYNRetransmits counts SYNs identical (addresses, ports, initial
	// sequence number) to one dropped recently: demand that is not new.
	// They are also in NewConns.
	SYNRetransmits uint64
	// Rejected counts the dropped SYNs answered with a RST|ACK (reject
	// action); the others of Dropped went over the rate limit or carried
	// data. A rejected SYN is not remembered as dropped: its client gives
	// up at once, it does not retransmit.
	Rejected uint64
	// WouldReject counts the would-drop SYNs that the reject action would
	// have answered (observe mode, reject action).
	WouldReject uint64
	// Capped counts the new connections a static cap refused (PortCaps),
	// of Dropped in enforce mode and of WouldDrop in observe mode: the
	// rest of those is what the adaptive law shed.
	Capped uint64
	// Ceiled counts the new connections the adaptive law's ceiling on
	// requests in flight refused (Datapath.SetInFlightCeilings): part of
	// what the law shed, of Dropped in enforce mode, and what it would
	// refuse in observe mode (request starts meet no ceiling).
	Ceiled uint64
}

// Stats is a snapshot of the datapath counters.
type Stats struct {
	// Ports has one entry per port with a policy.
	Ports map[olc.PortKey]Counters
	// Other collects new TCP connections to ports without a policy,
	// including exception ports without one that have no slot of their
	// own (more exception and protected ports than Config.MaxPorts).
	Other Counters
	// ExemptPorts has one entry per exception port without a policy that
	// has a stats slot of its own (every one while slots are free): its
	// new TCP connections, all passed and exempt. A UDP exception port
	// without a policy counts nothing (not a request).
	ExemptPorts map[olc.PortKey]Counters
	// Unclassified counts frames that could have carried a new connection
	// but could not be examined: malformed or truncated headers, more than
	// 4 VLAN tags, non-first fragments, ESP, or an IPv6 extension-header
	// chain longer than the walk.
	Unclassified uint64
	// RejectLimited counts SYNs the reject action dropped because their
	// CPU had answered its rate limit's worth (Config.RejectRate).
	RejectLimited uint64
	// Response has the response timing of every timed port (see
	// Datapath.Timed) when timing is on (Config.ResponseSample), nil when
	// it is off.
	Response map[olc.PortKey]Response
	// Flows are the flow table's counters (zero when timing is off).
	Flows FlowCounters
}

// Stats returns the cumulative counters of every port with a policy, of the
// "other" slot, and the unclassified count, and with response timing on the
// response histograms of the timed ports. Errors: a closed datapath or a
// failed map read.
func (d *Datapath) Stats() (Stats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	if err := d.stats.fold(d.slotList()); err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	s := Stats{
		Ports: make(map[olc.PortKey]Counters, len(d.slots)),
		Other: d.stats.counters(uint16(olcdOlcdGeometryOLCD_SLOT_OTHER)),
	}
	if err := d.foldCapped(); err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	for k, slot := range d.slots {
		s.Ports[k] = d.withCapped(d.stats.counters(slot), slot)
	}
	s.ExemptPorts = make(map[olc.PortKey]Counters, len(d.eslots))
	for k, slot := range d.eslots {
		s.ExemptPorts[k] = d.stats.counters(slot)
	}
	var err error
	if s.Unclassified, err = d.stats.unclassified(); err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	if s.RejectLimited, err = rejectLimited(d.objs.OlcdRejTokens); err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	if d.cfg.ResponseSample != 0 {
		if err := d.resp.fold(d.respSlotList()); err != nil {
			return Stats{}, fmt.Errorf("read stats: %w", err)
		}
		s.Response = make(map[olc.PortKey]Response, len(d.rslots))
		for k, slot := range d.rslots {
			s.Response[k] = d.resp.response(uint16(slot))
		}
		if s.Flows, err = d.resp.flows(); err != nil {
			return Stats{}, fmt.Errorf("read stats: %w", err)
		}
	}
	return s, nil
}

// PortCounters fills into, after clearing it, with the cumulative counters
// of every port with a policy: what Stats returns in Ports, without the
// unclassified count (one syscall fewer) and without allocating when into is
// reused. The onset check calls it 20 times a second. Errors: a closed
// datapath or a failed map read.
func (d *Datapath) PortCounters(into map[olc.PortKey]Counters) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("read stats: %w", err)
	}
	d.slotBuf = append(d.slotBuf[:0], uint16(olcdOlcdGeometryOLCD_SLOT_OTHER))
	for _, v := range d.slots {
		d.slotBuf = append(d.slotBuf, v)
	}
	slices.Sort(d.slotBuf)
	if err := d.stats.fold(d.slotBuf); err != nil {
		return fmt.Errorf("read stats: %w", err)
	}
	if err := d.foldCapped(); err != nil {
		return fmt.Errorf("read stats: %w", err)
	}
	clear(into)
	for k, slot := range d.slots {
		into[k] = d.withCapped(d.stats.counters(slot), slot)
	}
	return nil
}

// foldInterval bounds the time between two folds of the 32-bit per-CPU
// counters. One CPU would have to count 2^32 events in it to wrap a counter
// unseen: 143 million per second, several times what one CPU can receive.
const foldInterval = 30 * time.Second

// foldLoop folds the counters every foldInterval until Close, so that
// Stats stays exact however rarely it is called.
func (d *Datapath) foldLoop() {
	defer close(d.done)
	t := time.NewTicker(foldInterval)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		d.mu.Lock()
		if !d.closed {
			if err := errors.Join(d.stats.fold(d.slotList()), d.foldCapped()); err != nil {
				d.log.Warn("fold datapath counters", "err", err)
			}
			if d.cfg.ResponseSample != 0 {
				if err := d.resp.fold(d.respSlotList()); err != nil {
					d.log.Warn("fold response histograms", "err", err)
				}
			}
		}
		d.mu.Unlock()
	}
}

// numCounters is the number of counters in struct olcd_counters.
const numCounters = 8

// Indices of the counters in a counterArray and in slotTotals.total, in
// the order of struct olcd_counters.
const (
	cNew = iota
	cDropped
	cMarked
	cWouldDrop
	cExempt
	cStale
	cRetransmits
	cRejected
)

type counterArray [numCounters]uint32

func countersOf(c *olcdOlcdCounters) counterArray {
	return counterArray{c.NewConns, c.Dropped, c.Marked, c.WouldDrop, c.Exempt, c.Stale, c.SynRetransmits, c.Rejected}
}

// Kinds of a slot's effective policy (the smaller of the global and the
// port's mode, and its action) that the datapath's rejected counter tells
// apart: it counts answered SYNs in enforce mode and would-drops in observe
// mode, both under the reject action.
const (
	kindEnforceReject uint8 = 1 << iota // rejected: SYNs answered, of dropped
	kindObserveReject                   // rejected and would_drop: the same SYNs (TCP)
	kindObserveOther                    // would_drop alone: drop or mark action, or UDP
	kindAll           = kindEnforceReject | kindObserveReject | kindObserveOther
)

// policyKind is the kind of a port's policy under the global mode (both C
// enum olcd_mode values).
func policyKind(global, port uint8, action olc.Action, proto olc.Proto) uint8 {
	mode := min(global, port)
	// A UDP port's reject drops (fp is 0 in olcd_decide): never counted.
	rej := action == olc.ActionReject && proto == olc.ProtoTCP
	switch {
	case mode == uint8(olcdOlcdModeOLCD_MODE_ENFORCE) && rej:
		return kindEnforceReject
	case mode == uint8(olcdOlcdModeOLCD_MODE_OBSERVE) && rej:
		return kindObserveReject
	case mode == uint8(olcdOlcdModeOLCD_MODE_OBSERVE):
		return kindObserveOther
	}
	return 0
}

// observedRejects is the part of one CPU's rejected delta counted in
// observe mode, given the kinds its interval may hold (mask) and its
// would_drop delta. Exact unless the mask holds all three kinds, which
// statsFolder.setKind keeps from happening (see there).
func observedRejects(mask uint8, rejected, wouldDrop uint32) uint32 {
	switch {
	case mask&kindEnforceReject == 0: // nothing answered: all observed
		return rejected
	case mask&kindObserveOther == 0: // every would-drop was a reject port's, counted in both
		return wouldDrop
	case mask&kindObserveReject == 0: // nothing observed under reject
		return 0
	}
	return min(rejected, wouldDrop)
}

// slotTotals is the 64-bit total of one slot and the per-CPU 32-bit values
// last folded into it.
type slotTotals struct {
	prev  []counterArray
	total [numCounters]uint64
	// wouldReject is the part of total[cRejected] counted in observe mode.
	wouldReject uint64
	// kind is the kind of the slot's policy now; seen the kinds the
	// datapath may have counted under since the last fold, before those
	// of the fold before: a program that read its policy before a fold
	// can count after it, and the two increments of one observed reject
	// (would_drop, rejected) can straddle a fold.
	kind, seen, before uint8
}

// statsFolder turns the 32-bit per-CPU counters into 64-bit totals: each
// fold adds, per CPU, the difference to the last value seen modulo 2^32.
// Not safe for concurrent use; the Datapath mutex guards it.
type statsFolder struct {
	perCPUReader[olcdOlcdCounters]
	unclass *ebpf.Map
	slots   map[uint16]*slotTotals
	// even is olcd_even with Config.Selection even, nil otherwise.
	even *ebpf.Map
	// seed is Config.DrawSeed: 0 starts each slot's draw at random.
	seed uint64
}

func newStatsFolder(m, unclass, even *ebpf.Map, seed uint64) *statsFolder {
	return &statsFolder{perCPUReader: perCPUReader[olcdOlcdCounters]{m: m, what: "stats slots", chunk: statsChunk},
		unclass: unclass, even: even, slots: make(map[uint16]*slotTotals), seed: seed}
}

// statsChunk bounds one batched read: 256 entries × CPUs × 32 bytes (2 MB
// on 256 CPUs).
const statsChunk = 256

// fold reads the slots (sorted ascending, as slotList returns them) and adds
// what each CPU counted since the last fold.
func (f *statsFolder) fold(slots []uint16) error { return f.read(slots, f.add) }

// add folds one slot's per-CPU counters into its totals, and splits the
// rejected counts by the kinds of policy the slot had since the last folds.
func (f *statsFolder) add(slot uint16, percpu []olcdOlcdCounters) {
	st := f.slots[slot]
	if st == nil {
		st = &slotTotals{}
		f.slots[slot] = st
	}
	if len(st.prev) != len(percpu) {
		st.prev = make([]counterArray, len(percpu))
	}
	mask := st.seen | st.before
	for cpu := range percpu {
		cur := countersOf(&percpu[cpu])
		var d counterArray
		for i := range cur {
			d[i] = cur[i] - st.prev[cpu][i]
			st.total[i] += uint64(d[i])
		}
		st.wouldReject += uint64(observedRejects(mask, d[cRejected], d[cWouldDrop]))
		st.prev[cpu] = cur
	}
	st.before, st.seen = st.seen, st.kind
}

// setKind records the kind of a slot's policy before the datapath is given
// it. A slot whose last two intervals and the new kind would hold all three
// kinds is folded twice first, which leaves only its current kind: then
// observedRejects is exact, unless one program run lasts across both folds.
func (f *statsFolder) setKind(slot uint16, kind uint8) error {
	st := f.slots[slot]
	if st == nil {
		st = &slotTotals{}
		f.slots[slot] = st
	}
	if st.kind == kind {
		return nil
	}
	if st.seen|st.before|kind == kindAll {
		for range 2 {
			if err := f.fold([]uint16{slot}); err != nil {
				return err
			}
		}
	}
	st.kind = kind
	st.seen |= kind
	return nil
}

// reset zeroes a slot in the kernel and in the totals, for a new owner. On
// every CPU its new-connection count starts at a random value instead of 0
// (the totals fold from there), so that no two CPUs or ports draw the same
// sequence (olcd_draw in bpf/olcd.c), and with Config.Selection even its
// accumulator at a random phase. With a seed the values are drawn from a
// generator seeded by (seed, slot) instead: the same seed and slot give the
// same values on every load.
func (f *statsFolder) reset(slot uint16) error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("reset stats slot %d: %w", slot, err)
	}
	draw := rand.Uint32
	if f.seed != 0 {
		draw = rand.New(rand.NewPCG(f.seed, uint64(slot))).Uint32
	}
	vals := make([]olcdOlcdCounters, n)
	st := &slotTotals{prev: make([]counterArray, n)}
	for i := range vals {
		vals[i].NewConns = draw()
		st.prev[i] = countersOf(&vals[i])
	}
	if err := f.m.Update(uint32(slot), vals, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("reset stats slot %d: %w", slot, err)
	}
	if f.even != nil {
		phase := make([]uint32, n)
		for i := range phase {
			phase[i] = draw()
		}
		if err := f.even.Update(uint32(slot), phase, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("reset even-selection phase of slot %d: %w", slot, err)
		}
	}
	f.slots[slot] = st
	return nil
}

// forget drops the totals of a slot that lost its owner.
func (f *statsFolder) forget(slot uint16) { delete(f.slots, slot) }

func (f *statsFolder) counters(slot uint16) Counters {
	st := f.slots[slot]
	if st == nil {
		return Counters{}
	}
	t := st.total
	// A fold can copy a CPU's counters between two increments of one
	// packet (new_conns and dropped, would_drop and rejected); the next
	// fold catches up.
	passed := t[cNew] - min(t[cDropped], t[cNew])
	would := min(st.wouldReject, t[cRejected])
	return Counters{
		NewConns:       t[cNew],
		Passed:         passed,
		Dropped:        t[cDropped],
		Marked:         t[cMarked],
		WouldDrop:      t[cWouldDrop],
		Exempt:         t[cExempt],
		Stale:          t[cStale],
		SYNRetransmits: t[cRetransmits],
		Rejected:       t[cRejected] - would,
		WouldReject:    would,
	}
}

// rejectLimited sums the reject buckets' limited counts over the CPUs.
func rejectLimited(m *ebpf.Map) (uint64, error) {
	var per []olcdOlcdRejectBucket
	if err := m.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read reject buckets: %w", err)
	}
	var sum uint64
	for _, b := range per {
		sum += b.Limited
	}
	return sum, nil
}

func (f *statsFolder) unclassified() (uint64, error) {
	var per []uint64
	if err := f.unclass.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read unclassified count: %w", err)
	}
	var sum uint64
	for _, v := range per {
		sum += v
	}
	return sum, nil
}

// baseline reads the slots of a datapath taken over and makes what their
// counters hold now the zero of the totals: this Datapath counts from the
// take-over on, as a new process's counters do.
func (f *statsFolder) baseline(slots []uint16) error {
	if err := f.fold(slots); err != nil {
		return err
	}
	for _, st := range f.slots {
		st.total, st.wouldReject = [numCounters]uint64{}, 0
	}
	return nil
}
