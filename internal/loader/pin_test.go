package loader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/lock"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/testutil"
)

// pinTestDir mounts a bpffs of the test's own (removed at the end) and
// returns a pin directory in it, so that tests never touch /sys/fs/bpf.
func pinTestDir(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	mnt := t.TempDir()
	if err := unix.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
		t.Skipf("mount bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	return filepath.Join(mnt, "olcd", "test")
}

// loadPinned loads a datapath pinned in dir, released (not closed) at the
// end of the test unless the test closed it.
func loadPinned(t *testing.T, cfg Config) *Datapath {
	t.Helper()
	d, err := Load(cfg, nil)
	if err != nil {
		t.Fatalf("load pinned: %v", err)
	}
	t.Cleanup(func() { _ = d.Release() })
	return d
}

// ingressProgram is the ID of the program attached to ifindex at hook
// (tcx ingress or XDP), 0 when none.
func ingressProgram(t *testing.T, n *testNet, hook string, ifindex int) ebpf.ProgramID {
	t.Helper()
	var id ebpf.ProgramID
	n.inServer(t, func() error {
		if hook == "xdp" {
			l, err := netlink.LinkByIndex(ifindex)
			if err != nil {
				return err
			}
			if x := l.Attrs().Xdp; x != nil && x.Attached {
				id = ebpf.ProgramID(x.ProgId)
			}
			return nil
		}
		q, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		if len(q.Programs) > 0 {
			id = q.Programs[0].ID
		}
		return nil
	})
	return id
}

// mapIDs are the IDs of the maps a program uses, sorted.
func mapIDs(t *testing.T, id ebpf.ProgramID) []ebpf.MapID {
	t.Helper()
	p, err := ebpf.NewProgramFromID(id)
	must(t, err)
	defer p.Close()
	info, err := p.Info()
	must(t, err)
	ids, ok := info.MapIDs()
	if !ok {
		t.Fatal("kernel reports no map IDs")
	}
	slices.Sort(ids)
	return ids
}

// rawDropped sums olcd_stats' dropped count of slot over the CPUs, as the
// kernel holds it: the counters the programs write, not the loader's folds.
func rawDropped(t *testing.T, d *Datapath, slot uint16) uint64 {
	t.Helper()
	var per []olcdOlcdCounters
	must(t, d.objs.OlcdStats.Lookup(uint32(slot), &per))
	var n uint64
	for _, c := range per {
		n += uint64(c.Dropped)
	}
	return n
}

// TestPinnedUpgrades is tubular's upgrade test: a datapath pinned and
// attached is released and taken over three times in a row; each time the
// link stays the same one with the new program in it, the policy and drop
// probability the first olcd wrote stay in force (a SYN is dropped by the
// new program before the new olcd writes anything), the kernel's counters
// continue, the pins stay, and the maps the attached program uses are the
// ones the new Datapath writes.
func TestPinnedUpgrades(t *testing.T) {
	for _, mode := range []olc.AttachMode{olc.AttachTC, olc.AttachXDPGeneric} {
		t.Run(string(mode), func(t *testing.T) {
			dir := pinTestDir(t)
			n := newTestNet(t)
			cfg := Config{PinDir: dir, MaxPorts: 16}
			k := olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}
			hook := "tc"
			if mode != olc.AttachTC {
				hook = "xdp"
			}
			d := loadPinned(t, cfg)
			if d.Adopted() {
				t.Fatal("a fresh pin directory was taken over")
			}
			n.inServer(t, func() error { return d.Attach(n.NodeIf, mode) })
			must(t, d.SetPolicies([]PortPolicy{{Key: k, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1}}))
			must(t, d.SetMode(olc.ModeEnforce))
			must(t, d.Heartbeat())
			ifindex := d.Attachments()[0].Ifindex
			pins := pinList(t, dir)
			if got := ingressProgram(t, n, hook, ifindex); got != must1(t)(progID(d.prog(hook2(hook)))) {
				t.Fatalf("attached program %d is not the loaded one", got)
			}
			for gen := 1; gen <= 3; gen++ {
				if v, _ := run(t, d, hook2(hook), syn4(k.Port, uint32(gen))); v != verdictDrop {
					t.Fatalf("generation %d: SYN %s before the upgrade, want drop", gen, v)
				}
				before := rawDropped(t, d, d.slots[k])
				must(t, d.Release())
				if got := ingressProgram(t, n, hook, ifindex); got == 0 {
					t.Fatalf("generation %d: nothing attached after Release", gen)
				}
				d = loadPinned(t, cfg)
				if !d.Adopted() {
					t.Fatalf("generation %d: the pinned datapath was not taken over", gen)
				}
				pol := d.Policies()
				if len(pol) != 1 || pol[0].Key != k || pol[0].DropProbability != 1 || pol[0].Mode != olc.ModeEnforce {
					t.Fatalf("generation %d: policies taken over %+v", gen, pol)
				}
				if v, _ := run(t, d, hook2(hook), syn4(k.Port, uint32(100+gen))); v != verdictDrop {
					t.Fatalf("generation %d: SYN %s after the take-over before any write, want drop", gen, v)
				}
				if got := rawDropped(t, d, d.slots[k]); got != before+1 {
					t.Fatalf("generation %d: kernel dropped count %d after the take-over, want %d (kept and counting)", gen, got, before+1)
				}
				n.inServer(t, func() error { return d.Attach(n.NodeIf, mode) })
				a := d.Attachments()[0]
				if !slices.Equal(pinList(t, dir), pins) {
					t.Fatalf("generation %d: pins %v, want %v", gen, pinList(t, dir), pins)
				}
				got := ingressProgram(t, n, hook, a.Ifindex)
				want := must1(t)(progID(d.prog(hook2(hook))))
				if got != want {
					t.Fatalf("generation %d: attached program %d, want the new one %d", gen, got, want)
				}
				info, err := d.objs.OlcdPolicies.Info()
				must(t, err)
				pid, _ := info.ID()
				if ids := mapIDs(t, got); !slices.Contains(ids, pid) {
					t.Fatalf("generation %d: attached program's maps %v lack the policies map %d the Datapath writes", gen, ids, pid)
				}
				must(t, d.Heartbeat())
			}
			// The full removal leaves nothing.
			must(t, d.Close())
			testutil.Eventually(t, 2*time.Second, 10*time.Millisecond, func() (bool, error) {
				return ingressProgram(t, n, hook, ifindex) == 0, nil
			}, "a program is still attached after Close")
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("pin directory after Close: %v", err)
			}
		})
	}
}

