package loader

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/loader/dpconfig"
	"github.com/olcd/olcd/internal/olc"
)

// Fair shedding and static caps (bpf/fair.h; docs/datapath.md, "Fair
// shedding").
const (
	// DefaultFairWidth is the sketch's counters per row: 4096, so that a
	// source is told apart from the sketch's noise once its share of the
	// fair ports' new work is above about 1/4096 (2.4e-4: a source 100
	// times the fair share among 400 000 even ones); 32 KiB per CPU for
	// both rows whatever the number of sources, 2 MiB at 64 CPUs, half
	// the datapath's 4 MiB goal there (docs/datapath.md, "Memory").
	DefaultFairWidth = 4096
	// MaxFairWidth bounds the sketch at 8 MiB per CPU.
	MaxFairWidth = 1 << 20
	// DefaultFairEpoch is how often the sketch's counts halve: 268 ms
	// (2^28 ns), so that a count is about the last half second of a
	// source's demand: a few controller ticks, and short enough that a
	// source that stops is forgotten within a second or two.
	DefaultFairEpoch = time.Duration(1 << 28)
	// DefaultFairPrefix4 and DefaultFairPrefix6 are the prefix lengths a
	// source is counted by: one IPv4 address, one IPv6 /64 (what one host
	// or one customer gets: SLAAC hands a /64 to a link).
	DefaultFairPrefix4 = 32
	DefaultFairPrefix6 = 64
)

// PortCaps are a port's static caps (declared in dpconfig with PortPolicy).
type PortCaps = dpconfig.PortCaps

// SourceCap is a ceiling on one source prefix's new work to a port
// (SetSourceCaps): a new connection from one (the longest that matches)
// takes a token of its bucket first, then the port's.
type SourceCap struct {
	Prefix netip.Prefix
	Rate   float64 // new connections per second, > 0
	Burst  int     // 0: a tenth of a second's worth (at least 1)
}

// capBurst is the GCRA tolerance of a cap: burst−1 tokens ahead of the
// clock. The datapath's clock moves once per jiffy (up to 10 ms), so the
// tolerance is at least one jiffy's worth of tokens, or a cap below 100/s
// would admit nothing for the rest of a jiffy after each admission.
func capBurst(rate float64, burst int) (perNs, burstNs uint64) {
	if rate <= 0 {
		return 0, 0
	}
	per := math.Max(1, math.Round(1e9/rate))
	if burst <= 0 {
		burst = max(1, int(rate/10))
	}
	return uint64(per), uint64(per) * uint64(burst-1)
}

func checkCaps(k olc.PortKey, p PortPolicy) error {
	var errs []error
	c := p.Caps
	if math.IsNaN(c.Rate) || c.Rate < 0 || c.Rate > 1e9 {
		errs = append(errs, fmt.Errorf("port %s: cap rate %v is outside 0..1e9 per second", k, c.Rate))
	}
	if c.Burst < 0 {
		errs = append(errs, fmt.Errorf("port %s: cap burst %d is negative", k, c.Burst))
	}
	if c.InFlight < 0 {
		errs = append(errs, fmt.Errorf("port %s: cap in flight %d is negative", k, c.InFlight))
	}
	if p.FairPrefix4 < 0 || p.FairPrefix4 > 32 {
		errs = append(errs, fmt.Errorf("port %s: fair prefix4 %d is outside 1..32", k, p.FairPrefix4))
	}
	if p.FairPrefix6 < 0 || p.FairPrefix6 > 128 {
		errs = append(errs, fmt.Errorf("port %s: fair prefix6 %d is outside 1..128", k, p.FairPrefix6))
	}
	return errors.Join(errs...)
}

// fairWidth is the sketch's row width for cfg (a power of two, at least
// one line).
func fairWidth(cfg Config) uint32 {
	w := uint32(cfg.FairWidth)
	if w == 0 {
		w = DefaultFairWidth
	}
	w = max(w, uint32(olcdOlcdFairGeometryOLCD_FAIR_LINE))
	return 1 << bits.Len32(w-1)
}

