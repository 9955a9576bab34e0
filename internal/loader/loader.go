// Package loader owns olcd's eBPF datapath: it loads the XDP and TC programs
// compiled from bpf/olcd.c, sizes and fills their maps, attaches them to
// network interfaces and reads their statistics back.
//
// One [Datapath] owns everything it loads and attaches; [Datapath.Close]
// releases all of it. Without Config.PinDir nothing is pinned, so
// attachments die with the process, except clsact/cls_bpf filters (a
// netlink attachment), which the next instance removes at [Datapath.Attach]
// because they are named with the "olcd" prefix. With Config.PinDir the
// maps and links are pinned on bpffs, [Datapath.Release] leaves them
// running, and the next Load takes them over (pin.go; docs/datapath.md,
// "Restarts").
//
// The package speaks olc's types (Mode, Action, Class, PortKey, AttachMode)
// and converts them to the C structs bpf2go generates from bpf/olcd.h at the
// map edge (edge.go), so the datapath can be tested and benchmarked alone.
// Design, map layout and costs: docs/datapath.md.
package loader

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/olcd/olcd/internal/loader/dpconfig"
	"github.com/olcd/olcd/internal/lock"
	"github.com/olcd/olcd/internal/olc"
)

// Selection is how the datapath picks the new connections a drop
// probability p sheds.
type Selection uint8

// Selections. Values come from enum olcd_selection.
const (
	// SelectRandom sheds each new connection independently with
	// probability p (a uniform 32-bit draw per packet).
	SelectRandom = Selection(olcdOlcdSelectionOLCD_SELECT_RANDOM)
	// SelectEven sheds exactly a share p, evenly spaced per CPU and port
	// (error diffusion): what passes arrives as regularly as what was
	// offered, where independent draws turn a steady stream into bursts
	// the service queues behind (docs/datapath.md, "The draw").
	SelectEven = Selection(olcdOlcdSelectionOLCD_SELECT_EVEN)
)

// String returns "random" or "even" (or "selection(N)").
func (s Selection) String() string {
	switch s {
	case SelectRandom:
		return "random"
	case SelectEven:
		return "even"
	}
	return fmt.Sprintf("selection(%d)", uint8(s))
}

// PortPolicy is what the datapath does with new connections to one port
// (declared in dpconfig, so that the config decoder fills the same type the
// loader takes).
type PortPolicy = dpconfig.PortPolicy