func hook2(h string) hook {
	if h == "xdp" {
		return hookXDP
	}
	return hookTC
}

// must1 returns a function that fails t on an error and returns the value.
func must1(t *testing.T) func(ebpf.ProgramID, error) ebpf.ProgramID {
	return func(v ebpf.ProgramID, err error) ebpf.ProgramID {
		t.Helper()
		must(t, err)
		return v
	}
}

func pinList(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestTakeOverFailedUpdate injects a failed link update: the attach fails
// naming it, and the old program stays attached and keeps its policy.
func TestTakeOverFailedUpdate(t *testing.T) {
	dir := pinTestDir(t)
	n := newTestNet(t)
	cfg := Config{PinDir: dir, MaxPorts: 16}
	d := loadPinned(t, cfg)
	n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
	ifindex := d.Attachments()[0].Ifindex
	old := ingressProgram(t, n, "tc", ifindex)
	must(t, d.Release())

	orig := linkUpdate
	t.Cleanup(func() { linkUpdate = orig })
	linkUpdate = func(link.Link, *ebpf.Program) error { return errors.New("injected update failure") }
	d = loadPinned(t, cfg)
	err := n.InNode(func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
	if err == nil {
		t.Fatal("attach succeeded with a failing link update")
	}
	t.Logf("attach: %v", err)
	if got := ingressProgram(t, n, "tc", ifindex); got != old {
		t.Fatalf("attached program %d after the failed update, want the old %d", got, old)
	}
	linkUpdate = orig
	must(t, d.Release())
	d = loadPinned(t, cfg)
	n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
	if got := ingressProgram(t, n, "tc", ifindex); got == old {
		t.Fatal("the retried take-over left the old program")
	}
	must(t, d.Close())
}

// TestTakeOverOtherHook: a take-over whose attach mode moved (tc → XDP
// generic → tc, three times) detaches the other hook's pinned link before
// Attach returns: the other program is gone at once, not when the kernel's
// work item frees an unpinned link (until then the attach's check for
// another olcd found it and refused the start, issue 27).
func TestTakeOverOtherHook(t *testing.T) {
	dir := pinTestDir(t)
	n := newTestNet(t)
	cfg := Config{PinDir: dir, MaxPorts: 16}
	var ifindex int
	for i, mode := range []olc.AttachMode{olc.AttachTC, olc.AttachXDPGeneric, olc.AttachTC, olc.AttachXDPGeneric, olc.AttachTC} {
		d := loadPinned(t, cfg)
		n.inServer(t, func() error { return d.Attach(n.NodeIf, mode) })
		ifindex = d.Attachments()[0].Ifindex
		hook, other := "tc", "xdp"
		if mode == olc.AttachXDPGeneric {
			hook, other = "xdp", "tc"
		}
		if got := ingressProgram(t, n, hook, ifindex); got == 0 {
			t.Fatalf("step %d (%s): no program on %s", i, mode, hook)
		}
		if got := ingressProgram(t, n, other, ifindex); got != 0 {
			t.Fatalf("step %d (%s): program %d still on %s when Attach returned", i, mode, got, other)
		}
		must(t, d.Release())
	}
	d := loadPinned(t, cfg)
	must(t, d.Close())
}

// TestPinnedIncompatible: a datapath whose layout fingerprint differs (a
// build whose struct layout changed at equal sizes), or whose map differs
// in more than its size, is refused with an error naming the map and the
// difference, and left as it was. (Other sizes alone are taken over:
// TestTakeOverResized.)
func TestPinnedIncompatible(t *testing.T) {
	dir := pinTestDir(t)
	d := loadPinned(t, Config{PinDir: dir, MaxPorts: 16})
	must(t, d.Release())
	pins := pinList(t, dir)

	// Another value size (as a struct that grew), with another size too.
	spec, err := loadOlcd()
	must(t, err)
	ms := loadSpec(spec.Maps[olcdMapOlcdPolicies])
	ms.ValueSize += 8
	ms.MaxEntries = 7
	var ie *IncompatibleError
	_, _, err = openPinned(dir, nil, &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{olcdMapOlcdPolicies: ms}}, olcdMapOlcdPolicies)
	if !errors.As(err, &ie) || ie.Map != olcdMapOlcdPolicies {
		t.Fatalf("open a pinned map of another value size and max entries: %v, want an IncompatibleError naming olcd_policies", err)
	}
	t.Logf("refused: %v", err)

	// A build whose struct layout changed at equal sizes: its fingerprint.
	layout, err := ebpf.LoadPinnedMap(filepath.Join(dir, layoutMapName), nil)
	must(t, err)
	must(t, layout.Update(keyOf("olcd_syns"), uint64(1), ebpf.UpdateAny))
	layout.Close()
	_, err = Load(Config{PinDir: dir, MaxPorts: 16}, nil)
	if !errors.As(err, &ie) || ie.Map != "olcd_syns" {
		t.Fatalf("load with another layout: %v, want an IncompatibleError naming olcd_syns", err)
	}
	t.Logf("refused: %v", err)
	if !slices.Equal(pinList(t, dir), pins) {
		t.Fatalf("a refused load changed the pins: %v, want %v", pinList(t, dir), pins)
	}
}

// TestRemovePinnedEntryDeleted: the explicit detach removes an attached,
// pinned datapath whose pins someone deleted in part by hand.
func TestRemovePinnedEntryDeleted(t *testing.T) {
	dir := pinTestDir(t)
	n := newTestNet(t)
	d := loadPinned(t, Config{PinDir: dir, MaxPorts: 16})
	n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
	ifindex := d.Attachments()[0].Ifindex
	// Refused while an olcd runs (it holds the interface's lock).
	if err := n.InNode(func() error { _, err := RemovePinned(dir, nil); return err }); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("RemovePinned with olcd running: %v, want a refusal", err)
	}
	must(t, d.Release())
	must(t, os.Remove(filepath.Join(dir, "olcd_syns")))
	must(t, os.Remove(filepath.Join(dir, layoutMapName)))
	var done []string
	n.inServer(t, func() (err error) { done, err = RemovePinned(dir, nil); return err })
	t.Logf("removed: %q", done)
	// The kernel frees a link whose last reference went in a work item.
	testutil.Eventually(t, 2*time.Second, 10*time.Millisecond, func() (bool, error) {
		return ingressProgram(t, n, "tc", ifindex) == 0, nil
	}, "a program is still attached after RemovePinned")
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin directory after RemovePinned: %v", err)
	}
}

