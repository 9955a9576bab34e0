package loader

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// Response timing defaults and limits (Config.ResponseSample, FlowTableSize,
// FlowIdle).
// The defaults of MaxPorts, FlowTableSize and ResponsePorts are olc's
// (olc.DefaultFlowTableSize, …), shared with rules.
const (
	DefaultFlowIdle   = 120 * time.Second
	MaxResponseSample = 65536
	// MaxResponsePorts is the most ports timed (16-bit slots, 0 unused).
	MaxResponsePorts = olc.MaxMaxPorts
)

// HistBuckets is the number of buckets of a port's response-time histogram
// (enum olcd_resp_geometry; internal/resptime has the geometry).
const HistBuckets = int(olcdOlcdRespGeometryOLCD_HIST_BUCKETS)

// Response is the cumulative response timing of one port, summed over CPUs,
// since the port got its slot (a Datapath that took a pinned one over: since
// the take-over, its Requests starting from the requests in flight then).
// Only sampled flows are counted.
type Response struct {
	// Requests counts timers started: the first request byte on a flow with
	// no request outstanding.
	Requests uint64
	// Responses counts timers stopped by the server's first answer byte;
	// each is in Buckets.
	Responses uint64
	// Abandoned counts requests forgotten unanswered: the flow was reset,
	// closed, evicted from the flow table or idle past Config.FlowIdle.
	Abandoned uint64
	// Retransmits counts client data already answered and seen again,
	// which started nothing.
	Retransmits uint64
	// Reused counts request starts on a connection already in the flow
	// table: every timed request but each connection's first. With the
	// port's new connections it is the port's demand in requests; the
	// request gate draws on these (PortPolicy.RequestGate).
	Reused uint64
	// Resets counts request starts the request gate shed in enforce mode
	// (the connection reset both ways, bpf/gate.h); WouldReset those it
	// selected in observe mode (passed and timed).
	Resets, WouldReset uint64
	// Buckets are the response counts per histogram bucket
	// (internal/resptime.Bounds gives each bucket's range). Read only:
	// while a port is idle, Stats returns the same slice again. The slice
	// is the holder's until the Stats it came in is handed back with
	// Datapath.ReleaseStats; after that it may hold another read's counts.
	Buckets []uint64
}

// Outstanding is the number of sampled requests started and neither answered
// nor abandoned. It may be off by the few a fold catches between the
// program's updates of two counters; never negative.
func (r Response) Outstanding() int64 {
	n := int64(r.Requests) - int64(r.Responses) - int64(r.Abandoned)
	return max(n, 0)
}

// FlowCounters are the flow table's cumulative counters, summed over CPUs.
type FlowCounters struct {
	Inserts   uint64 // flows entered on their first timed request
	Evictions uint64 // live flows pushed out by a new one (set full)
	Expired   uint64 // idle flows replaced
	Forgotten uint64 // flows ended by FIN or RST
}

// FlowTable describes the flow table's occupancy.
type FlowTable struct {
	// Capacity is the number of flows it holds (sets × 4).
	Capacity int
	// Used is the number of ways holding a flow not idle past FlowIdle;
	// Outstanding how many of those have a request waiting.
	Used, Outstanding int
}

// sampleMax is olcd_resp_ctl.sample_max for one in n (0: nothing sampled;
// the port bitmap is empty then anyway).
func sampleMax(n uint32) uint32 {
	if n <= 1 {
		if n == 0 {
			return 0
		}
		return math.MaxUint32
	}
	return uint32((uint64(1)<<32)/uint64(n) - 1)
}

// flowSets is the number of sets of the flow table: a power of two holding
// at least FlowTableSize flows, 1 when timing is off.
func flowSets(cfg Config) uint32 {
	if cfg.ResponseSample == 0 {
		return 1
	}
	ways := int(olcdOlcdRespGeometryOLCD_FLOW_WAYS)
	n := uint32(1)
	for int(n)*ways < cfg.FlowTableSize {
		n <<= 1
	}
	return n
}

// respSlots is the size of the response histogram map: ResponsePorts
// slots and the unused 0 when timing is on, a single unused entry when it
// is off (the per-CPU histograms are 1.5 KB per port and CPU).
func respSlots(cfg Config) uint32 {
	if cfg.ResponseSample == 0 {
		return 1
	}
	return uint32(cfg.ResponsePorts) + 1
}

// ResponseSample returns the sample rate, one flow in N, or 0 when response
// timing is off.
func (d *Datapath) ResponseSample() uint32 { return d.cfg.ResponseSample }