// Config sizes the maps and sets the fixed parts of the control record.
// Zero fields take the defaults (olc.DefaultMaxPorts, … and those here).
type Config struct {
	// Interfaces are attached by Open, each with Attach.
	Interfaces []string
	// Attach is the attach mode Open uses; "" means olc.AttachAuto.
	Attach olc.AttachMode
	// MaxPorts is the number of ports with a policy (stats slots),
	// 1..MaxMaxPorts. Default 1024.
	MaxPorts int
	// SYNTableSize is the number of dropped SYNs remembered to recognise
	// their retransmits (rounded up to a power of two; least recently used
	// replaced first, within sets of 4). Default 65536 (DefaultSYNTableSize).
	SYNTableSize int
	// MaxPrefixes is the number of exception source prefixes per address
	// family. Default 1024.
	MaxPrefixes int
	// MarkDSCP is the DSCP code point (0..63) the mark action writes,
	// unless MarkKeepDSCP is set.
	MarkDSCP uint8
	// MarkKeepDSCP makes the mark action leave the DSCP alone: it then only
	// sets skb->mark (TC), and counts.
	MarkKeepDSCP bool
	// MarkFwmark is the skb->mark the mark action sets at TC; 0 leaves the
	// mark alone. XDP has no skb and only rewrites DSCP.
	MarkFwmark uint32
	// StaleAfter is how old the heartbeat may get before the datapath fails
	// open (drops and marks nothing, counts stale). Default 5 s.
	StaleAfter time.Duration
	// Selection is how the draw picks what p sheds; default SelectRandom.
	Selection Selection
	// DrawSeed fixes the draw for tests: non-zero starts the generator of
	// every port's slot on every CPU at a state derived from (DrawSeed,
	// slot), so a given sequence of packets on one CPU is selected the same
	// way on every load. 0 (the zero Config, and what the daemon uses)
	// starts them at random states. The datapath is the same either way.
	DrawSeed uint64
	// RejectRate is how many SYNs per second one CPU answers with a
	// RST|ACK under the reject action (a token bucket per CPU); the rest
	// are dropped and counted (Stats.RejectLimited). 0 takes
	// olc.DefaultRejectRate; negative answers none. At most olc.MaxRejectRate.
	RejectRate int
	// RejectBurst is the bucket's size, in replies; 0 takes a tenth of a
	// second's worth of RejectRate (at least 1).
	RejectBurst int
	// ResponseSample turns response timing on (resp.go) and sets its
	// sample: one flow in ResponseSample (1..65536) is timed, chosen by a
	// hash of its addresses and ports. 0 (the zero Config) leaves it off:
	// no port is timed and the egress program passes everything untouched.
	ResponseSample uint32
	// ResponsePorts is how many protected ports are timed at most
	// (1..MaxResponsePorts), in port order; default 32
	// (DefaultResponsePorts). Each costs a per-CPU histogram.
	ResponsePorts int
	// FlowTableSize is the number of flows the response timer tracks at
	// once (rounded up to a power of two, sets of 4, least recently used
	// replaced first). Default 16384 (DefaultFlowTableSize).
	FlowTableSize int
	// FlowIdle is how long a tracked flow may go without a request or an
	// answer before its place is free (an outstanding request in it is
	// then abandoned). Default 120 s (DefaultFlowIdle): longer than the
	// longest response the histogram resolves (68 s).
	FlowIdle time.Duration
	// PinDir is the bpffs directory the datapath is pinned in (maps, the
	// links of tcx and XDP attachments, the layout map), so that it
	// outlives the process: a Datapath loaded with the same PinDir takes
	// the pinned one over (same maps, programs replaced in place) instead
	// of starting empty, and Release leaves it running. "" pins nothing:
	// everything dies with the process (tests, benchmarks). The daemon
	// uses DefaultPinDir. Design: docs/datapath.md, "Restarts".
	PinDir string
	// FairWidth is the counters per row of fair shedding's sketch (two
	// rows per CPU, 4 bytes each), rounded up to a power of two, 0..2^20;
	// 0 takes DefaultFairWidth (4096).
	FairWidth int
	// FairEpoch is how often the sketch's counts halve (rounded down to a
	// power of two ns), 1 ms..10 s; 0 takes DefaultFairEpoch (268 ms).
	FairEpoch time.Duration
	// MaxCapSources is how many source prefix caps all ports may have
	// together, 0..65536; 0 takes dpconfig.MaxCapSources (1024).
	MaxCapSources int
}

func (c Config) withDefaults() (Config, error) {
	var errs []error
	if c.Attach == "" {
		c.Attach = olc.AttachAuto
	}
	if !c.Attach.Valid() {
		errs = append(errs, fmt.Errorf("attach: unknown mode %q (want auto, tc, xdp, xdp-native or xdp-generic)", c.Attach))
	}
	// The sizes' defaults and ranges are dpconfig's, the ones the config
	// file is checked against. The SYN table alone may be smaller here
	// than a config allows: tests size it to a few sets to force eviction.
	dp := dpconfig.Datapath{MaxPorts: c.MaxPorts, SYNTableSize: c.SYNTableSize, MaxPrefixes: c.MaxPrefixes, Selection: "random",
		ResponseSample: int(c.ResponseSample), ResponsePorts: c.ResponsePorts, FlowTableSize: c.FlowTableSize}.WithDefaults()
	c.MaxPorts, c.SYNTableSize, c.MaxPrefixes, c.ResponsePorts, c.FlowTableSize = dp.MaxPorts, dp.SYNTableSize, dp.MaxPrefixes, dp.ResponsePorts, dp.FlowTableSize
	if c.SYNTableSize < 1 || c.SYNTableSize > 1<<24 {
		errs = append(errs, fmt.Errorf("syn table size: %d is outside 1..%d", c.SYNTableSize, 1<<24))
	}
	dp.SYNTableSize = olc.DefaultSYNTableSize
	if c.Selection != SelectRandom && c.Selection != SelectEven {
		errs = append(errs, fmt.Errorf("selection: unknown %s (want random or even)", c.Selection))
	}
	if c.MarkDSCP > uint8(olcdOlcdDscpOLCD_DSCP_MAX) {
		errs = append(errs, fmt.Errorf("mark dscp: %d is outside 0..%d", c.MarkDSCP, olcdOlcdDscpOLCD_DSCP_MAX))
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = olc.DefaultStaleAfter
	}
	if c.FlowIdle == 0 {
		c.FlowIdle = DefaultFlowIdle
	}
	if c.FlowIdle < time.Second || c.FlowIdle > time.Hour {
		errs = append(errs, fmt.Errorf("flow idle: %s is outside 1s..1h", c.FlowIdle))
	}
	if c.StaleAfter < 0 {
		errs = append(errs, fmt.Errorf("stale after: %s is negative", c.StaleAfter))
	}
	// Negative RejectRate answers none: the bucket is sized and checked
	// as for a rate of 0.
	if c.RejectRate == 0 {
		c.RejectRate = dpconfig.DefaultReject().RejectRate
	}
	if c.RejectBurst == 0 {
		c.RejectBurst = dpconfig.BurstFor(c.RejectRate)
	}
	errs = append(errs, checkFairConfig(c), dpconfig.Check(dp), dpconfig.Check(dpconfig.Reject{RejectRate: max(c.RejectRate, 0), RejectBurst: c.RejectBurst}))
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("loader config: %w", err)
	}
	return c, nil
}