// TestTakeOverClsact: on the clsact rung the filter's program is replaced in
// place and the taken-over policy stays.
func TestTakeOverClsact(t *testing.T) {
	dir := pinTestDir(t)
	n := newTestNet(t)
	cfg := Config{PinDir: dir, MaxPorts: 16}
	d := loadPinned(t, cfg)
	n.inServer(t, func() error { return d.attach(n.NodeIf, olc.AttachTC, true) })
	must(t, d.Release())
	d = loadPinned(t, cfg)
	n.inServer(t, func() error { return d.attach(n.NodeIf, olc.AttachTC, true) })
	a := d.Attachments()[0]
	if a.Mode != "clsact" {
		t.Fatalf("mode %s, want clsact", a.Mode)
	}
	want := must1(t)(progID(d.objs.OlcdTc))
	var ids []int
	n.inServer(t, func() error {
		bfs, err := bpfFilters(a.Interface, netlink.HANDLE_MIN_INGRESS)
		for _, bf := range bfs {
			if bf.Handle != 0 {
				ids = append(ids, bf.Id)
			}
		}
		return err
	})
	if len(ids) != 1 || ids[0] != int(want) {
		t.Fatalf("ingress filters' programs %v, want just the new one %d", ids, want)
	}
	must(t, d.Close())
}