func (d *Datapath) writeRespControl() error {
	if err := d.objs.OlcdRctl.Set(&d.rctl); err != nil {
		return fmt.Errorf("write response control: %w", err)
	}
	return nil
}

// writeRespPorts gives every protected port a histogram slot while there
// are free ones (ports that lost their policy free theirs; a new slot is
// zeroed first) and writes the timed-port index. Called with the port index
// (writeIndex), so a port is timed exactly while it has a policy. Ports
// beyond Config.ResponsePorts are not timed (Timed reports which are).
func (d *Datapath) writeRespPorts() error {
	if d.cfg.ResponseSample == 0 {
		return nil
	}
	for k, slot := range d.rslots {
		if _, ok := d.policies[k]; !ok || d.exempt[k] {
			delete(d.rslots, k)
			d.resp.forget(uint16(slot))
			d.rfree = append(d.rfree, slot)
		}
	}
	for _, k := range sortedKeys(d.policies) {
		if _, ok := d.rslots[k]; ok || d.exempt[k] || len(d.rfree) == 0 {
			continue
		}
		slot := d.rfree[len(d.rfree)-1]
		if err := d.resp.reset(uint16(slot)); err != nil {
			return err
		}
		d.rfree = d.rfree[:len(d.rfree)-1]
		d.rslots[k] = slot
	}
	next := new(olcdOlcdRespPorts)
	for k, slot := range d.rslots {
		next.Slot[protoIndex(k.Proto)][k.Port] = slot
	}
	if *next == *d.rports {
		return nil
	}
	if err := d.objs.OlcdRports.Set(next); err != nil {
		return fmt.Errorf("write timed-port index: %w", err)
	}
	d.rports = next
	return nil
}

func sortedKeys(m map[olc.PortKey]PortPolicy) []olc.PortKey {
	out := make([]olc.PortKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b olc.PortKey) int {
		if a.Proto != b.Proto {
			return int(a.Proto) - int(b.Proto)
		}
		return int(a.Port) - int(b.Port)
	})
	return out
}

// Timed reports whether a port is timed: response timing is on, the port
// is protected and it got a histogram slot (Config.ResponsePorts).
func (d *Datapath) Timed(k olc.PortKey) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.rslots[k]
	return ok
}

// respSlotList returns the histogram slots in use, sorted.
func (d *Datapath) respSlotList() []uint16 {
	s := make([]uint16, 0, len(d.rslots))
	for _, v := range d.rslots {
		s = append(s, uint16(v))
	}
	slices.Sort(s)
	return s
}

// respFields is the number of 32-bit words of struct olcd_resp_hist.
const respFields = 4 + HistBuckets

// respWords is one CPU's struct olcd_resp_hist as last folded, and the
// buffer a read copies one into.
type respWords struct {
	_ [0]uint64 // 8-byte aligned: buckets are compared in pairs (bucketPairs)
	// requests, responses, abandoned, retransmits, reused, resets,
	// would_reset and the padding (struct olcd_resp_hist)
	counts  [respCounts]uint32
	buckets [HistBuckets]uint32
}

// respCounts is the number of 32-bit counter words before the buckets of
// struct olcd_resp_hist (the last one padding); rResponses the index of
// the one whose move says the buckets moved.
const (
	respCounts = 8
	rResponses = 1
)

type respTotals struct {
	prev  []respWords
	total [respCounts]uint64 // as respWords.counts
	// buckets are the bucket totals; while a Response holding them is not
	// released (respFolder.held), the next fold works on other totals
	// equal to them (respFolder.unshare).
	buckets []uint64
	// last is what response returned last, handed out again while no
	// total changed (stale: one did since).
	last  Response
	stale bool
	// spare is the slot's previous bucket totals, kept out of the free
	// list: it differs from buckets only at the indices in moved (unless
	// movedFull), so when buckets is held the next fold brings spare up to
	// date at those indices instead of copying all of buckets.
	spare     []uint64
	moved     []uint16
	movedFull bool
}

// respEntry is the size of one olcd_rhist entry in the mapped array
// (struct olcd_resp_hist, a multiple of 8 bytes: no padding between).
const respEntry = int64(unsafe.Sizeof(olcdOlcdRespHist{}))

