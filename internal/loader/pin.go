package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/lock"
	"github.com/olcd/olcd/internal/olc"
)

// PinRoot is the bpffs directory under which the daemon pins its datapath,
// one directory per network namespace (DefaultPinDir), as LockDir holds one
// lock per namespace and interface.
const PinRoot = "/sys/fs/bpf/olcd"

// LayoutVersion is the layout constant written into the pinned layout map
// beside each map's fingerprint. It changes when the meaning of a map's
// contents changes without its sizes or BTF layout changing (a field
// reused for another unit, say): a datapath pinned by a build of another
// layout version is refused like one whose maps differ.
const LayoutVersion = 1

// FlowHashVersion is the version of the flow hash (olcd_flow_hash in
// bpf/parse.h), which places a flow in the flow table and picks the
// sampled flows: 1, the multiply-shift's high half (builds to 5587a68);
// 2, the same ended with murmur3's fmix64. It is pinned in the layout map
// under "flow_hash"; absent, as builds before it pinned it (a8acccb to
// 712d827 hashed with fmix64 already), it reads as 1, so a take-over from
// those renews the group for nothing but the timing in flight. A take-over across a change starts the
// response-timing maps afresh (flowGroup, renewable) instead of adopting
// them: a flow the old hash placed is never found by the new one, so each
// request in flight at the take-over would stay counted as waiting for the
// rest of the daemon's life (docs/datapath.md, "Take-over").
const FlowHashVersion = 2

// flowHashKey is the layout map's key of FlowHashVersion.
const flowHashKey = "flow_hash"

// flowGroup are the maps whose contents are the requests in flight, placed
// and counted by the flow hash: the flow table, the response counts and
// histograms (requests less answers less abandoned is the number in
// flight only over the same flows) and the flow table's counters.
var flowGroup = []string{olcdMapOlcdFlows, olcdMapOlcdRhist, olcdMapOlcdFstats}

// fairGroup are fair shedding's sketch and per-port state (fair share,
// total, debt, capped count): counts of the last epochs, read together.
var fairGroup = []string{olcdMapOlcdFairCm, olcdMapOlcdFairSlots}

// ceilGroup is the ceilings on requests in flight, which the daemon
// rewrites every tick while a law sheds (and a build before them lacks).
var ceilGroup = []string{olcdMapOlcdCeil}

// renewable are the map groups a take-over may start afresh where the
// pinned ones differ (their layout, or for flowGroup the flow hash),
// instead of refusing the start: they hold what the traffic of the last
// seconds left, so a new group costs that much (the timing of the
// requests in flight, the fair shares while they settle), where the other
// maps (policies, drop probabilities, heartbeat, exceptions) carry what
// the running daemon decided.
var renewable = [][]string{flowGroup, fairGroup, ceilGroup}

// groupOf is the renewable group holding map name, nil when none does.
func groupOf(name string) []string {
	for _, g := range renewable {
		if slices.Contains(g, name) {
			return g
		}
	}
	return nil
}

// layoutMapName is the pinned map holding the layout: map name (NUL
// padded, 16 bytes) → fingerprint, "version" → LayoutVersion and
// "flow_hash" → FlowHashVersion. bpffs
// holds no regular files, so the version is a map too. It is pinned last:
// a directory with it holds a complete datapath.
const layoutMapName = "olcd_layout"

// layoutKey is a key of the layout map.
type layoutKey [16]byte

func keyOf(name string) layoutKey {
	var k layoutKey
	copy(k[:], name)
	return k
}

// DefaultPinDir is the pin directory of the calling thread's network
// namespace: PinRoot/<netns inode>.
func DefaultPinDir() string {
	return filepath.Join(PinRoot, strconv.FormatUint(currentNetns(), 10))
}

// IncompatibleError says that a pinned datapath cannot be taken over: a map
// it pinned differs from what this build loads in more than its size (its
// type, key, value or layout). Nothing was changed; the
// pinned programs keep running (and fail open once their heartbeat is
// older than stale_after). `olcd detach` removes them.
type IncompatibleError struct {
	Dir  string // the pin directory
	Map  string // the map that differs
	What string // how it differs, e.g. "MaxEntries: 1026 changed to 2050"
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("pinned datapath in %s is incompatible with this olcd: map %s: %s; "+
		"remove it with `olcd detach` (the node is unprotected until olcd starts again), then start olcd", e.Dir, e.Map, e.What)
}

// pinName is the bpffs name of a map: bpffs refuses names with a dot.
func pinName(mapName string) string {
	return strings.TrimPrefix(strings.ReplaceAll(mapName, ".", "_"), "_")
}