// TestTakeOverStaleHeartbeat: a pinned datapath whose heartbeat went stale
// (its olcd died long ago) is taken over with its policies but not its drop
// probabilities, which were no longer in force.
func TestTakeOverStaleHeartbeat(t *testing.T) {
	dir := pinTestDir(t)
	k := olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}
	// Longer than a load takes (the verifier), shorter than the test.
	cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Second}
	d := loadPinned(t, cfg)
	must(t, d.SetPolicies([]PortPolicy{{Key: k, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 0.5}}))
	must(t, d.Heartbeat())
	must(t, d.Release())
	d = loadPinned(t, cfg)
	if p := d.Policies(); len(p) != 1 || p[0].DropProbability != 0.5 {
		t.Fatalf("fresh take-over: policies %+v, want p 0.5", p)
	}
	must(t, d.Release())
	testutil.Eventually(t, 3*time.Second, 10*time.Millisecond, func() (bool, error) {
		now, err := monotonicNow()
		return err == nil && now-d.ctl.HeartbeatNs > uint64(cfg.StaleAfter+100*time.Millisecond), err
	}, "heartbeat stale")
	d = loadPinned(t, cfg)
	if p := d.Policies(); len(p) != 1 || p[0].DropProbability != 0 || p[0].Key != k {
		t.Fatalf("stale take-over: policies %+v, want the port with p 0", p)
	}
}

// TestTakeOverBridgesHeartbeat: while a new Load verifies its programs, the
// pinned datapath's heartbeat is renewed, so the old drop probabilities
// outlive stale_after only as long as the new olcd lives; a stale one is
// not revived.
func TestTakeOverBridgesHeartbeat(t *testing.T) {
	dir := pinTestDir(t)
	cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: 400 * time.Millisecond}
	d := loadPinned(t, cfg)
	must(t, d.Heartbeat())
	must(t, d.Release())
	spec, err := loadOlcd()
	must(t, err)
	ncpu, err := ebpf.PossibleCPU()
	must(t, err)
	c, err := cfg.withDefaults()
	must(t, err)
	sizeMaps(spec, c, ncpu)
	p, err := openPins(dir, spec, nil)
	must(t, err)
	defer p.close()
	hb := func() uint64 {
		var ctl olcdOlcdControl
		v := spec.Variables["olcd_ctl"]
		buf := make([]byte, p.adopted[".bss"].ValueSize())
		must(t, p.adopted[".bss"].Lookup(uint32(0), buf))
		must(t, binaryRead(buf[v.Offset:], &ctl))
		return ctl.HeartbeatNs
	}
	first := hb()
	stop := p.bridge(spec, slogDiscard())
	// Renewed past what the first heartbeat's lease allowed, and fresh.
	testutil.Eventually(t, 3*time.Second, 20*time.Millisecond, func() (bool, error) {
		now, err := monotonicNow()
		got := hb()
		return got > first+uint64(2*cfg.StaleAfter) && now-got <= uint64(cfg.StaleAfter), err
	}, "the heartbeat renewed beyond two leases")
	stop()
	// Stale once the bridge stops; a new bridge leaves it so.
	testutil.Eventually(t, 3*time.Second, 20*time.Millisecond, func() (bool, error) {
		now, err := monotonicNow()
		return now-hb() > uint64(cfg.StaleAfter), err
	}, "the heartbeat goes stale after the bridge")
	stale := hb()
	p.bridge(spec, slogDiscard())() // a stale heartbeat: nothing runs
	if got := hb(); got != stale {
		t.Fatalf("a stale heartbeat was renewed (%d → %d)", stale, got)
	}
}

