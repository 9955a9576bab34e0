package daemon

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/statefile"
)

// TestStateRestore: what one daemon's controller learnt and the live
// overrides in force come back in the next daemon from the state file,
// also for the same file with a comment added or a state an earlier olcd
// wrote; a file written under another config is ignored.
func TestStateRestore(t *testing.T) {
	dir := t.TempDir()
	d, _ := goldenDaemon(t)
	d.opts.StateDir = dir
	if err := d.override("patch", "interval: 400ms", []byte("interval: 400ms\n")); err != nil {
		t.Fatal(err)
	}
	want := d.eng.ctrl.Export()
	if want.DropProbability == 0 && len(want.Ports) == 0 {
		t.Fatalf("the golden run learnt nothing to keep: %+v", want)
	}
	d.saveState(true)

	d2, _ := goldenDaemon(t)
	d2.opts.StateDir = dir
	d2.eng.ctrl, _ = adaptive.New(d2.eng.cfg.ControllerConfig(controllerPorts(d2.eng.ports)))
	overrides, restored := d2.restoreState(nil)
	if !restored {
		t.Error("restoreState reports nothing restored")
	}
	got := d2.eng.ctrl.Export()
	for i := range got.Ports {
		// The capacity estimate aged by the file's age.
		if i < len(want.Ports) && got.Ports[i].CapacityAge < want.Ports[i].CapacityAge {
			t.Errorf("port %s: capacity age %v, younger than the exported %v", got.Ports[i].Key, got.Ports[i].CapacityAge, want.Ports[i].CapacityAge)
		}
		got.Ports[i].CapacityAge = 0
	}
	for i := range want.Ports {
		want.Ports[i].CapacityAge = 0
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("restored controller state\n%+v\nwant\n%+v", got, want)
	}
	d2.reapplyOverrides(overrides)
	if len(d2.conf.overrides) != 1 || d2.conf.overrides[0].Value != "interval: 400ms" || !d2.conf.overrides[0].At.Equal(d.conf.overrides[0].At) {
		t.Errorf("restored overrides %+v, want the one of the first daemon with its time", d2.conf.overrides)
	}
	if d2.eng.cfg.Interval != d.eng.cfg.Interval {
		t.Errorf("interval %v after the restore, want %v", d2.eng.cfg.Interval, d.eng.cfg.Interval)
	}

	// The same file with a comment added: the same config, its state.
	dc, _ := goldenDaemon(t)
	dc.opts.StateDir = dir
	dc.conf.fileData = append(dc.conf.fileData, "# a comment\n"...)
	dc.eng.ctrl, _ = adaptive.New(dc.eng.cfg.ControllerConfig(controllerPorts(dc.eng.ports)))
	if ov, restored := dc.restoreState(nil); len(ov) != 1 || !restored {
		t.Errorf("the file with a comment added: overrides %+v, restored %v; want its state", ov, restored)
	}

	// Another config: foreign, ignored.
	d3, _ := goldenDaemon(t)
	d3.opts.StateDir = dir
	d3.conf.fileDigest = "another"
	d3.eng.ctrl, _ = adaptive.New(d3.eng.cfg.ControllerConfig(controllerPorts(d3.eng.ports)))
	before := d3.eng.ctrl.Export()
	if ov, restored := d3.restoreState(nil); len(ov) != 0 || restored {
		t.Errorf("overrides %+v from a foreign file", ov)
	}
	if got := d3.eng.ctrl.Export(); !reflect.DeepEqual(got, before) {
		t.Errorf("a foreign file changed the controller: %+v", got)
	}
	if _, err := statefile.Read(dir, nodeName(), d.configHash(), d.savedAt); err != nil {
		t.Errorf("state file: %v", err)
	}

	// A state an earlier olcd wrote names the file by its bytes' hash: read.
	f, err := statefile.Read(dir, nodeName(), d.configHash(), d.savedAt)
	if err != nil {
		t.Fatal(err)
	}
	f.ConfigHash = d.bytesHash()
	if err := statefile.Write(dir, f); err != nil {
		t.Fatal(err)
	}
	d4, _ := goldenDaemon(t)
	d4.opts.StateDir = dir
	d4.eng.ctrl, _ = adaptive.New(d4.eng.cfg.ControllerConfig(controllerPorts(d4.eng.ports)))
	if ov, restored := d4.restoreState(nil); len(ov) != 1 || !restored {
		t.Errorf("a state under the bytes' hash: overrides %+v, restored %v; want it read", ov, restored)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestAdoptedSeedsController: without a state file, the drop
// probabilities of a taken-over datapath seed the controller, so the first
// tick does not release them.
func TestAdoptedSeedsController(t *testing.T) {
	d, _ := goldenDaemon(t)
	d.opts.StateDir = t.TempDir()
	d.eng.ctrl, _ = adaptive.New(d.eng.cfg.ControllerConfig(controllerPorts(d.eng.ports)))
	k := d.eng.ports[0].Key
	d.restoreState([]loader.PortPolicy{{Key: k, Mode: olc.ModeEnforce, DropProbability: 0.25}})
	st := d.eng.ctrl.Export()
	if st.DropProbability != 0.25 || !st.Overloaded {
		t.Fatalf("controller after seeding: %+v, want p 0.25 overloaded", st)
	}
}

// TestRestoredPortLawWaits: a state file whose node law was not shedding
// but a port's law was (the common overload) counts as restored drop
// probabilities, so the first tick waits for an interval (firstTick) and
// counts from the datapath's read at that moment: not from the take-over a
// few milliseconds before, which the port's law would read as a tick of
// almost no demand and release (issue 27).
func TestRestoredPortLawWaits(t *testing.T) {
	dir := t.TempDir()
	d, dp := goldenDaemon(t)
	d.opts.StateDir = dir
	d.eng.ctrl, _ = adaptive.New(d.eng.cfg.ControllerConfig(controllerPorts(d.eng.ports)))
	k := d.eng.ports[0].Key
	st := adaptive.State{Ports: []adaptive.PortState{{Key: k, DropProbability: 0.4, QueueOverload: true, Target: 0.05}}}
	if err := statefile.Write(dir, statefile.File{Node: nodeName(), ConfigHash: d.configHash(), WrittenAt: time.Now(), Controller: st}); err != nil {
		t.Fatal(err)
	}
	if _, restored := d.restoreState(nil); !restored {
		t.Fatal("a port's law shedding in the state file: restoreState reports nothing restored")
	}
	at := goldenStats(3) // the taken-over datapath's counts, as a new daemon first reads them
	dp.stats, d.eng.prev = at, loader.Stats{}
	ticks := d.eng.ticks
	d.firstTick(true)
	if d.eng.ticks != ticks {
		t.Fatal("the first tick ran at once with drop probabilities restored")
	}
	dp.stats = goldenStats(4) // one more interval's counts
	d.tick()
	want := goldenStats(4).Ports[k].NewConns - at.Ports[k].NewConns
	if got := d.eng.last.deltas[k].NewConns; got != want {
		t.Errorf("the first tick counted %d new connections of %s, want the interval's %d", got, k, want)
	}
}

// TestFirstTickReadsAsTicks: with drop probabilities restored, the start's
// first read (firstTick) is a tick's: a source the sampler could not read
// is counted in the sample errors, and the read it replaces goes back to
// the datapath (ReleaseStats).
func TestFirstTickReadsAsTicks(t *testing.T) {
	d, dp := goldenDaemon(t)
	d.eng.smp = &fakeSampler{snaps: []olc.Snapshot{{Errors: []olc.SourceError{{Source: "psi_cpu", Err: errors.New("gone")}}}}}
	d.eng.prev = goldenStats(1) // a read held, with response histograms
	errs := d.eng.metrics.sampleErrors.WithLabelValues("psi_cpu")
	before, released := counterValue(t, errs), dp.released
	d.firstTick(true)
	if got := counterValue(t, errs) - before; got != 1 {
		t.Errorf("sample errors of psi_cpu +%g, want 1", got)
	}
	if dp.released != released+1 {
		t.Errorf("released %d reads, want the one replaced", dp.released-released)
	}
}

// TestRestoredUnconfiguredPortRuns: a state file whose only shedding law
// is a port's the config no longer has restores nothing that sheds (the
// controller ignores the port), so the first tick need not wait.
func TestRestoredUnconfiguredPortRuns(t *testing.T) {
	dir := t.TempDir()
	d, _ := goldenDaemon(t)
	d.opts.StateDir = dir
	d.eng.ctrl, _ = adaptive.New(d.eng.cfg.ControllerConfig(controllerPorts(d.eng.ports)))
	gone := olc.PortKey{Proto: olc.ProtoTCP, Port: 1}
	for _, p := range d.eng.ports {
		if p.Key == gone {
			t.Fatalf("%s is configured in the golden config", gone)
		}
	}
	st := adaptive.State{Ports: []adaptive.PortState{{Key: gone, DropProbability: 0.4, QueueOverload: true}}}
	if err := statefile.Write(dir, statefile.File{Node: nodeName(), ConfigHash: d.configHash(), WrittenAt: time.Now(), Controller: st}); err != nil {
		t.Fatal(err)
	}
	if _, restored := d.restoreState(nil); restored {
		t.Error("a port no longer configured: restoreState reports drop probabilities restored (the first tick would wait)")
	}
}

// TestRemoveStaleSocket: removeStaleSocket, which olcd run and olcd
// detach share, removes an admin socket no one listens on (a killed
// olcd's) and leaves a live one (another namespace's olcd with the same
// path), one the probe cannot tell (an error), a path that is not a
// socket, and no file.
func TestRemoveStaleSocket(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // as a killed olcd leaves it
	ln.Close()
	live := filepath.Join(dir, "live.sock")
	lln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer lln.Close()
	// A datagram socket: a stream connect answers EPROTOTYPE, neither
	// live nor dead.
	dgram := filepath.Join(dir, "dgram.sock")
	dln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: dgram, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer dln.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path  string
		found socketFound
	}{{stale, socketStale}, {live, socketLive}, {dgram, socketUnknown}, {file, socketOther}, {filepath.Join(dir, "none"), socketNone}} {
		found, _, err := removeStaleSocket(c.path)
		if found != c.found || (err != nil) != (c.found == socketUnknown) {
			t.Errorf("%s: found %d, %v; want %d", filepath.Base(c.path), found, err, c.found)
		}
		_, err = os.Lstat(c.path)
		if gone := errors.Is(err, os.ErrNotExist); gone != (c.found == socketStale || c.found == socketNone) {
			t.Errorf("%s: after removeStaleSocket: %v", filepath.Base(c.path), err)
		}
	}
}