// pinnedMaps are the maps of spec that carry the datapath's state and are
// pinned: all of them (the object has no .rodata or .data).
func pinnedMaps(spec *ebpf.CollectionSpec) []string {
	names := make([]string, 0, len(spec.Maps))
	for n := range spec.Maps {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// loadSpec is the spec of a map as the kernel will hold it: data sections
// are created memory-mappable.
func loadSpec(ms *ebpf.MapSpec) *ebpf.MapSpec {
	ms = ms.Copy()
	if ms.Name == ".bss" || strings.HasPrefix(ms.Name, ".data") {
		ms.Flags |= unix.BPF_F_MMAPABLE
	}
	return ms
}

// fingerprint hashes what a program assumes of a map: type, sizes, entries,
// flags and the BTF layout (member names, offsets, sizes) of key and value.
func fingerprint(ms *ebpf.MapSpec) uint64 {
	var b strings.Builder
	fmt.Fprintf(&b, "%s k%d v%d n%d f%#x ", ms.Type, ms.KeySize, ms.ValueSize, ms.MaxEntries, ms.Flags)
	btfLayout(&b, ms.Key, 0)
	b.WriteString(" = ")
	btfLayout(&b, ms.Value, 0)
	h := fnv.New64a()
	h.Write([]byte(b.String()))
	return h.Sum64()
}

// btfLayout writes t's memory layout; depth bounds the walk.
func btfLayout(b *strings.Builder, t btf.Type, depth int) {
	if t == nil || depth > 16 {
		b.WriteString("?")
		return
	}
	switch v := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		fmt.Fprintf(b, "struct%d{", v.Size)
		for _, m := range v.Members {
			fmt.Fprintf(b, "%s@%d:", m.Name, m.Offset)
			btfLayout(b, m.Type, depth+1)
			b.WriteString(";")
		}
		b.WriteString("}")
	case *btf.Union:
		fmt.Fprintf(b, "union%d{", v.Size)
		for _, m := range v.Members {
			fmt.Fprintf(b, "%s@%d:", m.Name, m.Offset)
			btfLayout(b, m.Type, depth+1)
			b.WriteString(";")
		}
		b.WriteString("}")
	case *btf.Array:
		fmt.Fprintf(b, "[%d]", v.Nelems)
		btfLayout(b, v.Type, depth+1)
	case *btf.Int:
		fmt.Fprintf(b, "i%d", v.Size)
	case *btf.Enum:
		fmt.Fprintf(b, "e%d", v.Size)
	case *btf.Pointer:
		b.WriteString("*")
	case *btf.Datasec:
		b.WriteString("sec{")
		for _, vs := range v.Vars {
			name := ""
			var vt btf.Type
			if bv, ok := vs.Type.(*btf.Var); ok {
				name, vt = bv.Name, bv.Type
			}
			fmt.Fprintf(b, "%s@%d+%d:", name, vs.Offset, vs.Size)
			btfLayout(b, vt, depth+1)
			b.WriteString(";")
		}
		b.WriteString("}")
	default:
		fmt.Fprintf(b, "%T", v)
	}
}

// pins is the pinned datapath of one Load: the directory and, when a
// complete one was found there, its maps to take over.
type pins struct {
	dir     string
	adopted map[string]*ebpf.Map // map name → pinned map, nil when starting fresh
	// renewed are the maps of a take-over that start afresh (renewable
	// groups that differ): loaded new, then pinned over the old ones
	// (pinRenewed).
	renewed []string
	// carried are the pinned maps of another size (a changed datapath
	// section) and, with them, the pinned .bss: loaded new at this
	// build's size, filled with what still fits (carry) and pinned over
	// the old ones like the renewed. The old programs keep the old maps,
	// .bss included, until Attach replaces them: neither sees the other's
	// sizes.
	carried map[string]*ebpf.Map
}

func (p *pins) close() {
	for _, m := range p.adopted {
		m.Close()
	}
	for _, m := range p.carried {
		m.Close()
	}
}

// bss is the pinned .bss (adopted or carried), nil when there is none.
func (p *pins) bss() *ebpf.Map {
	if m := p.carried[".bss"]; m != nil {
		return m
	}
	return p.adopted[".bss"]
}

// replaced are the maps a take-over loads new and pins over the old ones:
// the renewed and the carried, sorted.
func (p *pins) replaced() []string {
	out := slices.Clone(p.renewed)
	for name := range p.carried {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// bpffsMagic is BPF_FS_MAGIC.
const bpffsMagic = 0xcafe4a11

// ensureBPFFS mounts bpffs on root when root is not on one (systemd mounts
// /sys/fs/bpf; a container or a bare system may not), and creates dir.
func ensureBPFFS(dir string) error {
	root := filepath.Dir(filepath.Clean(dir))
	for r := root; ; r = filepath.Dir(r) {
		var st unix.Statfs_t
		if err := unix.Statfs(r, &st); err == nil {
			if st.Type == bpffsMagic {
				return os.MkdirAll(dir, 0o700)
			}
			break
		}
		if r == filepath.Dir(r) {
			break
		}
	}
	// The nearest existing ancestor is not bpffs: mount one where the
	// pins go (PinRoot's parent, /sys/fs/bpf, by default).
	mnt := filepath.Dir(root)
	if root == PinRoot || filepath.Dir(dir) == PinRoot {
		mnt = filepath.Dir(PinRoot)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil || st.Type != bpffsMagic {
		if err := unix.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount bpffs on %s (pins need it): %w", mnt, err)
		}
	}
	return os.MkdirAll(dir, 0o700)
}

// openPins looks in dir for a pinned datapath. A complete one (its layout
// map present) whose layout matches spec's is returned with its maps, to
// be taken over: those of another size alone to be carried (pins.carried),
// the renewable groups that differ to start afresh (pins.renewed); any
// other difference is refused (*IncompatibleError). A partial one (a start
// that died before pinning its layout) is removed.
func openPins(dir string, spec *ebpf.CollectionSpec, log *slog.Logger) (*pins, error) {
	if err := ensureBPFFS(dir); err != nil {
		return nil, fmt.Errorf("pin directory %s: %w", dir, err)
	}
	p := &pins{dir: dir}
	layout, err := ebpf.LoadPinnedMap(filepath.Join(dir, layoutMapName), nil)
	if errors.Is(err, fs.ErrNotExist) {
		if err := removePinDir(dir, log); err != nil {
			return nil, err
		}
		return p, os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		return nil, fmt.Errorf("open pinned layout in %s: %w", dir, err)
	}
	defer layout.Close()
	// A start that died between pinning a renewed map and renaming it
	// (pinAt) left it under its temporary name.
	if stale, _ := filepath.Glob(filepath.Join(dir, "*"+renewSuffix)); len(stale) > 0 {
		for _, path := range stale {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("remove stale pin %s: %w", path, err)
			}
		}
	}
	var ver uint64
	if err := layout.Lookup(keyOf("version"), &ver); err != nil {
		return nil, &IncompatibleError{Dir: dir, Map: layoutMapName, What: fmt.Sprintf("no layout version (%v)", err)}
	}
	if ver != LayoutVersion {
		return nil, &IncompatibleError{Dir: dir, Map: layoutMapName, What: fmt.Sprintf("layout version %d, this build has %d", ver, LayoutVersion)}
	}
	hash := uint64(1)
	if err := layout.Lookup(keyOf(flowHashKey), &hash); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, fmt.Errorf("read pinned flow hash version in %s: %w", dir, err)
	}
	if hash != FlowHashVersion {
		p.renewed = append(p.renewed, flowGroup...)
		log.Info("the pinned flow table is placed by another flow hash: response timing starts afresh, the requests in flight now are not timed",
			"pinned", hash, "this_build", FlowHashVersion, "maps", strings.Join(flowGroup, ","))
	}
	p.adopted = make(map[string]*ebpf.Map)
	p.carried = make(map[string]*ebpf.Map)
	resized := false
	for _, name := range pinnedMaps(spec) {
		if slices.Contains(p.renewed, name) {
			continue
		}
		m, other, err := openPinned(dir, layout, spec, name)
		var inc *IncompatibleError
		if g := groupOf(name); g != nil && (err == nil && other || errors.As(err, &inc)) {
			what := "max entries differ"
			if err != nil {
				what = inc.What
			}
			if m != nil {
				m.Close()
			}
			resized = resized || other
			for _, n := range g {
				if a := p.adopted[n]; a != nil {
					a.Close()
					delete(p.adopted, n)
				}
			}
			p.renewed = append(p.renewed, g...)
			log.Info("a pinned map differs from this build's and holds only recent traffic: its group starts afresh",
				"map", name, "difference", what, "maps", strings.Join(g, ","))
			continue
		}
		if err != nil {
			p.close()
			return nil, err
		}
		if other {
			p.carried[name] = m
			resized = true
			continue
		}
		p.adopted[name] = m
	}
	// A size sits in the .bss too (the SYN table's mask, the histogram
	// slots, the sketch's width, the exception ports' shared policy): the
	// old programs keep reading theirs until Attach replaces them.
	if bss := p.adopted[".bss"]; resized && bss != nil {
		delete(p.adopted, ".bss")
		p.carried[".bss"] = bss
	}
	return p, nil
}

// openPinned opens the pinned map name in dir and checks it against spec
// and the fingerprint the layout map holds for it (*IncompatibleError
// when it differs otherwise or is not pinned). other says that its max
// entries differ (a datapath section sized it otherwise); without an error
// that is all (the same type, key, value, flags and layout), and m is the
// pinned map, to be carried.
func openPinned(dir string, layout *ebpf.Map, spec *ebpf.CollectionSpec, name string) (m *ebpf.Map, other bool, err error) {
	ms := loadSpec(spec.Maps[name])
	m, err = ebpf.LoadPinnedMap(filepath.Join(dir, pinName(name)), nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, &IncompatibleError{Dir: dir, Map: name, What: "not pinned (a build without it pinned the datapath)"}
	}
	if err != nil {
		return nil, false, fmt.Errorf("open pinned map %s in %s: %w", name, dir, err)
	}
	at := ms
	if other = m.MaxEntries() != ms.MaxEntries; other {
		at = ms.Copy()
		at.MaxEntries = m.MaxEntries()
	}
	if err := at.Compatible(m); err != nil {
		m.Close()
		return nil, other, &IncompatibleError{Dir: dir, Map: name, What: strings.TrimSuffix(err.Error(), ": "+ebpf.ErrMapIncompatible.Error())}
	}
	var fp uint64
	if err := layout.Lookup(keyOf(name), &fp); err != nil {
		m.Close()
		return nil, other, &IncompatibleError{Dir: dir, Map: name, What: "no fingerprint in the layout"}
	}
	// Of another size under this build's own fingerprint: a take-over
	// killed before it replaced the map (pinRenewed) wrote it; the map is
	// one it was carrying, of the same layout.
	if want := fingerprint(at); fp != want && !(other && fp == fingerprint(ms)) {
		m.Close()
		return nil, other, &IncompatibleError{Dir: dir, Map: name, What: fmt.Sprintf("key or value layout differs (fingerprint %#x pinned, %#x in this build)", fp, want)}
	}
	return m, other, nil
}

// pinFresh pins every map of a freshly loaded datapath, then the layout map
// that makes the directory complete.
func (d *Datapath) pinFresh(spec *ebpf.CollectionSpec) error {
	for _, name := range pinnedMaps(spec) {
		if err := d.pinMap(name, false); err != nil {
			return err
		}
	}
	return pinLayout(d.cfg.PinDir, spec, false, nil)
}

// pinRenewed pins the maps a take-over loads new over the old ones (names:
// the renewed groups, renewed, and the maps of another size it carries,
// with the .bss). Each replacement is a rename, so the directory is
// complete at every moment, and the layout map is replaced twice around
// them: first without the renewed maps' fingerprints and with this build's
// for the carried ones, last with this build's for all. A start that dies
// in between leaves renewed maps the next one finds no fingerprint for, so
// it renews them again rather than adopt a map of another layout under the
// old fingerprint; and carried maps it takes at either size (openPinned: a
// map not yet replaced is of the old size under the new size's
// fingerprint), where without their fingerprints every later start refused
// the directory. (The old programs use the old maps until Attach replaces
// them; either group holds only recent traffic.)
func (d *Datapath) pinRenewed(spec *ebpf.CollectionSpec, names, renewed []string) error {
	if err := pinLayout(d.cfg.PinDir, spec, true, renewed); err != nil {
		return err
	}
	if err := interruptRenew(0); err != nil {
		return err
	}
	for i, name := range names {
		if err := d.pinMap(name, true); err != nil {
			return err
		}
		if err := interruptRenew(i + 1); err != nil {
			return err
		}
	}
	return pinLayout(d.cfg.PinDir, spec, true, nil)
}

// interruptRenew is called after each step of pinRenewed (0: the first
// layout, i: the i-th map pinned); tests make it fail to stop a take-over
// there, as a start killed partway would.
var interruptRenew = func(int) error { return nil }

// pinMap pins the map name of d; replace pins it beside the existing pin
// and renames it over that one (bpffs refuses to pin over a name).
func (d *Datapath) pinMap(name string, replace bool) error {
	m := d.objs.byName(name)
	if m == nil {
		return fmt.Errorf("pin map %s: not loaded", name)
	}
	return pinAt(m, filepath.Join(d.cfg.PinDir, pinName(name)), replace)
}

// renewSuffix names a pin while it waits for its rename (pinAt).
const renewSuffix = "_new"

// pinAt pins m at path; with replace through a temporary name renamed over
// path (m's own record of its pin is then the temporary name: the loader
// unpins by directory, removePinDir).
func pinAt(m *ebpf.Map, path string, replace bool) error {
	if !replace {
		if err := m.Pin(path); err != nil {
			return fmt.Errorf("pin %s: %w", path, err)
		}
		return nil
	}
	tmp := path + renewSuffix // openPins removed any a dead start left
	if err := m.Pin(tmp); err != nil {
		return fmt.Errorf("pin %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("replace pin %s: %w", path, err), m.Unpin())
	}
	return nil
}

// pinLayout writes the layout of spec, but the fingerprints of the maps in
// without, into a new layout map and pins it in dir (replace: over the
// existing one).
func pinLayout(dir string, spec *ebpf.CollectionSpec, replace bool, without []string) error {
	layout, err := ebpf.NewMap(&ebpf.MapSpec{Name: layoutMapName, Type: ebpf.Hash, KeySize: 16, ValueSize: 8,
		MaxEntries: uint32(len(spec.Maps) + 2)})
	if err != nil {
		return fmt.Errorf("create layout map: %w", err)
	}
	defer layout.Close()
	if err := layout.Update(keyOf("version"), uint64(LayoutVersion), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write layout version: %w", err)
	}
	if err := layout.Update(keyOf(flowHashKey), uint64(FlowHashVersion), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write flow hash version: %w", err)
	}
	for _, name := range pinnedMaps(spec) {
		if slices.Contains(without, name) {
			continue
		}
		if err := layout.Update(keyOf(name), fingerprint(loadSpec(spec.Maps[name])), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write layout of %s: %w", name, err)
		}
	}
	if err := pinAt(layout, filepath.Join(dir, layoutMapName), replace); err != nil {
		return fmt.Errorf("pin layout in %s: %w", dir, err)
	}
	return nil
}

// linkPin is the pin path of an attachment's link:
// link_<hook>_<mode>_<ifindex> (hook tc, tc_egress or xdp; mode tcx,
// native or generic).
func linkPin(dir, hook, mode string, ifindex int) string {
	return filepath.Join(dir, fmt.Sprintf("link_%s_%s_%d", strings.ReplaceAll(hook, "-", "_"), mode, ifindex))
}

// removePinDir unpins everything in dir and removes it. Unpinning a link
// whose last holder is gone detaches its program; unpinning a map frees it
// once no program uses it.
func removePinDir(dir string, log *slog.Logger) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pin directory %s: %w", dir, err)
	}
	var errs []error
	// Links first: the programs go before the maps they read.
	slices.SortStableFunc(ents, func(a, b os.DirEntry) int {
		return b2i(!strings.HasPrefix(a.Name(), "link_")) - b2i(!strings.HasPrefix(b.Name(), "link_"))
	})
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unpin %s: %w", path, err))
			continue
		}
		log.Debug("unpinned", "path", path)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove pin directory %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// adopt rebuilds the loader's shadows from the maps of a datapath taken