func binaryRead(b []byte, v *olcdOlcdControl) error {
	return binary.Read(bytes.NewReader(b), binary.NativeEndian, v)
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestTakeOverKeepsInflight: the requests in flight when a datapath is
// taken over stay in flight in the new Datapath's response counts (issue
// 27): one request waits across the take-over, a second starts after it,
// and the first is answered: the counts read 1 in flight, 2, then 1, the
// requests started since the take-over plus the one waiting at it.
func TestTakeOverKeepsInflight(t *testing.T) {
	dir := pinTestDir(t)
	cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Hour, ResponseSample: 1, FlowTableSize: 64}
	d := loadPinned(t, cfg)
	must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop}}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	other := func(seq, ack uint32, flags uint8, n int, toServer bool) []byte {
		if toServer {
			return tcpData{client4, server4, cport + 1, sport, seq, ack, flags, n}.frame()
		}
		return tcpData{server4, client4, sport, cport + 1, seq, ack, flags, n}.frame()
	}
	runSteps(t, d, hookTC, []step{in(0, c(cseq0, sseq0, psh, 100))})
	inflight := func(d *Datapath) int64 {
		s := stats(t, d)
		defer d.ReleaseStats(s)
		return s.Response[tcp8080].Outstanding()
	}
	if got := inflight(d); got != 1 {
		t.Fatalf("before the take-over: %d in flight, want 1", got)
	}
	must(t, d.Release())
	d = loadPinned(t, cfg)
	if !d.Adopted() {
		t.Fatal("the pinned datapath was not taken over")
	}
	counts := make(map[olc.PortKey]RespCount)
	for i, st := range []struct {
		step step
		want int64
	}{
		{in(5*ms, other(cseq0, sseq0, psh, 100, true)), 2},
		{out(20*ms, s(sseq0, cseq0+100, psh, 200)), 1},
	} {
		if i == 0 {
			if got := inflight(d); got != 1 {
				t.Fatalf("after the take-over: %d in flight, want 1 (the request waiting at it)", got)
			}
		}
		runSteps(t, d, hookTC, []step{st.step})
		if got := inflight(d); got != st.want {
			t.Errorf("step %d: %d in flight, want %d", i+1, got, st.want)
		}
		must(t, d.ResponseCounts(counts))
		if got := int64(counts[tcp8080].Inflight()); got != st.want {
			t.Errorf("step %d: the onset check's counts: %d in flight, want %d", i+1, got, st.want)
		}
	}
}

// mapID is the kernel's ID of m.
func mapID(t *testing.T, m *ebpf.Map) ebpf.MapID {
	t.Helper()
	info, err := m.Info()
	must(t, err)
	id, _ := info.ID()
	return id
}

// pinnedMapID is the ID of the map pinned in dir as map name.
func pinnedMapID(t *testing.T, dir, name string) ebpf.MapID {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinName(name)), nil)
	must(t, err)
	defer m.Close()
	return mapID(t, m)
}

// pinnedMapIDs are the IDs of the maps pinned in dir as names.
func pinnedMapIDs(t *testing.T, dir string, names []string) map[string]ebpf.MapID {
	t.Helper()
	ids := make(map[string]ebpf.MapID, len(names))
	for _, name := range names {
		ids[name] = pinnedMapID(t, dir, name)
	}
	return ids
}