// objects is what Load takes from the collection: the programs, the maps and
// the two global variables the loader writes, not the never-read globals
// that only carry the enums into BTF.
type objects struct {
	olcdPrograms
	olcdMaps
	globals
	// Bss is the .bss map the globals live in, held to be pinned.
	Bss *ebpf.Map `ebpf:".bss"`
}

// globals live in the .bss section, memory-mapped: writes are plain stores.
type globals struct {
	OlcdCtl    *ebpf.Variable `ebpf:"olcd_ctl"`
	OlcdPorts  *ebpf.Variable `ebpf:"olcd_ports"`
	OlcdRej    *ebpf.Variable `ebpf:"olcd_rej"`
	OlcdRctl   *ebpf.Variable `ebpf:"olcd_rctl"`
	OlcdRports *ebpf.Variable `ebpf:"olcd_rports"`
	OlcdFair   *ebpf.Variable `ebpf:"olcd_fair"`
}

func (o *objects) close() error {
	var err error
	if o.Bss != nil {
		err = o.Bss.Close()
	}
	return errors.Join(o.olcdPrograms.Close(), o.olcdMaps.Close(), err)
}

// byName returns the loaded map called name in the object ("" when not
// loaded).
func (o *objects) byName(name string) *ebpf.Map {
	if name == ".bss" {
		return o.Bss
	}
	v := reflect.ValueOf(&o.olcdMaps).Elem()
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("ebpf") == name {
			m, _ := v.Field(i).Interface().(*ebpf.Map)
			return m
		}
	}
	return nil
}

// Datapath owns the loaded programs and maps and every attachment.
// Its methods are safe for concurrent use.
type Datapath struct {
	log *slog.Logger
	cfg Config

	mu     sync.Mutex
	closed bool
	objs   objects

	ctl   olcdOlcdControl
	index *olcdOlcdPortIndex // shadow of the olcd_ports value

	policies map[olc.PortKey]PortPolicy
	slots    map[olc.PortKey]uint16 // policy index = stats slot, 1..MaxPorts
	free     []uint16
	exempt   map[olc.PortKey]bool
	// eslots are the stats slots of exception ports without a policy
	// (exemptslots.go), taken from free.
	eslots   map[olc.PortKey]uint16
	prefixes map[netip.Prefix]bool

	stats *statsFolder
	resp  *respFolder
	rctl  olcdOlcdRespCtl
	// rports is the shadow of the olcd_rports index; rslots the
	// histogram slot of each timed port, rfree the free ones.
	rports *olcdOlcdRespPorts
	rslots map[olc.PortKey]uint16
	rfree  []uint16
	fair   fairState
	// slotBuf is PortCounters' slot list, reused.
	slotBuf []uint16

	attachments []*attachment
	// pinLock is the pin directory's lock (lockPins), held from Load to
	// Close or Release; nil without Config.PinDir.
	pinLock *lock.File
	// adopted says that Load took over a pinned datapath (Config.PinDir),
	// adoptedFresh that its heartbeat was still fresh then.
	adopted, adoptedFresh bool

	stop chan struct{}
	done chan struct{}
}