// respFolder folds the 32-bit per-CPU response histograms into 64-bit
// totals, as statsFolder does the counters. olcd_rhist is read where the
// kernel keeps it, mapped into this process ([cpu][slot], histSlots
// entries per CPU): per slot and CPU the four counters, and the buckets
// only when the response count moved. Guarded by the Datapath mutex.
type respFolder struct {
	mem       *ebpf.Memory
	ncpu      int
	histSlots int64
	fstats    *ebpf.Map
	slots     map[uint16]*respTotals
	flowPrev  [][4]uint32
	flowTotal [4]uint64
	cur       respWords // the entry being folded
	// held counts, per bucket array handed out in a Response (keyed by
	// its first element), the Stats holding it and not yet released, and
	// its slot; free are released arrays a fold copies into instead of
	// allocating (at most freeCap of them).
	held map[*uint64]heldBuckets
	free [][]uint64
}

type heldBuckets struct {
	refs int
	slot uint16
}

// newRespFolder maps m (olcd_rhist, ncpu × histSlots entries). Errors: the
// map cannot be mapped.
func newRespFolder(m, fstats *ebpf.Map, ncpu int, histSlots uint32) (*respFolder, error) {
	mem, err := m.Memory()
	if err != nil {
		return nil, fmt.Errorf("map response histograms: %w", err)
	}
	if int64(mem.Size()) < int64(ncpu)*int64(histSlots)*respEntry {
		return nil, fmt.Errorf("map response histograms: %d bytes for %d CPUs × %d slots", mem.Size(), ncpu, histSlots)
	}
	return &respFolder{mem: mem, ncpu: ncpu, histSlots: int64(histSlots), fstats: fstats,
		slots: make(map[uint16]*respTotals), held: make(map[*uint64]heldBuckets)}, nil
}

// bucketPairs views buckets as 64-bit words of two buckets each, so that
// a fold compares two at a time: between two reads of a busy port most
// buckets did not move. HistBuckets is even, and the buckets of a
// respWords are 8-byte aligned (16 bytes into an 8-byte aligned struct).
func bucketPairs(b *[HistBuckets]uint32) *[HistBuckets / 2]uint64 {
	return (*[HistBuckets / 2]uint64)(unsafe.Pointer(b))
}

// bytesOf views v's memory as bytes, for the mapped array's ReadAt and
// WriteAt (both sides native-endian: the array is the kernel's memory).
func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// offset is the byte offset of slot's entry of cpu in the mapped array.
func (f *respFolder) offset(cpu int, slot uint16) int64 {
	return (int64(cpu)*f.histSlots + int64(slot)) * respEntry
}

// counts reads the counters of slot's entry of cpu (respWords.counts: 32
// bytes, no syscall).
func (f *respFolder) counts(cpu int, slot uint16) ([respCounts]uint32, error) {
	var c [respCounts]uint32
	if _, err := f.mem.ReadAt(bytesOf(&c), f.offset(cpu, slot)); err != nil {
		return c, fmt.Errorf("read response counters %d of CPU %d: %w", slot, cpu, err)
	}
	return c, nil
}

func (f *respFolder) totals(slot uint16) *respTotals {
	st := f.slots[slot]
	if st == nil {
		st = &respTotals{stale: true, buckets: f.take()}
		clear(st.buckets)
		f.slots[slot] = st
	}
	return st
}

// add folds slot's entries of every CPU: the counters first, then, on a
// CPU whose response count moved, the buckets. The program counts a
// bucket before the response (resp.h), so a response seen has its bucket;
// a bucket seen early waits in its delta until the next response on that
// CPU.
func (f *respFolder) add(slot uint16) error {
	st := f.totals(slot)
	if len(st.prev) != f.ncpu {
		st.prev = make([]respWords, f.ncpu)
	}
	h := &f.cur
	for cpu := range f.ncpu {
		off := f.offset(cpu, slot)
		c, err := f.counts(cpu, slot)
		if err != nil {
			return err
		}
		p := &st.prev[cpu]
		if c == p.counts {
			continue // idle on this CPU since the last read: no bucket moved either
		}
		st.stale = true
		for i := range c {
			if i != rResponses {
				st.total[i] += uint64(c[i] - p.counts[i])
				p.counts[i] = c[i]
			}
		}
		if c[rResponses] == p.counts[rResponses] {
			continue
		}
		if _, err := f.mem.ReadAt(bytesOf(&h.buckets), off+int64(unsafe.Offsetof(h.buckets))); err != nil {
			return fmt.Errorf("read response histogram %d of CPU %d: %w", slot, cpu, err)
		}
		st.total[rResponses] += uint64(c[rResponses] - p.counts[rResponses])
		p.counts[rResponses] = c[rResponses]
		if f.held[&st.buckets[0]].refs > 0 {
			f.unshare(st)
		}
		b := (*[HistBuckets]uint64)(st.buckets)
		cw, pw := bucketPairs(&h.buckets), bucketPairs(&p.buckets)
		for i := range cw {
			if cw[i] == pw[i] {
				continue
			}
			for j := 2 * i; j < 2*i+2; j++ {
				b[j] += uint64(h.buckets[j] - p.buckets[j])
			}
			pw[i] = cw[i]
			if len(st.moved) < cap(st.moved) {
				st.moved = append(st.moved, uint16(2*i))
			} else {
				st.movedFull = true
			}
		}
	}
	return nil
}