// editLayout changes the pinned layout map of dir with edit, as another
// build's pins or a start that died would have it.
func editLayout(t *testing.T, dir string, edit func(layout *ebpf.Map) error) {
	t.Helper()
	layout, err := ebpf.LoadPinnedMap(filepath.Join(dir, layoutMapName), nil)
	must(t, err)
	defer layout.Close()
	must(t, edit(layout))
}

// takeOver loads cfg over the datapath pinned in cfg.PinDir; t fails
// unless the load took it over.
func takeOver(t *testing.T, cfg Config) *Datapath {
	t.Helper()
	d := loadPinned(t, cfg)
	if !d.Adopted() {
		t.Fatal("the pinned datapath was not taken over")
	}
	return d
}

// checkRenewed fails t unless each map of names is pinned in dir as d's
// own, a new one (before: the IDs pinned before the take-over).
func checkRenewed(t *testing.T, dir string, d *Datapath, names []string, before map[string]ebpf.MapID) {
	t.Helper()
	for _, name := range names {
		mine := mapID(t, d.objs.byName(name))
		if id := pinnedMapID(t, dir, name); id == before[name] || id != mine {
			t.Errorf("%s: pinned map %d, before %d, this datapath's %d: want this datapath's, a new one", name, id, before[name], mine)
		}
	}
}

// checkAdopted fails t unless each map of names is still pinned as before.
func checkAdopted(t *testing.T, dir string, names []string, before map[string]ebpf.MapID) {
	t.Helper()
	for _, name := range names {
		if id := pinnedMapID(t, dir, name); id != before[name] {
			t.Errorf("%s: pinned map %d, before %d: want it adopted", name, id, before[name])
		}
	}
}

// TestTakeOverNewFlowHash: pins of a build whose flow hash is another
// version (the layout without "flow_hash", as builds before the fmix64
// finaliser pinned it) are taken over with the flow group started afresh:
// the request waiting at the take-over is not counted in flight (its flow
// is not found, so its answer would never take it off), its answer counts
// nothing, a new request counts one; the fresh maps are pinned over the
// old ones with the layout saying this build's version, and the next
// take-over adopts them as they are.
func TestTakeOverNewFlowHash(t *testing.T) {
	dir := pinTestDir(t)
	cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Hour, ResponseSample: 1, FlowTableSize: 64}
	d := loadPinned(t, cfg)
	must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop}}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	runSteps(t, d, hookTC, []step{in(0, c(cseq0, sseq0, psh, 100))})
	// The counts without their histogram (a slice: not comparable).
	type respCounts struct{ requests, responses, abandoned uint64 }
	counts := func(d *Datapath) respCounts {
		s := stats(t, d)
		defer d.ReleaseStats(s)
		r := s.Response[tcp8080]
		return respCounts{r.Requests, r.Responses, r.Abandoned}
	}
	inflight := func(d *Datapath) int64 {
		r := counts(d)
		return Response{Requests: r.requests, Responses: r.responses, Abandoned: r.abandoned}.Outstanding()
	}
	if got := inflight(d); got != 1 {
		t.Fatalf("before the take-over: %d in flight, want 1", got)
	}
	old := pinnedMapIDs(t, dir, append(slices.Clone(flowGroup), olcdMapOlcdPolicies))
	must(t, d.Release())
	editLayout(t, dir, func(layout *ebpf.Map) error { return layout.Delete(keyOf(flowHashKey)) })

	d = takeOver(t, cfg)
	checkRenewed(t, dir, d, flowGroup, old)
	checkAdopted(t, dir, []string{olcdMapOlcdPolicies}, old)
	if p := d.policies[tcp8080]; p.Mode != olc.ModeEnforce {
		t.Errorf("adopted policy of %s: %+v", tcp8080, p)
	}
	var ver uint64
	editLayout(t, dir, func(layout *ebpf.Map) error { return layout.Lookup(keyOf(flowHashKey), &ver) })
	if ver != FlowHashVersion {
		t.Errorf("pinned flow hash version %d, want %d", ver, FlowHashVersion)
	}
	other := tcpData{client4, server4, cport + 1, sport, cseq0, sseq0, psh, 100}.frame()
	for i, st := range []struct {
		step step
		want respCounts
	}{
		{out(20*ms, s(sseq0, cseq0+100, psh, 200)), respCounts{}},
		{in(30*ms, other), respCounts{requests: 1}},
	} {
		if i == 0 {
			if got := counts(d); got != (respCounts{}) {
				t.Fatalf("after the take-over: counts %+v, want none (the request waiting at it is not timed)", got)
			}
		}
		runSteps(t, d, hookTC, []step{st.step})
		if got := counts(d); got != st.want {
			t.Errorf("step %d: counts %+v, want %+v", i+1, got, st.want)
		}
	}
	renewed := pinnedMapIDs(t, dir, flowGroup)
	must(t, d.Release())
	d = takeOver(t, cfg)
	checkAdopted(t, dir, flowGroup, renewed)
	if got := inflight(d); got != 1 {
		t.Errorf("a take-over of this build's pins: %d in flight, want 1 (the request waiting at it)", got)
	}
}