// exemptIndex is the policy entry shared by exception ports without a policy.
func (d *Datapath) exemptIndex() uint32 { return uint32(d.cfg.MaxPorts) + 1 }

// Load checks cfg, removes the memlock limit, and loads the programs and maps
// sized from cfg, without attaching them (tests and benchmarks use this;
// the daemon uses Open). The global mode starts as ModeOff and the heartbeat
// as never written, so nothing is dropped before the daemon says so.
//
// Errors: an invalid cfg ("loader config: ..."), missing capabilities
// (*PrivilegeError, before anything is created), the memlock limit (naming
// CAP_SYS_RESOURCE and LimitMEMLOCK), or the kernel refusing a map or
// program (a verifier log is in the error chain as *ebpf.VerifierError).
func Load(cfg Config, log *slog.Logger) (_ *Datapath, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkPrivileges(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, memlockError(err)
	}
	logFeatures(log)
	spec, err := loadOlcd()
	if err != nil {
		return nil, fmt.Errorf("load datapath spec: %w", err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("load datapath: %w", err)
	}
	sizeMaps(spec, cfg, ncpu)

	d := &Datapath{
		log:      log,
		cfg:      cfg,
		index:    new(olcdOlcdPortIndex),
		rports:   new(olcdOlcdRespPorts),
		rslots:   make(map[olc.PortKey]uint16),
		policies: make(map[olc.PortKey]PortPolicy),
		slots:    make(map[olc.PortKey]uint16),
		eslots:   make(map[olc.PortKey]uint16),
		exempt:   make(map[olc.PortKey]bool),
		prefixes: make(map[netip.Prefix]bool),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	var pinned *pins
	if cfg.PinDir != "" {
		// Nothing in the directory is opened before this process owns it.
		if d.pinLock, err = lockPins(LockDir, cfg.PinDir, pinLockWait, log); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				_ = d.pinLock.Release()
			}
		}()
		if pinned, err = openPins(cfg.PinDir, spec, log); err != nil {
			return nil, err
		}
		defer pinned.close() // the collection holds clones
	}
	carried, err := d.loadObjects(spec, pinned)
	if err != nil {
		return nil, err
	}
	for i := cfg.MaxPorts; i >= 1; i-- {
		d.free = append(d.free, uint16(i))
	}
	if cfg.ResponseSample != 0 {
		for i := cfg.ResponsePorts; i >= 1; i-- {
			d.rfree = append(d.rfree, uint16(i))
		}
	}
	var even *ebpf.Map
	if cfg.Selection == SelectEven {
		even = d.objs.OlcdEven
	}
	d.stats = newStatsFolder(d.objs.OlcdStats, d.objs.OlcdUnclass, even, cfg.DrawSeed)
	if d.resp, err = newRespFolder(d.objs.OlcdRhist, d.objs.OlcdFstats, ncpu, respSlots(cfg)); err != nil {
		return nil, errors.Join(err, d.objs.close())
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, errors.Join(fmt.Errorf("seed dropped-SYN table: %w", err), d.objs.close())
	}
	dscp := cfg.MarkDSCP
	if cfg.MarkKeepDSCP {
		dscp = uint8(olcdOlcdDscpOLCD_DSCP_KEEP)
	}
	d.ctl = olcdOlcdControl{
		StaleAfterNs: uint64(cfg.StaleAfter.Nanoseconds()),
		SynSeed:      binary.LittleEndian.Uint64(seed[:]),
		SynSetsMask:  synSets(cfg.SYNTableSize) - 1,
		MarkFwmark:   cfg.MarkFwmark,
		MarkDscp:     dscp,
		Mode:         uint8(olc.ModeOff),
		Selection:    uint8(cfg.Selection),
	}
	shared := olcdOlcdPolicy{
		Flags:     uint8(olcdOlcdPolicyFlagOLCD_POLICY_EXEMPT),
		StatsSlot: uint16(olcdOlcdGeometryOLCD_SLOT_OTHER),
	}
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, errors.Join(fmt.Errorf("seed flow table: %w", err), d.objs.close())
	}
	d.rctl = olcdOlcdRespCtl{
		Seed:      binary.LittleEndian.Uint64(seed[:]) | 1, // odd: olcd_flow_hash multiplies by it
		SampleMax: sampleMax(cfg.ResponseSample),
		SetsMask:  flowSets(cfg) - 1,
		IdleUnits: uint32(cfg.FlowIdle.Nanoseconds() >> 20),
		HistSlots: respSlots(cfg),
	}
	if pinned != nil && pinned.adopted != nil {
		if err := d.adopt(); err != nil {
			return nil, errors.Join(fmt.Errorf("take over pinned datapath in %s: %w", cfg.PinDir, err), d.objs.close())
		}
		d.adopted = true
	}
	if err := errors.Join(
		d.writeRespControl(),
		d.writeControl(),
		d.writeRejectLimit(cfg.RejectRate, cfg.RejectBurst),
		d.initFair(),
		d.objs.OlcdPolicies.Update(d.exemptIndex(), &shared, ebpf.UpdateAny),
	); err != nil {
		return nil, errors.Join(fmt.Errorf("initialise datapath maps: %w", err), d.objs.close())
	}
	if pinned != nil && !d.adopted {
		if err := d.pinFresh(spec); err != nil {
			return nil, errors.Join(err, removePinDir(cfg.PinDir, log), d.objs.close())
		}
	}
	if pinned != nil && d.adopted && len(pinned.replaced()) > 0 {
		if err := d.pinRenewed(spec, pinned.replaced(), pinned.renewed); err != nil {
			return nil, errors.Join(fmt.Errorf("take over pinned datapath in %s: %w", cfg.PinDir, err), d.objs.close())
		}
		if len(pinned.carried) > 0 {
			carried.log(log, pinned.replaced())
		}
	}
	go d.foldLoop()
	log.Debug("datapath loaded", "max_ports", cfg.MaxPorts, "syn_table", cfg.SYNTableSize,
		"max_prefixes", cfg.MaxPrefixes, "stale_after", cfg.StaleAfter)
	return d, nil
}