// unshare gives st bucket totals of its own to fold into, equal to its
// held ones: its spare brought up to date at the pairs that moved since
// they were equal (a few for a busy port), or, when the spare is held too
// or too much moved, a copy.
func (f *respFolder) unshare(st *respTotals) {
	cur, sp := st.buckets, st.spare
	if sp != nil && f.held[&sp[0]].refs == 0 && !st.movedFull {
		for _, j := range st.moved {
			sp[j], sp[j+1] = cur[j], cur[j+1]
		}
	} else {
		if sp != nil && f.held[&sp[0]].refs == 0 && len(f.free) < f.freeCap() {
			f.free = append(f.free, sp)
		}
		sp = f.take()
		copy(sp, cur)
	}
	st.buckets, st.spare = sp, cur
	if st.moved == nil {
		st.moved = make([]uint16, 0, HistBuckets/8)
	}
	st.moved, st.movedFull = st.moved[:0], false
}

// fold reads the histograms of the slots in use ("other", slot 0,
// skipped: it has no timed port).
func (f *respFolder) fold(slots []uint16) error {
	for _, slot := range slots {
		if slot == 0 {
			continue
		}
		if err := f.add(slot); err != nil {
			return err
		}
	}
	return nil
}

// reset zeroes a slot's histograms in the kernel and its totals.
func (f *respFolder) reset(slot uint16) error {
	if int64(slot) >= f.histSlots {
		return nil // timing off: a single unused entry
	}
	var zero olcdOlcdRespHist
	for cpu := range f.ncpu {
		if _, err := f.mem.WriteAt(bytesOf(&zero), f.offset(cpu, slot)); err != nil {
			return fmt.Errorf("reset response histogram %d: %w", slot, err)
		}
	}
	delete(f.slots, slot)
	return nil
}

func (f *respFolder) forget(slot uint16) { delete(f.slots, slot) }

// response returns the slot's totals and counts the holder of its
// buckets. A slot whose totals did not change since the last call gets the
// same Response again, Buckets included (callers only read them), so an
// idle port costs no allocation; a busy one costs the one copy of its
// buckets the next fold makes, into a released array when there is one.
func (f *respFolder) response(slot uint16) Response {
	st := f.totals(slot)
	h := f.held[&st.buckets[0]]
	h.refs++
	h.slot = slot
	f.held[&st.buckets[0]] = h
	if !st.stale {
		return st.last
	}
	t := &st.total
	st.last = Response{Requests: t[0], Responses: t[1], Abandoned: t[2], Retransmits: t[3],
		Reused: t[4], Resets: t[5], WouldReset: t[6], Buckets: st.buckets}
	st.stale = false
	return st.last
}

// freeCap bounds the released bucket arrays kept for reuse: two per slot
// in use (the daemon holds the previous tick's and gets the current one)
// and a few for other readers.
func (f *respFolder) freeCap() int { return 2*len(f.slots) + 8 }

// take returns a bucket array to fold into: a released one, or a new one.
// Its contents are unspecified.
func (f *respFolder) take() []uint64 {
	if n := len(f.free); n > 0 {
		b := f.free[n-1]
		f.free[n-1] = nil
		f.free = f.free[:n-1]
		return b
	}
	return make([]uint64, HistBuckets)
}

// release ends one holder's use of a Response's buckets. An array no one
// holds any more is folded into again in place if it is still its slot's
// totals, and otherwise kept for reuse. Arrays this folder did not hand out
// (another Datapath's, or already released) are ignored.
func (f *respFolder) release(b []uint64) {
	if len(b) == 0 {
		return
	}
	p := &b[0]
	h, ok := f.held[p]
	if !ok {
		return
	}
	if h.refs--; h.refs > 0 {
		f.held[p] = h
		return
	}
	delete(f.held, p)
	if st := f.slots[h.slot]; st != nil && (&st.buckets[0] == p || st.spare != nil && &st.spare[0] == p) {
		return
	}
	if len(f.free) < f.freeCap() {
		f.free = append(f.free, b)
	}
}