// over: the control record's mode, heartbeat and seeds, the port index and
// every port's policy (slot, mode, action, class, drop probability), the
// exceptions, and the timed ports. Nothing is written here: Load rewrites
// the control records from the taken-over values and the new Config, the
// same values where they did not change.
func (d *Datapath) adopt() error {
	var old olcdOlcdControl
	if err := d.objs.OlcdCtl.Get(&old); err != nil {
		return fmt.Errorf("read pinned control record: %w", err)
	}
	d.ctl.Mode, d.ctl.HeartbeatNs = old.Mode, old.HeartbeatNs
	d.ctl.SynSeed = old.SynSeed // the dropped-SYN table's fingerprints use it
	d.ctl.Prefixes4, d.ctl.Prefixes6 = old.Prefixes4, old.Prefixes6
	// A heartbeat older than its stale-after: the datapath has failed
	// open, and the drop probabilities in it are no longer in force.
	now, err := monotonicNow()
	fresh := err == nil && old.HeartbeatNs != 0 && int64(now-old.HeartbeatNs) <= int64(old.StaleAfterNs)
	d.adoptedFresh = fresh
	var rctl olcdOlcdRespCtl
	if err := d.objs.OlcdRctl.Get(&rctl); err != nil {
		return fmt.Errorf("read pinned response control: %w", err)
	}
	if rctl.Seed != 0 {
		d.rctl.Seed = rctl.Seed // the flow table's hash uses it
	}
	if err := d.adoptPorts(fresh); err != nil {
		return err
	}
	for _, m := range []*ebpf.Map{d.objs.OlcdExempt4, d.objs.OlcdExempt6} {
		it := m.Iterate()
		var key []byte
		var val uint8
		for it.Next(&key, &val) {
			if p, ok := prefixOf(key); ok {
				d.prefixes[p] = true
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("read pinned source prefixes: %w", err)
		}
	}
	if d.cfg.ResponseSample != 0 {
		if err := d.adoptTimed(); err != nil {
			return err
		}
	}
	// Counters and histograms: from here on, as if the slots were new.
	for k, slot := range d.slots {
		if err := d.stats.setKind(slot, policyKind(d.ctl.Mode, cMode(d.policies[k].Mode), d.policies[k].Action, k.Proto)); err != nil {
			return err
		}
	}
	if err := d.stats.baseline(d.slotList()); err != nil {
		return err
	}
	if d.cfg.ResponseSample != 0 {
		if err := d.resp.baseline(d.respSlotList()); err != nil {
			return err
		}
	}
	return nil
}

// adoptPorts rebuilds the port index's shadow, the slots and the
// policies from the pinned maps; fresh says their drop probabilities were
// in force.
func (d *Datapath) adoptPorts(fresh bool) error {
	if err := d.objs.OlcdPorts.Get(d.index); err != nil {
		return fmt.Errorf("read pinned port index: %w", err)
	}
	used := map[uint16]bool{}
	for pi, proto := range []olc.Proto{olc.ProtoTCP, olc.ProtoUDP} {
		if pi != protoIndex(proto) {
			return fmt.Errorf("port index: protocol order changed")
		}
		for port, idx := range d.index.Idx[pi] {
			if idx == 0 {
				continue
			}
			k := olc.PortKey{Proto: proto, Port: uint16(port)}
			if uint32(idx) == d.exemptIndex() {
				d.exempt[k] = true
				continue
			}
			if int(idx) > d.cfg.MaxPorts || used[idx] {
				return fmt.Errorf("pinned port index: port %s has slot %d (max ports %d, or shared)", k, idx, d.cfg.MaxPorts)
			}
			var v olcdOlcdPolicy
			if err := d.objs.OlcdPolicies.Lookup(uint32(idx), &v); err != nil {
				return fmt.Errorf("read pinned policy of port %s: %w", k, err)
			}
			used[idx] = true
			d.slots[k] = idx
			p := FixedToProbability(v.DropProb)
			if !fresh {
				p = 0
			}
			d.policies[k] = PortPolicy{Key: k, Mode: olc.Mode(v.Mode), Action: olc.Action(v.Action), Class: olc.Class(v.Class),
				DropProbability: p, Retransmits: pinnedRetransmits(v.ShedRetransmits), RequestGate: v.RequestGate != 0,
				Fair: v.Fair != 0, FairPrefix4: int(v.FairPrefix4), FairPrefix6: int(v.FairPrefix6)}
			if v.Flags&uint8(olcdOlcdPolicyFlagOLCD_POLICY_EXEMPT) != 0 {
				d.exempt[k] = true
			}
		}
	}
	d.free = d.free[:0]
	for i := d.cfg.MaxPorts; i >= 1; i-- {
		if !used[uint16(i)] {
			d.free = append(d.free, uint16(i))
		}
	}
	return nil
}

// adoptTimed rebuilds the timed ports' shadow from the pinned index.
func (d *Datapath) adoptTimed() error {
	if err := d.objs.OlcdRports.Get(d.rports); err != nil {
		return fmt.Errorf("read pinned timed-port index: %w", err)
	}
	rused := map[uint16]bool{}
	for pi, proto := range []olc.Proto{olc.ProtoTCP, olc.ProtoUDP} {
		for port, slot := range d.rports.Slot[pi] {
			if slot == 0 {
				continue
			}
			if uint32(slot) >= respSlots(d.cfg) || rused[slot] {
				return fmt.Errorf("pinned timed-port index: slot %d out of range or shared", slot)
			}
			rused[slot] = true
			d.rslots[olc.PortKey{Proto: proto, Port: uint16(port)}] = slot
		}
	}
	d.rfree = d.rfree[:0]
	for i := d.cfg.ResponsePorts; i >= 1; i-- {
		if !rused[uint16(i)] {
			d.rfree = append(d.rfree, uint16(i))
		}
	}
	return nil
}

// prefixOf decodes an LPM trie key (prefix length, little-endian, then the
// address).
func prefixOf(key []byte) (netip.Prefix, bool) {
	if len(key) != 8 && len(key) != 20 {
		return netip.Prefix{}, false
	}
	bits := int(key[0]) | int(key[1])<<8 | int(key[2])<<16 | int(key[3])<<24
	var addr netip.Addr
	if len(key) == 8 {
		addr = netip.AddrFrom4([4]byte(key[4:8]))
	} else {
		addr = netip.AddrFrom16([16]byte(key[4:20]))
	}
	return netip.PrefixFrom(addr, bits), true
}

// linkUpdate replaces the program of a taken-over link; tests replace it
// to inject a failed update.
var linkUpdate = func(l link.Link, p *ebpf.Program) error { return l.Update(p) }

// ingressPins are the (hook, mode) pairs a pinned ingress link can have.
var ingressPins = [][2]string{{"tc", "tcx"}, {"xdp", "native"}, {"xdp", "generic"}}

// wantedPins are the pinned ingress links an attach mode takes over.
func wantedPins(mode olc.AttachMode, noTCX bool) [][2]string {
	switch mode {
	case olc.AttachAuto, olc.AttachTC:
		if noTCX {
			return nil
		}
		return ingressPins[:1]
	case olc.AttachXDP:
		return ingressPins[1:]
	case olc.AttachXDPNative:
		return ingressPins[1:2]
	case olc.AttachXDPGeneric:
		return ingressPins[2:]
	}
	return nil
}

// takeOver replaces the program of the pinned link (tcx or XDP) of hook and
// mode on the interface ifindex with prog, atomically: packets meet the old
// program or the new one, never none. It returns nil, nil when no such link
// is pinned. A failed replacement leaves the old program attached.
func (d *Datapath) takeOver(hook, mode, iface string, ifindex int, prog *ebpf.Program) (*attachment, error) {
	path := linkPin(d.cfg.PinDir, hook, mode, ifindex)
	lk, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("take over %s (%s) on %s: open pinned link %s: %w", hook, mode, iface, path, err)
	}
	if err := linkUpdate(lk, prog); err != nil {
		lk.Close()
		return nil, fmt.Errorf("take over %s (%s) on %s: replace the program of pinned link %s (the old program stays): %w", hook, mode, iface, path, err)
	}
	d.log.Info("took over a pinned attachment", "interface", iface, "hook", hook, "mode", mode)
	return &attachment{Attachment: Attachment{Interface: iface, Hook: hook, Mode: mode, Ifindex: ifindex}, link: lk, pinned: path}, nil
}