func checkFairConfig(cfg Config) error {
	var errs []error
	if cfg.FairWidth < 0 || cfg.FairWidth > MaxFairWidth {
		errs = append(errs, fmt.Errorf("fair width: %d is outside 0..%d", cfg.FairWidth, MaxFairWidth))
	}
	if cfg.FairEpoch != 0 && (cfg.FairEpoch < time.Millisecond || cfg.FairEpoch > 10*time.Second) {
		errs = append(errs, fmt.Errorf("fair epoch: %s is outside 1ms..10s", cfg.FairEpoch))
	}
	if cfg.MaxCapSources < 0 || cfg.MaxCapSources > 1<<16 {
		errs = append(errs, fmt.Errorf("max cap sources: %d is outside 0..65536", cfg.MaxCapSources))
	}
	return errors.Join(errs...)
}

func maxCapSources(cfg Config) int {
	if cfg.MaxCapSources == 0 {
		return dpconfig.MaxCapSources
	}
	return cfg.MaxCapSources
}

// sizeFairMaps sets the sizes of fair.h's maps from cfg.
func sizeFairMaps(spec *ebpf.CollectionSpec, cfg Config) {
	spec.Maps[olcdMapOlcdFairCm].MaxEntries = uint32(olcdOlcdFairGeometryOLCD_FAIR_DEPTH) * fairWidth(cfg) / uint32(olcdOlcdFairGeometryOLCD_FAIR_LINE)
	spec.Maps[olcdMapOlcdFairSlots].MaxEntries = uint32(cfg.MaxPorts) + 1
	spec.Maps[olcdMapOlcdCaps].MaxEntries = uint32(cfg.MaxPorts) + 1 + uint32(maxCapSources(cfg))
	spec.Maps[olcdMapOlcdCapSrc].MaxEntries = uint32(maxCapSources(cfg))
	spec.Maps[olcdMapOlcdCeil].MaxEntries = uint32(cfg.MaxPorts) + 1
}

// fairState is the loader's shadow of fair.h's caps.
type fairState struct {
	conf olcdOlcdFairConf
	// caps written per port, to rewrite a bucket only when it changes
	// (a rewrite resets its clock).
	caps map[olc.PortKey]PortCaps
	// src holds the olcd_caps index of every source cap in the trie;
	// srcCaps the source caps of each port (SetSourceCaps).
	src     map[olcdOlcdCapKey]uint32
	srcCaps map[olc.PortKey][]SourceCap
	free    []uint32
	// capped folds the 32-bit per-CPU capped counters into 64-bit totals.
	capped map[uint16]*cappedTotal
	// law holds the adaptive law's ceilings on requests in flight
	// (SetInFlightCeilings) and floor the share of their refusals passed;
	// ceil the entries written to olcd_ceil.
	law         map[olc.PortKey]uint32
	floor       uint32
	ceil        map[olc.PortKey]olcdOlcdCeiling
	tooManyCPUs bool // the warning that no ceiling is set was logged
}

// cappedTotal folds a slot's capped and ceiled counts: prev per CPU.
type cappedTotal struct {
	prev  []cappedCount
	total struct{ capped, ceiled uint64 }
}

// cappedCount is one CPU's 32-bit capped and ceiled counts.
type cappedCount struct{ capped, ceiled uint32 }