// ReleaseStats hands back a Stats its holder no longer reads, so that the
// bucket arrays of its Response can be reused by a later read instead of
// allocated (3 KB per busy port and read). It empties s.Response (the
// map every copy of s shares): after the call no copy of s may be read for
// response timing, and a Buckets slice taken from it before may already
// hold another read's counts. Releasing twice, a zero Stats or another
// Datapath's Stats does nothing; a Stats never released is left to the
// garbage collector.
func (d *Datapath) ReleaseStats(s Stats) {
	if len(s.Response) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.resp != nil {
		for _, r := range s.Response {
			d.resp.release(r.Buckets)
		}
	}
	clear(s.Response)
}

func (f *respFolder) flows() (FlowCounters, error) {
	var per []olcdOlcdFlowCounters
	if err := f.fstats.Lookup(uint32(0), &per); err != nil {
		return FlowCounters{}, fmt.Errorf("read flow table counters: %w", err)
	}
	if len(f.flowPrev) != len(per) {
		f.flowPrev = make([][4]uint32, len(per))
	}
	for cpu, c := range per {
		cur := [4]uint32{c.Inserts, c.Evictions, c.Expired, c.Forgotten}
		for i := range cur {
			f.flowTotal[i] += uint64(cur[i] - f.flowPrev[cpu][i])
		}
		f.flowPrev[cpu] = cur
	}
	t := f.flowTotal
	return FlowCounters{Inserts: t[0], Evictions: t[1], Expired: t[2], Forgotten: t[3]}, nil
}

// FlowTableOccupancy scans the flow table (sets × 128 bytes, batched) and
// counts the flows in it not idle past Config.FlowIdle. For status, not for
// every tick. Errors: a closed datapath or a failed read.
func (d *Datapath) FlowTableOccupancy() (FlowTable, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return FlowTable{}, fmt.Errorf("read flow table: %w", err)
	}
	ways := int(olcdOlcdRespGeometryOLCD_FLOW_WAYS)
	m := d.objs.OlcdFlows
	ft := FlowTable{Capacity: int(m.MaxEntries()) * ways}
	if d.cfg.ResponseSample == 0 {
		return FlowTable{}, nil
	}
	now, err := monotonicNow()
	if err != nil {
		return FlowTable{}, fmt.Errorf("read flow table: %w", err)
	}
	if d.rctl.TestNowNs != 0 {
		now = d.rctl.TestNowNs
	}
	stampNow := uint32(now >> 20)
	count := func(set *olcdOlcdFlowSet) {
		for w := 0; w < ways; w++ {
			if set.Tag[w] == 0 || stampNow-set.Stamp[w] > d.rctl.IdleUnits {
				continue
			}
			ft.Used++
			if set.StartNs[w] != 0 {
				ft.Outstanding++
			}
		}
	}
	// Batched, 1024 sets (128 KiB) per call; one lookup per set on
	// kernels without batch operations.
	const chunk = 1024
	keys := make([]uint32, chunk)
	vals := make([]olcdOlcdFlowSet, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			count(&vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return ft, nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			break
		}
		if err != nil {
			return FlowTable{}, fmt.Errorf("read flow table: %w", err)
		}
		if n == 0 {
			return FlowTable{}, errors.New("read flow table: batch read made no progress")
		}
	}
	ft.Used, ft.Outstanding = 0, 0
	var set olcdOlcdFlowSet
	it := m.Iterate()
	var key uint32
	for it.Next(&key, &set) {
		count(&set)
	}
	if err := it.Err(); err != nil {
		return FlowTable{}, fmt.Errorf("read flow table: %w", err)
	}
	return ft, nil
}

// baseline is statsFolder.baseline for the response histograms, but for
// the requests in flight at the take-over: they count as requests this
// Datapath saw start, so that Response.Outstanding (requests less answers
// less abandoned) stays the number in flight. Zeroed, a request started
// before the take-over and answered after it would take one off every
// later reading: the queue standing at a restart would read as none for
// the rest of the daemon's life (issue 27).
func (f *respFolder) baseline(slots []uint16) error {
	if err := f.fold(slots); err != nil {
		return err
	}
	for _, st := range f.slots {
		t := &st.total
		inflight := uint64(Response{Requests: t[0], Responses: t[1], Abandoned: t[2]}.Outstanding())
		st.total = [respCounts]uint64{0: inflight}
		clear(st.buckets)
		st.last, st.stale = Response{}, true
		st.spare, st.moved, st.movedFull = nil, nil, false
	}
	return nil
}