// unpinOthers removes the pinned ingress links of an interface that the
// attach mode does not take over (a config that changed the hook): their
// programs are detached before the new one is attached, so the two never
// both shed. Each is detached through its link before it is unpinned: the
// kernel frees an unpinned link in a work item, later, and until then its
// program stays attached, where the new attach's check for another olcd
// finds it and refuses to start (a restart from tc to xdp on a busy node
// did: "another olcd is attached (tcx program olcd_tc …)").
func (d *Datapath) unpinOthers(ifindex int, keep [][2]string) error {
	for _, hm := range ingressPins {
		if slices.Contains(keep, hm) {
			continue
		}
		path := linkPin(d.cfg.PinDir, hm[0], hm[1], ifindex)
		lk, err := link.LoadPinnedLink(path, nil)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = lk.Detach()
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				err = nil // no BPF_LINK_DETACH: the close below frees it
			}
			if err == nil {
				err = lk.Unpin()
			}
			err = errors.Join(err, lk.Close())
		}
		if err != nil {
			return fmt.Errorf("unpin %s: %w", path, err)
		}
		d.log.Info("removed a pinned attachment of another hook", "ifindex", ifindex, "hook", hm[0], "mode", hm[1])
	}
	return nil
}

// takeOverIngress takes over the pinned ingress attachment of l that mode
// allows: a tcx or XDP link whose program it replaces, or (tc modes) an
// olcd clsact filter it replaces with netlink's change. Pinned links of
// another hook are removed first. It returns nil, nil when there is nothing
// to take over.
func (d *Datapath) takeOverIngress(nl *netlink.Handle, l netlink.Link, mode olc.AttachMode, noTCX bool) (*attachment, error) {
	name, idx := l.Attrs().Name, l.Attrs().Index
	for _, hm := range wantedPins(mode, noTCX) {
		prog := d.objs.OlcdTc
		if hm[0] == "xdp" {
			prog = d.objs.OlcdXdp
		}
		a, err := d.takeOver(hm[0], hm[1], name, idx, prog)
		if err != nil {
			return nil, err
		}
		if a != nil {
			a.takenOver = true
			return a, d.unpinOthers(idx, [][2]string{hm})
		}
	}
	if err := d.unpinOthers(idx, nil); err != nil {
		return nil, err
	}
	if (mode != olc.AttachAuto && mode != olc.AttachTC) || !d.adopted {
		// A filter beside fresh maps is a killed olcd's leftover, whose
		// program reads other maps: removeLeftovers takes it.
		return nil, nil
	}
	return d.takeOverFilter(nl, l, d.objs.OlcdTc, netlink.HANDLE_MIN_INGRESS, filterName, "tc")
}