// initFair writes fair.h's knobs: a random hash seed, the sketch's mask,
// the epoch.
func (d *Datapath) initFair() error {
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return fmt.Errorf("seed fair sketch: %w", err)
	}
	epoch := d.cfg.FairEpoch
	if epoch == 0 {
		epoch = DefaultFairEpoch
	}
	d.fair = fairState{
		conf: olcdOlcdFairConf{
			Seed:       binary.LittleEndian.Uint64(seed[:]),
			WidthMask:  fairWidth(d.cfg) - 1,
			EpochShift: uint32(bits.Len64(uint64(epoch.Nanoseconds())) - 1),
		},
		caps:    make(map[olc.PortKey]PortCaps),
		src:     make(map[olcdOlcdCapKey]uint32),
		srcCaps: make(map[olc.PortKey][]SourceCap),
		capped:  make(map[uint16]*cappedTotal),
		law:     make(map[olc.PortKey]uint32),
		ceil:    make(map[olc.PortKey]olcdOlcdCeiling),
	}
	base := uint32(d.cfg.MaxPorts) + 1
	for i := maxCapSources(d.cfg) - 1; i >= 0; i-- {
		d.fair.free = append(d.fair.free, base+uint32(i))
	}
	return d.writeFairConf()
}

func (d *Datapath) writeFairConf() error {
	if err := d.objs.OlcdFair.Set(&d.fair.conf); err != nil {
		return fmt.Errorf("write fair shedding knobs: %w", err)
	}
	return nil
}

// setFairClock fixes the clock of the sketch's epochs (tests; 0: the
// datapath's own clock).
func (d *Datapath) setFairClock(ns uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fair.conf.TestNowNs = ns
	return d.writeFairConf()
}

// fairFields fills the fair and caps fields of a policy entry; ceiled: the
// port has a ceiling on requests in flight in olcd_ceil.
func fairFields(p PortPolicy, srcCaps []SourceCap, ceiled bool, v *olcdOlcdPolicy) {
	v.Fair = b2u8(p.Fair)
	v.FairPrefix4 = uint8(DefaultFairPrefix4)
	if p.FairPrefix4 != 0 {
		v.FairPrefix4 = uint8(p.FairPrefix4)
	}
	v.FairPrefix6 = uint8(DefaultFairPrefix6)
	if p.FairPrefix6 != 0 {
		v.FairPrefix6 = uint8(p.FairPrefix6)
	}
	var caps uint8
	if p.Caps.Rate > 0 {
		caps |= uint8(olcdOlcdCapFlagOLCD_CAP_RATE)
	}
	if len(srcCaps) > 0 {
		caps |= uint8(olcdOlcdCapFlagOLCD_CAP_SOURCES)
	}
	if ceiled {
		caps |= uint8(olcdOlcdCapFlagOLCD_CAP_INFLIGHT)
	}
	v.Caps = caps
}

func capKey(slot uint16, p netip.Prefix) olcdOlcdCapKey {
	p = p.Masked()
	k := olcdOlcdCapKey{Slot: slot, Prefixlen: 32 + uint32(p.Bits())}
	if p.Addr().Is4() {
		k.Prefixlen += 96 // ::ffff:a.b.c.d, as fair.h reads an IPv4 source
		k.Addr = netip.AddrFrom16(netip.AddrFrom4(p.Addr().As4()).As16()).As16()
	} else {
		k.Addr = p.Addr().As16()
	}
	return k
}

// writeCaps writes a port's buckets (slot) when its caps changed since the
// last write, and resets its fair state and capped count when new.
func (d *Datapath) writeCaps(k olc.PortKey, slot uint16, fresh bool) error {
	p := d.policies[k]
	if fresh {
		if err := d.resetFairSlot(slot); err != nil {
			return err
		}
	}
	old, had := d.fair.caps[k]
	if had && !fresh && old == p.Caps {
		return nil
	}
	per, burst := capBurst(p.Caps.Rate, p.Caps.Burst)
	if err := d.objs.OlcdCaps.Update(uint32(slot), &olcdOlcdCap{NsPerToken: per, BurstNs: burst}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write cap of port %s: %w", k, err)
	}
	d.fair.caps[k] = p.Caps
	return d.trackCapped(k, slot)
}