// TestTakeOverRenewsFairGroup: pins whose fair shedding maps differ from
// this build's (olcd_fair_slots's fingerprint, as when its struct gained
// the debt) are taken over with the fair group started afresh, not
// refused: the policies are adopted, the fair maps are new and pinned over
// the old ones, and the fair port sheds p from its first SYN on them.
func TestTakeOverRenewsFairGroup(t *testing.T) {
	dir := pinTestDir(t)
	cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Hour, DrawSeed: 11}
	d := loadPinned(t, cfg)
	must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 0.5, Fair: true}}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	old := pinnedMapIDs(t, dir, append(slices.Clone(fairGroup), olcdMapOlcdPolicies))
	must(t, d.Release())
	editLayout(t, dir, func(layout *ebpf.Map) error {
		return layout.Update(keyOf(olcdMapOlcdFairSlots), uint64(1), ebpf.UpdateAny)
	})

	d = takeOver(t, cfg)
	checkRenewed(t, dir, d, fairGroup, old)
	checkAdopted(t, dir, []string{olcdMapOlcdPolicies}, old)
	if p := d.policies[tcp8080]; !p.Fair || p.DropProbability != 0.5 {
		t.Errorf("adopted policy of %s: %+v, want fair at p 0.5", tcp8080, p)
	}
	must(t, d.setFairClock(1<<40))
	const n = 400
	passed := 0
	onOneCPU(t, func() {
		for k := range n {
			src := netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + k%3)})
			seg := tcpSeg{uint16(10000 + k), 8080, uint32(k + 1), tcpSYN}.bytes()
			ret, err := d.prog(hookTC).Run(&ebpf.RunOptions{Data: ipv4Frame(src, server4, 6, 0, seg)})
			must(t, err)
			if toVerdict(t, hookTC, ret) == verdictPass {
				passed++
			}
		}
	})
	if share := float64(passed) / n; math.Abs(share-0.5) > 0.05 {
		t.Errorf("after the take-over the fair port passed %.3f of %d SYNs, want 0.5 within 0.05 (its debt holds it at p from the first, TestFairOnset)", share, n)
	}
	// The layout says this build's fingerprints now: the next take-over
	// adopts the group.
	renewed := pinnedMapIDs(t, dir, fairGroup)
	must(t, d.Release())
	takeOver(t, cfg)
	checkAdopted(t, dir, fairGroup, renewed)
}

// TestTakeOverFlowTableSize: a restart that resizes the flow table
// (flow_table_size) takes over with the flow group renewed at the new
// size, where every other sizing setting is refused (TestPinnedIncompatible).
func TestTakeOverFlowTableSize(t *testing.T) {
	dir := pinTestDir(t)
	cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Hour, ResponseSample: 1, FlowTableSize: 64}
	d := loadPinned(t, cfg)
	small := d.objs.OlcdFlows.MaxEntries()
	old := pinnedMapIDs(t, dir, flowGroup)
	must(t, d.Release())
	cfg.FlowTableSize = 1024
	d = takeOver(t, cfg)
	checkRenewed(t, dir, d, flowGroup, old)
	if got := d.objs.OlcdFlows.MaxEntries(); got <= small {
		t.Errorf("flow table of %d sets, was %d: want it larger", got, small)
	}
	renewed := pinnedMapIDs(t, dir, flowGroup)
	must(t, d.Release())
	takeOver(t, cfg)
	checkAdopted(t, dir, flowGroup, renewed)
}