// takeOverFilter replaces the program of the olcd clsact filter named fname
// under parent with prog (RTM_NEWTFILTER with NLM_F_REPLACE on the filter's
// own priority and handle: the kernel swaps the program of the one filter).
// nil, nil when there is no such filter.
func (d *Datapath) takeOverFilter(nl *netlink.Handle, l netlink.Link, prog *ebpf.Program, parent uint32, fname, hook string) (*attachment, error) {
	name, idx := l.Attrs().Name, l.Attrs().Index
	has, err := hasClsact(nl, l)
	if err != nil || !has {
		return nil, err
	}
	old, err := findFilterAt(nl, l, parent, func(f *netlink.BpfFilter) bool { return f.Name == fname })
	if err != nil || old == nil {
		return nil, err
	}
	f := &netlink.BpfFilter{FilterAttrs: old.FilterAttrs, Fd: prog.FD(), Name: fname, DirectAction: true}
	if err := filterReplace(nl, f); err != nil {
		return nil, fmt.Errorf("take over %s (clsact) on %s: replace the program of filter %q (the old program stays): %w", hook, name, fname, err)
	}
	id, err := progID(prog)
	if err != nil {
		return nil, err
	}
	a := &attachment{Attachment: Attachment{Interface: name, Hook: hook, Mode: "clsact", Ifindex: idx}, nl: nl,
		takenOver: true, createdQdisc: true}
	if a.filter, err = findFilterAt(nl, l, parent, func(f *netlink.BpfFilter) bool {
		return f.Name == fname && f.Id == int(id)
	}); err != nil || a.filter == nil {
		return nil, errors.Join(fmt.Errorf("take over %s (clsact) on %s: the replaced filter is not listed", hook, name), err)
	}
	d.log.Info("took over a clsact filter", "interface", name, "hook", hook, "filter", fname)
	return a, nil
}