// trackCapped starts folding the capped and ceiled counts of a port with
// a cap or a ceiling.
func (d *Datapath) trackCapped(k olc.PortKey, slot uint16) error {
	if anyCap(d.policies[k].Caps) || len(d.fair.srcCaps[k]) > 0 || hasCeiling(d.fair.ceil[k]) {
		if d.fair.capped[slot] == nil {
			n, err := ebpf.PossibleCPU()
			if err != nil {
				return fmt.Errorf("write caps of port %s: %w", k, err)
			}
			var vals []olcdOlcdFairSlot
			if err := d.objs.OlcdFairSlots.Lookup(uint32(slot), &vals); err != nil {
				return fmt.Errorf("write caps of port %s: %w", k, err)
			}
			t := &cappedTotal{prev: make([]cappedCount, n)}
			for i := range vals {
				if i < n {
					t.prev[i] = cappedCount{vals[i].Capped, vals[i].Ceiled}
				}
			}
			d.fair.capped[slot] = t
		}
	}
	return nil
}

// anyCap reports whether a cap is set (their counts are then folded).
func anyCap(c PortCaps) bool {
	return c.Rate > 0 || c.InFlight > 0
}

// dropSourceCaps removes the source caps of slot not in keep.
func (d *Datapath) dropSourceCaps(slot uint16, keep map[olcdOlcdCapKey]SourceCap) error {
	for key, idx := range d.fair.src {
		if key.Slot != slot {
			continue
		}
		if _, ok := keep[key]; ok {
			continue
		}
		if err := d.objs.OlcdCapSrc.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove source cap: %w", err)
		}
		delete(d.fair.src, key)
		d.fair.free = append(d.fair.free, idx)
	}
	return nil
}

// forgetCaps clears the caps of a port that is gone (its slot is freed).
func (d *Datapath) forgetCaps(k olc.PortKey, slot uint16) error {
	delete(d.fair.caps, k)
	delete(d.fair.srcCaps, k)
	delete(d.fair.capped, slot)
	delete(d.fair.law, k)
	delete(d.fair.ceil, k)
	if err := d.objs.OlcdCaps.Update(uint32(slot), &olcdOlcdCap{}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("clear cap of port %s: %w", k, err)
	}
	if err := d.objs.OlcdCeil.Update(uint32(slot), &olcdOlcdCeiling{}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("clear ceiling of port %s: %w", k, err)
	}
	return d.dropSourceCaps(slot, nil)
}

// resetFairSlot zeroes a slot's fair state and capped counts on every CPU.
func (d *Datapath) resetFairSlot(slot uint16) error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("reset fair slot %d: %w", slot, err)
	}
	if err := d.objs.OlcdFairSlots.Update(uint32(slot), make([]olcdOlcdFairSlot, n), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("reset fair slot %d: %w", slot, err)
	}
	delete(d.fair.capped, slot)
	return nil
}

// foldCapped brings the 64-bit capped and ceiled totals up to date (each CPU's 32-bit
// count is added modulo 2^32, as statsFolder does).
func (d *Datapath) foldCapped() error {
	var vals []olcdOlcdFairSlot
	for slot, t := range d.fair.capped {
		if err := d.objs.OlcdFairSlots.Lookup(uint32(slot), &vals); err != nil {
			return fmt.Errorf("read capped counts of slot %d: %w", slot, err)
		}
		for i := range vals {
			if i < len(t.prev) {
				t.total.capped += uint64(vals[i].Capped - t.prev[i].capped)
				t.total.ceiled += uint64(vals[i].Ceiled - t.prev[i].ceiled)
				t.prev[i] = cappedCount{vals[i].Capped, vals[i].Ceiled}
			}
		}
	}
	return nil
}

// withCapped adds a slot's capped and ceiled totals to its counters.
func (d *Datapath) withCapped(c Counters, slot uint16) Counters {
	if t := d.fair.capped[slot]; t != nil {
		c.Capped, c.Ceiled = t.total.capped, t.total.ceiled
	}
	return c
}