// loadObjects loads spec into d.objs, with the maps pinned adopts in place
// of its own, and fills those it carries (carry). While a take-over loads
// and carries, the pinned heartbeat is renewed (bridge) and the verifier
// runs at takeOverNice: the pinned datapath protects meanwhile, and
// the verifier need not take the CPU of the service it protects.
func (d *Datapath) loadObjects(spec *ebpf.CollectionSpec, pinned *pins) (carryReport, error) {
	if pinned == nil || pinned.adopted == nil {
		var opts *ebpf.CollectionOptions
		if pinned != nil {
			opts = &ebpf.CollectionOptions{MapReplacements: pinned.adopted}
		}
		if err := spec.LoadAndAssign(&d.objs, opts); err != nil {
			return carryReport{}, loadError(err)
		}
		return carryReport{}, nil
	}
	defer pinned.bridge(spec, d.log)()
	opts := &ebpf.CollectionOptions{MapReplacements: pinned.adopted}
	if err := atTakeOverPriority(d.log, func() error { return spec.LoadAndAssign(&d.objs, opts) }); err != nil {
		return carryReport{}, loadError(err)
	}
	if len(pinned.carried) == 0 {
		return carryReport{}, nil
	}
	r, err := d.carry(pinned)
	if err != nil {
		return r, errors.Join(fmt.Errorf("take over pinned datapath in %s: %w", d.cfg.PinDir, err), d.objs.close())
	}
	return r, nil
}

// sizeMaps sets the map sizes from cfg and the number of possible CPUs;
// the sizes in bpf/maps.h and resp.h are placeholders.
func sizeMaps(spec *ebpf.CollectionSpec, cfg Config, ncpu int) {
	spec.Maps[olcdMapOlcdPolicies].MaxEntries = uint32(cfg.MaxPorts) + 2
	spec.Maps[olcdMapOlcdStats].MaxEntries = uint32(cfg.MaxPorts) + 1
	spec.Maps[olcdMapOlcdEven].MaxEntries = 1
	if cfg.Selection == SelectEven {
		spec.Maps[olcdMapOlcdEven].MaxEntries = uint32(cfg.MaxPorts) + 1
	}
	spec.Maps[olcdMapOlcdSyns].MaxEntries = synSets(cfg.SYNTableSize)
	spec.Maps[olcdMapOlcdExempt4].MaxEntries = uint32(cfg.MaxPrefixes)
	spec.Maps[olcdMapOlcdExempt6].MaxEntries = uint32(cfg.MaxPrefixes)
	spec.Maps[olcdMapOlcdRhist].MaxEntries = respSlots(cfg) * uint32(ncpu)
	spec.Maps[olcdMapOlcdFlows].MaxEntries = flowSets(cfg)
	sizeFairMaps(spec, cfg)
}