// filterReplace is netlink's filter replacement; tests replace it to
// inject a failure.
var filterReplace = func(nl *netlink.Handle, f netlink.Filter) error { return nl.FilterReplace(f) }

// attachOrTakeOverEgress takes over the pinned egress attachment of l, or
// attaches the egress program afresh and pins it.
func (d *Datapath) attachOrTakeOverEgress(nl *netlink.Handle, l netlink.Link, noTCX bool) (*attachment, error) {
	if d.cfg.PinDir != "" {
		name, idx := l.Attrs().Name, l.Attrs().Index
		if !noTCX {
			a, err := d.takeOver("tc-egress", "tcx", name, idx, d.objs.OlcdTcEgress)
			if err != nil || a != nil {
				return a, err
			}
		}
		if d.adopted {
			a, err := d.takeOverFilter(nl, l, d.objs.OlcdTcEgress, netlink.HANDLE_MIN_EGRESS, egressFilterName, "tc-egress")
			if err != nil || a != nil {
				return a, err
			}
		}
	}
	e, err := d.attachEgress(nl, l, noTCX)
	if err != nil {
		return nil, err
	}
	if err := d.pinLink(e); err != nil {
		return nil, errors.Join(err, e.detach(d.log))
	}
	return e, nil
}

// removePinnedEgress removes a pinned egress attachment of l: response
// timing is off in this Datapath, on in the one that pinned it.
func (d *Datapath) removePinnedEgress(nl *netlink.Handle, l netlink.Link) error {
	path := linkPin(d.cfg.PinDir, "tc-egress", "tcx", l.Attrs().Index)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	return nil // a clsact egress filter is a leftover removeLeftovers takes
}