// SetSourceCaps replaces the source prefix caps of every port: m maps a
// port with a policy to its caps; a port not in m has none. A prefix's
// bucket keeps its clock while its cap is unchanged.
//
// Errors: a port without a policy, an invalid prefix, a rate outside
// (0, 1e9] per second, a negative burst, more than Config.MaxCapSources
// caps in all, a closed datapath, or a failed map write. Nothing is changed
// when validation fails.
func (d *Datapath) SetSourceCaps(m map[olc.PortKey][]SourceCap) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("set source caps: %w", err)
	}
	var errs []error
	n := 0
	for k, caps := range m {
		if _, ok := d.policies[k]; !ok {
			errs = append(errs, fmt.Errorf("port %s has no policy", k))
		}
		for _, s := range caps {
			if !s.Prefix.IsValid() {
				errs = append(errs, fmt.Errorf("port %s: cap source prefix %q is invalid", k, s.Prefix))
			}
			if math.IsNaN(s.Rate) || !(s.Rate > 0) || s.Rate > 1e9 {
				errs = append(errs, fmt.Errorf("port %s: cap of source %s: rate %v is outside (0, 1e9] per second", k, s.Prefix, s.Rate))
			}
			if s.Burst < 0 {
				errs = append(errs, fmt.Errorf("port %s: cap of source %s: burst %d is negative", k, s.Prefix, s.Burst))
			}
			n++
		}
	}
	if n > maxCapSources(d.cfg) {
		errs = append(errs, fmt.Errorf("%d source caps exceed max cap sources %d", n, maxCapSources(d.cfg)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("set source caps: %w", err)
	}
	for k := range d.policies {
		if err := d.writeSourceCaps(k, m[k]); err != nil {
			return fmt.Errorf("set source caps: %w", err)
		}
	}
	return nil
}

// writeSourceCaps makes caps the source caps of port k: new buckets first,
// then the trie, then the ones gone removed; the policy's flag last.
func (d *Datapath) writeSourceCaps(k olc.PortKey, caps []SourceCap) error {
	slot := d.slots[k]
	old := d.fair.srcCaps[k]
	want := make(map[olcdOlcdCapKey]SourceCap, len(caps))
	for _, s := range caps {
		want[capKey(slot, s.Prefix)] = s
	}
	prev := make(map[olcdOlcdCapKey]SourceCap, len(old))
	for _, s := range old {
		prev[capKey(slot, s.Prefix)] = s
	}
	for key, s := range want {
		idx, ok := d.fair.src[key]
		if ok && prev[key] == s {
			continue
		}
		if !ok {
			idx = d.fair.free[len(d.fair.free)-1]
			d.fair.free = d.fair.free[:len(d.fair.free)-1]
			d.fair.src[key] = idx
		}
		per, burst := capBurst(s.Rate, s.Burst)
		if err := d.objs.OlcdCaps.Update(idx, &olcdOlcdCap{NsPerToken: per, BurstNs: burst}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write cap of port %s source %s: %w", k, s.Prefix, err)
		}
		if err := d.objs.OlcdCapSrc.Update(&key, idx, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write cap of port %s source %s: %w", k, s.Prefix, err)
		}
	}
	if err := d.dropSourceCaps(slot, want); err != nil {
		return fmt.Errorf("write caps of port %s: %w", k, err)
	}
	hadAny := len(old) > 0
	if len(caps) == 0 {
		delete(d.fair.srcCaps, k)
	} else {
		d.fair.srcCaps[k] = caps
	}
	if hadAny != (len(caps) > 0) {
		if err := d.writePolicy(k); err != nil {
			return err
		}
	}
	return d.trackCapped(k, slot)
}

// SourceCaps returns a copy of the source caps of every port that has some.
func (d *Datapath) SourceCaps() map[olc.PortKey][]SourceCap {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := make(map[olc.PortKey][]SourceCap, len(d.fair.srcCaps))
	for k, v := range d.fair.srcCaps {
		m[k] = append([]SourceCap(nil), v...)
	}
	return m
}