// TestTakeOverRenewsUnfingerprinted: pins as a start that died inside
// pinRenewed leaves them (the layout without the renewed maps'
// fingerprints, the maps possibly of another layout) are taken over with
// those groups renewed again, not adopted under an old fingerprint; a
// stale temporary pin is removed.
func TestTakeOverRenewsUnfingerprinted(t *testing.T) {
	dir := pinTestDir(t)
	cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Hour}
	d := loadPinned(t, cfg)
	old := pinnedMapIDs(t, dir, fairGroup)
	must(t, d.objs.OlcdFairCm.Pin(filepath.Join(dir, pinName(olcdMapOlcdFairCm)+renewSuffix)))
	must(t, d.Release())
	editLayout(t, dir, func(layout *ebpf.Map) error { return layout.Delete(keyOf(olcdMapOlcdFairCm)) })

	d = takeOver(t, cfg)
	checkRenewed(t, dir, d, fairGroup, old)
	for _, name := range pinList(t, dir) {
		if strings.HasSuffix(name, renewSuffix) {
			t.Errorf("stale temporary pin %s left", name)
		}
	}
}

// threadNice is the calling OS thread's nice value (/proc/thread-self/stat,
// field 19).
func threadNice(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/stat")
	must(t, err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	n, err := strconv.Atoi(f[16]) // field 19, counted from field 3 (state)
	must(t, err)
	return n
}

// TestTakeOverPriority: a take-over's load runs at takeOverNice on a thread
// of its own; the caller's priority is left as it was.
func TestTakeOverPriority(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadNice(t)
	var in int
	must(t, atTakeOverPriority(nil, func() error { in = threadNice(t); return nil }))
	if in != takeOverNice {
		t.Errorf("the load ran at nice %d, want %d", in, takeOverNice)
	}
	if after := threadNice(t); after != before {
		t.Errorf("the caller's nice went from %d to %d", before, after)
	}
}

// TestRemovePinnedLockDir: the explicit detach leaves no lock of its
// namespace behind (those of interfaces gone since, a killed olcd's, too),
// never touches another namespace's, refuses while one of its namespace's
// is held, and removes the lock directory only once it is empty.
func TestRemovePinnedLockDir(t *testing.T) {
	dir := pinTestDir(t)
	n := newTestNet(t)
	lockDir := filepath.Join(t.TempDir(), "run-olcd")
	var ns uint64
	n.inServer(t, func() error { ns = currentNetns(); return nil })
	// Another namespace's olcd, running: its lock is held.
	other := lockOf(t)(lock.TryExclusive(lockPathIn(lockDir, ns+1, 2)))
	defer func() { _ = other.Release() }()
	// A killed olcd's lock of an interface gone since: a file, not held.
	staleLock := lockPathIn(lockDir, ns, 9999)
	must(t, os.WriteFile(staleLock, nil, 0o644))
	// Held: an olcd of this namespace still runs on an interface gone
	// since (it has not noticed yet). Refused, and nothing removed.
	held := lockOf(t)(lock.TryExclusive(lockPathIn(lockDir, ns, 9998)))
	if err := n.InNode(func() error { _, err := removePinned(dir, lockDir, nil); return err }); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("removePinned with a lock of this namespace held: %v, want a refusal", err)
	}
	must(t, held.Release())
	n.inServer(t, func() error { _, err := removePinned(dir, lockDir, nil); return err })
	left, err := os.ReadDir(lockDir)
	must(t, err)
	if len(left) != 1 || left[0].Name() != filepath.Base(other.Path()) {
		t.Fatalf("lock directory after removePinned: %v, want only the other namespace's %s", left, other.Path())
	}
	// The other namespace's olcd stops (its lock file goes): the next
	// detach removes the empty directory, and none is made by a detach
	// when there was none.
	must(t, other.Release())
	n.inServer(t, func() error { _, err := removePinned(dir, lockDir, nil); return err })
	if _, err := os.Stat(lockDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock directory after the last detach: %v, want removed", err)
	}
	n.inServer(t, func() error { _, err := removePinned(dir, lockDir, nil); return err })
	if _, err := os.Stat(lockDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock directory after a detach with nothing to remove: %v, want none", err)
	}
}

func lockOf(t *testing.T) func(*lock.File, error) *lock.File {
	return func(f *lock.File, err error) *lock.File {
		t.Helper()
		must(t, err)
		return f
	}
}