// AdoptedFresh reports whether the datapath taken over still had a fresh
// heartbeat: its drop probabilities were in force (Policies has them).
func (d *Datapath) AdoptedFresh() bool { return d.adoptedFresh }

// Adopted reports whether Load took over a pinned datapath (Config.PinDir):
// its maps, with the policies, drop probabilities, mode and heartbeat the
// previous olcd left, are the ones this Datapath writes.
func (d *Datapath) Adopted() bool { return d.adopted }

// Policies returns the port policies in force (after a take-over: those
// the previous olcd wrote, with their drop probabilities; 0 when its
// heartbeat had gone stale, since the datapath then passed everything), in
// port order.
func (d *Datapath) Policies() []PortPolicy {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]PortPolicy, 0, len(d.policies))
	for _, k := range sortedKeys(d.policies) {
		out = append(out, d.policies[k])
	}
	return out
}

// Release lets go of the datapath without detaching it: with Config.PinDir
// the programs stay attached through their pinned links (and clsact
// filters), the maps stay pinned, and the next Datapath loaded with the
// same PinDir takes them over. The heartbeat is no longer written: after
// Config.StaleAfter the programs pass everything (fail open) until a new
// olcd writes it. Without PinDir it is Close. Safe to call more than once,
// and after Close.
func (d *Datapath) Release() error {
	if d.cfg.PinDir == "" {
		return d.Close()
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.stop)
	var errs []error
	for i := len(d.attachments) - 1; i >= 0; i-- {
		errs = append(errs, d.attachments[i].release())
	}
	d.attachments = nil
	d.mu.Unlock()
	<-d.done
	errs = append(errs, d.objs.close())
	// Last: from here the next olcd may take the pinned datapath over.
	errs = append(errs, d.pinLock.Release())
	d.log.Info("datapath released: it stays attached and pinned", "pin_dir", d.cfg.PinDir)
	return errors.Join(errs...)
}

// release closes what the attachment holds in this process (link file
// descriptors, the netlink handle, the lock) and leaves it attached.
func (a *attachment) release() error {
	var errs []error
	if a.egress != nil {
		a.egress.sharedNL = true // a's handle, closed below
		errs = append(errs, a.egress.release())
	}
	if a.link != nil {
		// A pinned link stays attached; one not pinned detaches, as it
		// would have when the process exited.
		errs = append(errs, a.link.Close())
	}
	if a.nl != nil && !a.sharedNL {
		a.nl.Close()
	}
	errs = append(errs, a.lock.Release())
	return errors.Join(errs...)
}

// RemovePinned detaches and removes a datapath pinned in dir that no olcd
// runs any more (the explicit detach, `olcd detach`): it unpins the links
// (which detaches their programs), deletes olcd's clsact filters on every
// interface of the calling thread's network namespace, and unpins the maps
// and the layout. It returns what it removed, one line each.
//
// It leaves nothing of its own behind: the attach locks it took to make
// sure no olcd runs here go when it releases them, with those a killed olcd
// of this namespace left (of interfaces gone since too); LockDir, which
// taking them creates, is removed when no lock is left in it, and PinRoot
// when no namespace's pins are left in it. Locks of other network
// namespaces are never touched: their olcds may be running.
//
// Errors: an olcd still runs here (it holds the pin directory's lock, or
// an interface's: stop it first), or an unpin or filter deletion failed
// (the others are still done).
func RemovePinned(dir string, log *slog.Logger) ([]string, error) {
	return removePinned(dir, LockDir, log)
}

// removePinned is RemovePinned with the attach locks in lockDir.
func removePinned(dir, lockDir string, log *slog.Logger) (done []string, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("detach: netlink: %w", err)
	}
	defer nl.Close()
	var links []netlink.Link
	if err := RetryDump(func() (err error) { links, err = nl.LinkList(); return err }); err != nil {
		return nil, fmt.Errorf("detach: list interfaces: %w", err)
	}
	ns := currentNetns()
	var locks []*lockRelease
	defer func() {
		for _, l := range locks {
			l.release()
		}
		// Taking the locks made lockDir if it was missing: with no lock
		// (nor socket) left in it, it goes. Only an empty one: Remove
		// refuses a directory where another namespace's olcd keeps its
		// lock.
		_ = os.Remove(lockDir)
		if filepath.Dir(filepath.Clean(dir)) == PinRoot {
			_ = os.Remove(PinRoot) // empty: no namespace's pins left
		}
	}()
	// An olcd that is still loading holds the pin directory's lock and
	// none of the interfaces' yet.
	pl, err := lockTry(pinLockPath(lockDir, dir))
	if err != nil {
		return nil, fmt.Errorf("detach: %w", err)
	}
	locks = append(locks, pl)
	held := map[string]bool{}
	for _, l := range links {
		path := lockPathIn(lockDir, ns, l.Attrs().Index)
		lk, err := lockTry(path)
		if err != nil {
			return nil, fmt.Errorf("detach: %s: %w", l.Attrs().Name, err)
		}
		locks = append(locks, lk)
		held[path] = true
	}
	// The lock files a killed olcd of this namespace left for interfaces
	// that are gone: taken like the others (a held one means an olcd still
	// runs here), then released, which removes them.
	stale, _ := filepath.Glob(lockGlobIn(lockDir, ns))
	for _, path := range stale {
		if held[path] {
			continue
		}
		lk, err := lockTry(path)
		if err != nil {
			return nil, fmt.Errorf("detach: %w", err)
		}
		locks = append(locks, lk)
	}
	var errs []error
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("detach: read %s: %w", dir, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "link_") {
			path := filepath.Join(dir, e.Name())
			if err := os.Remove(path); err != nil {
				errs = append(errs, fmt.Errorf("detach: unpin %s: %w", path, err))
				continue
			}
			done = append(done, "detached and unpinned "+path)
		}
	}
	for _, l := range links {
		has, err := hasClsact(nl, l)
		if err != nil || !has {
			errs = append(errs, err)
			continue
		}
		for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
			fs, err := listFilters(nl, l, parent)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, f := range fs {
				bf, ok := f.(*netlink.BpfFilter)
				if !ok || !strings.HasPrefix(bf.Name, FilterPrefix) || bf.Handle == 0 {
					continue
				}
				if err := nl.FilterDel(bf); err != nil && !gone(err) {
					errs = append(errs, fmt.Errorf("detach: delete filter %q on %s: %w", bf.Name, l.Attrs().Name, err))
					continue
				}
				done = append(done, fmt.Sprintf("deleted clsact filter %s (program id %d) on %s", bf.Name, bf.Id, l.Attrs().Name))
			}
		}
	}
	if len(ents) > 0 {
		if err := removePinDir(dir, log); err != nil {
			errs = append(errs, err)
		} else {
			done = append(done, "unpinned the maps and removed "+dir)
		}
	}
	return done, errors.Join(errs...)
}

