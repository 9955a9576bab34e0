package loader

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// shortPinLockWait sets pinLockWait to w for the test.
func shortPinLockWait(t *testing.T, w time.Duration) {
	orig := pinLockWait
	pinLockWait = w
	t.Cleanup(func() { pinLockWait = orig })
}

// pinnedState is what a running olcd keeps in its pinned maps that a second
// start could rewrite: the whole .bss (the control record with its mode,
// heartbeat, stale-after, marks and seeds; the port index; the reject,
// response and fair control) and every policy, as the kernel holds them.
func pinnedState(t *testing.T, dir string) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, name := range []string{pinName(".bss"), olcdMapOlcdPolicies} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		must(t, err)
		buf := make([]byte, m.ValueSize())
		for k := uint32(0); k < m.MaxEntries(); k++ {
			must(t, m.Lookup(k, buf))
			out.Write(buf)
		}
		m.Close()
	}
	return out.Bytes()
}

// TestSecondStartWritesNothing: an olcd started beside a running one with
// the same pin directory (and another config) is refused before it opens
// the pinned maps, naming the running one's PID: the control record,
// port index and policies are byte for byte as the running olcd wrote them,
// its program stays attached, and its pins are untouched. Before the pin
// lock the second start adopted the maps, wrote its control record (and
// renewed the heartbeat) and only then met the interface's attach lock.
func TestSecondStartWritesNothing(t *testing.T) {
	dir := pinTestDir(t)
	n := newTestNet(t)
	shortPinLockWait(t, 300*time.Millisecond)
	cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Hour, Interfaces: []string{n.NodeIf}, Attach: olc.AttachTC}
	var d *Datapath
	n.inServer(t, func() (err error) { d, err = Open(cfg, nil); return err })
	t.Cleanup(func() { n.inServer(t, d.Close) })
	must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 0.5}}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	ifindex := d.Attachments()[0].Ifindex
	prog := ingressProgram(t, n, "tc", ifindex)
	before, pins := pinnedState(t, dir), pinList(t, dir)

	second := cfg
	// The same map sizes: without the lock it would be taken over.
	second.StaleAfter, second.MarkFwmark, second.RejectRate = 2*time.Second, 7, 5
	var err error
	_ = n.InNode(func() error { _, err = Open(second, nil); return nil })
	var held *PinsHeldError
	if !errors.As(err, &held) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) ||
		!strings.Contains(err.Error(), dir) {
		t.Errorf("second start: %v, want a PinsHeldError naming %s and pid %d", err, dir, os.Getpid())
	} else {
		t.Logf("refused: %v", err)
	}
	if after := pinnedState(t, dir); !bytes.Equal(after, before) {
		t.Errorf("the refused start changed the running olcd's pinned maps (%d bytes compared)", len(before))
	}
	if got := pinList(t, dir); !slices.Equal(got, pins) {
		t.Errorf("pins after the refused start %v, want %v", got, pins)
	}
	if got := ingressProgram(t, n, "tc", ifindex); got != prog {
		t.Errorf("attached program %d after the refused start, want the running olcd's %d", got, prog)
	}
	// The running olcd still owns what it pinned: it writes, and a
	// release hands it on.
	must(t, d.Heartbeat())
}

// TestPinLockWaitsForExitingHolder: a restart whose predecessor still holds
// the pin directory (between its SIGTERM and its Release) waits for it
// and takes the datapath over, with the policy the old one left in force.
func TestPinLockWaitsForExitingHolder(t *testing.T) {
	dir := pinTestDir(t)
	shortPinLockWait(t, 5*time.Second)
	cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Hour}
	old := loadPinned(t, cfg)
	must(t, old.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1}}))
	must(t, old.Heartbeat())
	released := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		released <- old.Release()
	}()
	start := time.Now()
	d := loadPinned(t, cfg)
	waited := time.Since(start)
	must(t, <-released)
	if !d.Adopted() {
		t.Fatal("the restart did not take the pinned datapath over")
	}
	if waited < 250*time.Millisecond {
		t.Errorf("loaded %s after the start, before the old olcd released the pins", waited)
	}
	if p := d.Policies(); len(p) != 1 || p[0].DropProbability != 1 {
		t.Errorf("policies taken over %+v, want tcp/8080 at p 1", p)
	}
}
