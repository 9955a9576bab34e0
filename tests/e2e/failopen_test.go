package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/testutil"
)

// TestFailOpenKill9 kills a shedding daemon with SIGKILL, for each attach
// mode: its pinned datapath stays attached and fails open once the
// heartbeat is older than stale_after (2 s here), after which connections
// succeed. A second instance then starts cleanly on the same interface and
// socket path, takes the pinned datapath over (the same link, a new
// program) and sheds again; olcd detach at the end leaves nothing.
func TestFailOpenKill9(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		attach   string
		hook     string // as the kernel lists it
		progName string
	}{
		{"tc", "tcx", "olcd_tc"},
		{"xdp", "xdp", "olcd_xdp"},
	} {
		t.Run(tc.attach, func(t *testing.T) {
			env := newNetEnv(t)
			env.serve(t)
			burnCPU(t)
			cfg := daemonConfig{Mode: "enforce", Attach: tc.attach, Threshold: thresholdAlways}
			d := startDaemon(t, env, cfg)
			d.waitShedding(t)
			env.expectAllDropped(t, "before kill -9", 5)

			progs := env.attachedProgs(t)
			if len(progs) != 1 || progs[0].Hook != tc.hook || progs[0].Name != tc.progName {
				t.Fatalf("kernel lists %+v on %s, want one %s program %s", progs, env.NodeIf, tc.hook, tc.progName)
			}
			if ids := olcdProgIDs(t); ids[progs[0].ID] != tc.progName {
				t.Fatalf("program %d not found by name among the loaded olcd programs %v", progs[0].ID, ids)
			}

			if err := d.signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if !d.wait(10 * time.Second) {
				t.Fatal("olcd still running 10s after SIGKILL")
			}
			killed := time.Now()
			// The pinned link keeps the program attached; no netlink
			// filter was ever made.
			if left := env.attachedProgs(t); len(left) != 1 || left[0].ID != progs[0].ID {
				t.Fatalf("after kill -9 the kernel lists %+v on %s, want the pinned program %d", left, env.NodeIf, progs[0].ID)
			}
			if out := mustRun(t, "ip", "netns", "exec", env.Node, "tc", "filter", "show", "dev", env.NodeIf, "ingress"); strings.TrimSpace(out) != "" {
				t.Fatalf("tc filter show dev %s ingress after kill -9:\n%s", env.NodeIf, out)
			}
			// Fail open through the lease, within stale_after.
			t.Logf("fail-open %v after kill -9", failOpen(t, env, killed, 2*time.Second, "kill -9"))
			env.expectAllOK(t, "after kill -9, heartbeat stale", 20)

			// The next instance: the stale admin socket is replaced, one
			// attachment, shedding again.
			if _, err := os.Lstat(d.socket); err != nil {
				t.Fatalf("expected the killed daemon's socket to be left behind: %v", err)
			}
			d2 := *d
			d2.logPath = d.logPath + ".2"
			d2.start(t)
			d2.waitShedding(t)
			if now := env.attachedProgs(t); len(now) != 1 || now[0].Name != tc.progName || now[0].ID == progs[0].ID {
				t.Fatalf("second instance: kernel lists %+v on %s, want one %s, not the killed one's %d", now, env.NodeIf, tc.progName, progs[0].ID)
			}
			env.expectAllDropped(t, "second instance", 5)
			if err := d2.signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			d2.wait(10 * time.Second)
			t.Logf("olcd detach:\n%s", d.detach(t))
			// The kernel frees an unpinned link in a work item.
			testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() (bool, error) {
				return len(env.attachedProgs(t)) == 0, nil
			}, "nothing attached to %s after olcd detach", env.NodeIf)
			waitProgGone(t, progs[0].ID)
		})
	}
}