// lockRelease is an attach lock RemovePinned holds while it removes.
type lockRelease struct{ f interface{ Release() error } }

func (l *lockRelease) release() { _ = l.f.Release() }

// lockTry takes the attach lock at path, or says which olcd holds it.
func lockTry(path string) (*lockRelease, error) {
	f, err := lock.TryExclusive(path)
	if errors.Is(err, lock.ErrLocked) {
		if pid := lock.Holder(path); pid != 0 {
			return nil, fmt.Errorf("an olcd is running here (pid %d holds %s): stop it first", pid, path)
		}
		return nil, fmt.Errorf("an olcd is running here (it holds %s): stop it first", path)
	}
	if err != nil {
		return nil, err
	}
	return &lockRelease{f: f}, nil
}

// bridge renews the heartbeat of a pinned datapath being taken over while
// the new one loads (the verifier takes 1–2 s, longer on a busy node): the
// old daemon's drop probabilities stay in force because a live olcd now
// stands behind them, as long as this process runs; if it dies or fails to
// take over, the renewals stop and the datapath fails open after
// stale_after, as it would have. A heartbeat already stale is left stale:
// a datapath that failed open stays open. stop ends the renewals and waits.
func (p *pins) bridge(spec *ebpf.CollectionSpec, log *slog.Logger) (stop func()) {
	m := p.bss()
	v := spec.Variables["olcd_ctl"]
	if m == nil || v == nil || v.SectionName != ".bss" {
		return func() {}
	}
	mem, err := m.Memory()
	if err != nil {
		log.Debug("no heartbeat bridge: the pinned .bss is not mapped", "err", err)
		return func() {}
	}
	off := int64(v.Offset)
	hbOff := off + int64(unsafe.Offsetof(olcdOlcdControl{}.HeartbeatNs))
	saOff := off + int64(unsafe.Offsetof(olcdOlcdControl{}.StaleAfterNs))
	read := func(at int64) uint64 {
		var b [8]byte
		if _, err := mem.ReadAt(b[:], at); err != nil {
			return 0
		}
		return binary.NativeEndian.Uint64(b[:])
	}
	renew := func() bool {
		now, err := monotonicNow()
		hb, sa := read(hbOff), read(saOff)
		if err != nil || hb == 0 || int64(now-hb) > int64(sa) {
			return false
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], now)
		_, err = mem.WriteAt(b[:], hbOff)
		return err == nil
	}
	if !renew() {
		return func() {}
	}
	every := time.Duration(read(saOff)) / 4
	if every <= 0 || every > time.Second {
		every = time.Second
	}
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if !renew() {
					return
				}
			}
		}
	}()
	log.Debug("renewing the pinned datapath's heartbeat while loading", "every", every)
	return func() { close(quit); <-done }
}

// takeOverNice is the nice value a take-over verifies its programs at
// (the verifier runs in the loading thread, about a second of CPU). A
// restart under load is when the node's CPU is short, and the pinned
// datapath keeps protecting while the new programs are verified (the
// heartbeat bridge): at nice 10 the load has CFS weight 110 against a nice-0
// task's 1024, so it takes at most about a tenth of a core the service
// wants, and on a node whose cores are all busy it still ends within about
// ten times its CPU time. At nice 0 it took a third of the backend's CPU
// on the 2-vCPU harness node: the queue grew from 15 to 70 requests under
// the held drop probability while the new olcd loaded (issue 27).
const takeOverNice = 10

// atTakeOverPriority runs f on an OS thread of its own at takeOverNice. The
// thread is never unlocked: it ends with the goroutine, and its priority
// with it. A failed priority change is logged and f runs anyway.
func atTakeOverPriority(log *slog.Logger, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), takeOverNice); err != nil && log != nil {
			log.Warn("take-over: lower the loading thread's CPU priority", "nice", takeOverNice, "err", err)
		}
		done <- f()
	}()
	return <-done
}

// pinnedRetransmits reads a pinned policy's retransmit rule: an earlier
// build wrote 1 for "shed" and nothing else; a value no rule has reads as
// as-first, which sheds nothing the drop probability does not.
func pinnedRetransmits(v uint8) olc.Retransmits {
	if r := olc.Retransmits(v); r.Valid() {
		return r
	}
	return olc.RetransmitsAsFirst
}