// synSets is the number of sets of the dropped-SYN table holding at least
// size SYNs: a power of two, so that a fingerprint picks a set with a mask.
func synSets(size int) uint32 {
	ways := int(olcdOlcdSynTableOLCD_SYN_WAYS)
	n := uint32(1)
	for int(n)*ways < size {
		n <<= 1
	}
	return n
}

// Open loads the datapath (see Load) and attaches it to every interface of
// cfg.Interfaces with cfg.Attach. On any error everything done so far is
// undone and the error names the interface and mode.
func Open(cfg Config, log *slog.Logger) (*Datapath, error) {
	d, err := Load(cfg, log)
	if err != nil {
		return nil, err
	}
	for _, iface := range d.cfg.Interfaces {
		if err := d.Attach(iface, d.cfg.Attach); err != nil {
			if d.adopted {
				// Leave the pinned datapath taken over as it was: its
				// old programs stay where the take-over failed.
				return nil, errors.Join(err, d.Release())
			}
			return nil, errors.Join(err, d.Close())
		}
	}
	return d, nil
}

// Close detaches every attachment (removing only the filters and qdiscs
// olcd created) and releases the programs and maps; with Config.PinDir it
// unpins them too (Release is the close that leaves them). It is safe to call more
// than once; later calls return nil. Errors from all steps are joined.
// Filters are removed in the network namespace they were attached in,
// whatever namespace Close runs in. The memory-mapped .bss map (port index,
// control record) is freed when Go's garbage collector releases the mapping,
// not at once.
func (d *Datapath) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.stop)
	var errs []error
	for i := len(d.attachments) - 1; i >= 0; i-- {
		errs = append(errs, d.attachments[i].detach(d.log))
	}
	d.attachments = nil
	d.mu.Unlock()
	<-d.done // the fold loop takes d.mu; wait for it outside
	errs = append(errs, d.objs.close())
	if d.cfg.PinDir != "" {
		// The programs are detached: the pinned maps go too.
		errs = append(errs, removePinDir(d.cfg.PinDir, d.log))
	}
	// Last: the next olcd may take the directory once it is gone.
	errs = append(errs, d.pinLock.Release())
	return errors.Join(errs...)
}

func (d *Datapath) checkOpen() error {
	if d.closed {
		return errors.New("datapath is closed")
	}
	return nil
}

// writeControl writes the control record whole. The shadow's Fresh and
// FreshJiffies stay 0, which clears the heartbeat verdict the program keeps
// there: it judges the new record (heartbeat, stale-after) from the next
// packet on (olcd_heartbeat_fresh in bpf/olcd.c).
func (d *Datapath) writeControl() error {
	if err := d.objs.OlcdCtl.Set(&d.ctl); err != nil {
		return fmt.Errorf("write control record: %w", err)
	}
	return nil
}

// writeRejectLimit writes the reject action's rate limit: rate replies per
// second and CPU (negative: none), burst replies at once.
func (d *Datapath) writeRejectLimit(rate, burst int) error {
	var c olcdOlcdRejectConf
	if rate > 0 {
		c.NsPerToken = uint64(time.Second) / uint64(rate)
		c.Burst = uint32(burst)
	}
	if err := d.objs.OlcdRej.Set(&c); err != nil {
		return fmt.Errorf("write reject limit: %w", err)
	}
	return nil
}

// SetRejectLimit changes the reject action's rate limit (see
// Config.RejectRate and RejectBurst; 0 takes the defaults). The buckets keep
// their tokens. Errors: a rate or burst out of range, a closed datapath.
func (d *Datapath) SetRejectLimit(rate, burst int) error {
	c, err := Config{RejectRate: rate, RejectBurst: burst}.withDefaults()
	if err != nil {
		return fmt.Errorf("set reject limit: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("set reject limit: %w", err)
	}
	d.cfg.RejectRate, d.cfg.RejectBurst = c.RejectRate, c.RejectBurst
	return d.writeRejectLimit(c.RejectRate, c.RejectBurst)
}