// failOpen probes with SYNs from since, when the daemon (last tick at most
// one interval before) stopped renewing the heartbeat of a datapath with
// stale_after, until one passes, and returns how long that took. It fails
// unless the first SYN passes within stale_after + one tick + synTimeout
// (the lease ends at most stale_after after the last heartbeat; a tick of
// slack for a late one; a probe sent just before the end waits synTimeout
// for its answer) and not before stale_after/2: until the lease ends the
// pinned drop probabilities stay in force, they do not fail open at the
// daemon's end.
func failOpen(t *testing.T, env *netEnv, since time.Time, staleAfter time.Duration, what string) time.Duration {
	t.Helper()
	limit := staleAfter + interval + synTimeout
	for {
		err := env.connectOnce(synTimeout)
		took := time.Since(since)
		if err == nil {
			if took < staleAfter/2 {
				t.Fatalf("a SYN passed %v after %s: the lease (stale_after %v) did not hold", took, what, staleAfter)
			}
			return took.Round(time.Millisecond)
		}
		if took > limit {
			t.Fatalf("no SYN passed within %v of %s (stale_after %v + one tick + a probe's %v): %v", limit, what, staleAfter, synTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFailOpenStopCont freezes a shedding daemon with SIGSTOP: once the
// heartbeat is older than heartbeat.stale_after (1 s) the datapath passes
// every SYN and counts it as stale; after SIGCONT the daemon's next tick
// refreshes the heartbeat and shedding resumes. The counters are checked
// against each attempt's outcome.
func TestFailOpenStopCont(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	env.serve(t)
	burnCPU(t)
	d := startDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdAlways, StaleAfter: "1s"})
	d.waitShedding(t)
	env.expectAllDropped(t, "before SIGSTOP", 5)
	st := d.nextTick(t, d.mustStatus(t))
	before := port(t, st).Totals

	if err := d.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { _ = d.signal(syscall.SIGCONT) })
	waitProcState(t, d.pid(), 'T')

	// Probe until the first SYN passes: the ones before were dropped while
	// the heartbeat was still fresh.
	var dropped int
	deadline := stopped.Add(6 * time.Second)
	for {
		err := env.connectOnce(synTimeout)
		if err == nil {
			break
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("probe during SIGSTOP: %v (want a timeout or success)", err)
		}
		dropped++
		if time.Now().After(deadline) {
			t.Fatalf("still dropping %v after SIGSTOP with stale_after 1s (%d probes dropped)", time.Since(stopped), dropped)
		}
	}
	failOpenAfter := time.Since(stopped)
	const nStale = 20
	env.expectAllOK(t, "daemon stopped, heartbeat stale", nStale)
	waitProcState(t, d.pid(), 'T') // still stopped: the passes were the datapath's doing
	t.Logf("fail-open %v after SIGSTOP (%d probes dropped before)", failOpenAfter.Round(time.Millisecond), dropped)

	if err := d.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// A status answered after SIGCONT and a tick after it: the heartbeat
	// is fresh again.
	st = d.nextTick(t, d.mustStatus(t))
	if portP(st) != 1 {
		t.Fatalf("after SIGCONT: %s, want p = 1", summary(st))
	}
	const nResumed = 10
	env.expectAllDropped(t, "after SIGCONT", nResumed)
	st = d.nextTick(t, d.mustStatus(t))
	after := port(t, st).Totals
	got := api.PortTotals{
		NewConns: after.NewConns - before.NewConns, Dropped: after.Dropped - before.Dropped,
		Stale: after.Stale - before.Stale, Passed: after.Passed - before.Passed,
		SYNRetransmits: after.SYNRetransmits - before.SYNRetransmits,
	}
	passed := uint64(1 + nStale) // the first probe that passed, then the burst
	want := api.PortTotals{
		NewConns: uint64(dropped) + passed + nResumed, Dropped: uint64(dropped) + nResumed,
		Stale: passed, Passed: passed,
	}
	if got != want {
		t.Fatalf("counters over stop/cont moved by %+v, want %+v (%d dropped before stale, %d passed stale, %d dropped after SIGCONT)",
			got, want, dropped, passed, nResumed)
	}
	if port(t, st).StalePerS != 0 {
		t.Errorf("stale_per_s = %v in a tick after SIGCONT, want 0", port(t, st).StalePerS)
	}
}

// waitProcState waits until /proc/PID/stat shows state (e.g. 'T' stopped).
func waitProcState(t *testing.T, pid int, state byte) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() (bool, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("read state of pid %d: %v", pid, err)
		}
		// The state follows the parenthesised command name.
		i := strings.LastIndexByte(string(b), ')')
		return i >= 0 && i+2 < len(b) && b[i+2] == state, fmt.Errorf("stat %s", b)
	}, "pid %d in state %c", pid, state)
}

// TestLeftoverClsactFilterRemoved plants what a killed olcd leaves when it
// attached through the clsact fallback (kernels without tcx): a clsact qdisc
// with a direct-action cls_bpf filter named "olcd_tc" whose program outlives
// the process. The planted program drops every packet, so the leftover is
// visible from the peer. The next `olcd run` must remove the filter, free
// the program and let connections through.
func TestLeftoverClsactFilterRemoved(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	env.serve(t)

	l, err := env.nodeNL.LinkByName(env.NodeIf)
	if err != nil {
		t.Fatal(err)
	}
	qdisc := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT,
	}}
	if err := env.nodeNL.QdiscAdd(qdisc); err != nil {
		t.Fatalf("add clsact qdisc: %v", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "olcd_tc",
		Type:    ebpf.SchedCLS,
		License: "MIT",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 2), // TC_ACT_SHOT
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatalf("load the leftover program: %v", err)
	}
	if err := env.nodeNL.FilterAdd(&netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: l.Attrs().Index, Parent: netlink.HANDLE_MIN_INGRESS, Protocol: unix.ETH_P_ALL, Priority: 1,
		},
		Fd: prog.FD(), Name: "olcd_tc", DirectAction: true,
	}); err != nil {
		prog.Close()
		t.Fatalf("add the leftover filter: %v", err)
	}
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	leftID, _ := info.ID()
	prog.Close() // like the killed process: only the filter holds the program now

	progs := env.attachedProgs(t)
	if len(progs) != 1 || progs[0].Hook != "cls_bpf" || progs[0].Name != "olcd_tc" || progs[0].ID != leftID {
		t.Fatalf("planted leftover not listed as expected: %+v", progs)
	}
	if out := mustRun(t, "ip", "netns", "exec", env.Node, "tc", "filter", "show", "dev", env.NodeIf, "ingress"); !strings.Contains(out, "olcd_tc") {
		t.Fatalf("tc filter show does not list the planted filter:\n%s", out)
	}
	env.expectAllDropped(t, "with the leftover filter", 3)

	d := startDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever})
	progs = env.attachedProgs(t)
	if len(progs) != 1 || progs[0].Hook != "tcx" || progs[0].Name != "olcd_tc" {
		t.Fatalf("after the next instance started the kernel lists %+v, want only its tcx program", progs)
	}
	if out := mustRun(t, "ip", "netns", "exec", env.Node, "tc", "filter", "show", "dev", env.NodeIf, "ingress"); strings.TrimSpace(out) != "" {
		t.Fatalf("tc filter show dev %s ingress still lists filters:\n%s", env.NodeIf, out)
	}
	waitProgGone(t, leftID)
	env.expectAllOK(t, "after the next instance removed the leftover", 20)
	logData, err := os.ReadFile(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logData), "removed a leftover olcd filter") {
		t.Errorf("olcd log does not say it removed the leftover filter")
	}
}
