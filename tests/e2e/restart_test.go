package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// flowPort is the port of the established flows the restart tests keep
// sending on: protected like serverPort, so its SYNs are shed too.
const flowPort = 8081

// restartCase is one conn-disrupt test (issue 27): four established flows
// echo every 20 ms while olcd is stopped with SIGTERM and started again
// three times in a row, and not one flow message fails; beside runs the
// case's own probes until stop closes and returns their summary and final
// check, restarted checks the daemon after each restart (before: the
// programs attached before that SIGTERM).
type restartCase struct {
	name      string
	threshold float64
	shed      bool // the node sheds every new connection (p = 1) before the restarts
	beside    func(env *netEnv, d *olcd, stop <-chan struct{}, wg *sync.WaitGroup) (summary func() string, check func(t *testing.T))
	restarted func(t *testing.T, env *netEnv, d *olcd, round int, before []attachedProg)
}

// TestRestart runs the conn-disrupt cases:
//   - KeepsProtection: a node sheds every new connection (p = 1) while the
//     flows send: every probing SYN is dropped (protection has no gap), the
//     drop probability in the pinned policies map never reads 0, and after
//     each restart the attached program uses the policies map the pins hold
//     (map IDs compared).
//   - NoFailedConnections: a node that does not shed, new connections every
//     20 ms (50/s, well under the loadgen server's capacity): not one
//     connection fails, and nothing is dropped (the drop guard).
func TestRestart(t *testing.T) {
	for _, rc := range []restartCase{
		{name: "KeepsProtection", threshold: thresholdAlways, shed: true, beside: probeShedding,
			restarted: func(t *testing.T, env *netEnv, d *olcd, round int, before []attachedProg) {
				after := env.attachedProgs(t)
				if len(before) != 1 || len(after) != 1 || after[0].ID == before[0].ID {
					t.Fatalf("round %d: programs %+v before, %+v after: want one, replaced", round, before, after)
				}
				checkMapsShared(t, d.pinDir, after[0].ID)
				d.waitShedding(t)
			}},
		{name: "NoFailedConnections", threshold: thresholdNever, beside: connectEvery20ms,
			restarted: func(t *testing.T, _ *netEnv, d *olcd, _ int, _ []attachedProg) {
				d.nextTick(t, d.mustStatus(t))
			}},
	} {
		t.Run(rc.name, rc.run)
	}
}

func (rc restartCase) run(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	env.serve(t)
	env.ServeTCP(t, flowPort, 64, time.Minute, func(in []byte) []byte { return in })
	d := startDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: rc.threshold, Ports: []int{serverPort, flowPort}})

	// Established before the shedding starts.
	const nFlows = 4
	var flows []net.Conn
	for range nFlows {
		var c net.Conn
		if err := env.InPeer(func() (err error) {
			c, err = net.DialTimeout("tcp", netip.AddrPortFrom(env.NodeIP, flowPort).String(), passTimeout)
			return err
		}); err != nil {
			t.Fatalf("open a flow: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		flows = append(flows, c)
	}
	if rc.shed {
		burnCPU(t)
		d.waitShedding(t)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var flowMsgs, flowErrs atomic.Int64
	var firstFlowErr atomic.Value
	for i, c := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if err := echoOnce(c, fmt.Sprintf("flow %d msg %d", i, n)); err != nil {
					flowErrs.Add(1)
					firstFlowErr.CompareAndSwap(nil, fmt.Errorf("flow %d: %w", i, err))
					return
				}
				flowMsgs.Add(1)
			}
		}()
	}
	summary, check := rc.beside(env, d, stop, &wg)

	var gaps []time.Duration
	for round := 1; round <= 3; round++ {
		before := env.attachedProgs(t)
		t0 := time.Now()
		if err := d.signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if !d.wait(10 * time.Second) {
			t.Fatalf("round %d: olcd did not stop within 10s of SIGTERM", round)
		}
		d.logPath = fmt.Sprintf("%s.%d", d.logPath, round)
		d.start(t)
		gaps = append(gaps, time.Since(t0))
		rc.restarted(t, env, d, round, before)
	}
	close(stop)
	wg.Wait()
	t.Logf("3 restarts, SIGTERM to ready: %v; %d flow messages (%d failed); %s", gaps, flowMsgs.Load(), flowErrs.Load(), summary())
	if n := flowErrs.Load(); n != 0 {
		t.Errorf("%d established flows failed across the restarts (first: %v)", n, firstFlowErr.Load())
	}
	check(t)
}

// probeShedding sends probing SYNs back to back, each waited for
// synTimeout, and samples the pinned policies map's drop probability every
// 5 ms: the check fails if a SYN got through or p read 0.
func probeShedding(env *netEnv, d *olcd, stop <-chan struct{}, wg *sync.WaitGroup) (func() string, func(*testing.T)) {
	var probes, passed atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := env.connectOnce(synTimeout)
			var ne net.Error
			if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
				passed.Add(1) // answered or refused: the SYN got through
			}
			probes.Add(1)
		}
	}()
	var samples, zeros atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			p, ok := pinnedMinP(d.pinDir)
			if !ok {
				continue
			}
			samples.Add(1)
			if p == 0 {
				zeros.Add(1)
			}
		}
	}()
	summary := func() string {
		return fmt.Sprintf("%d probes (%d passed), %d policy samples (%d read p = 0)", probes.Load(), passed.Load(), samples.Load(), zeros.Load())
	}
	check := func(t *testing.T) {
		if n := passed.Load(); n != 0 {
			t.Errorf("%d of %d probing SYNs passed while the node shed (a gap in protection)", n, probes.Load())
		}
		if samples.Load() == 0 || zeros.Load() != 0 {
			t.Errorf("the pinned drop probability read 0 in %d of %d samples", zeros.Load(), samples.Load())
		}
	}
	return summary, check
}

// connectEvery20ms opens a new connection every 20 ms, each within
// passTimeout: the check fails if one did not connect.
func connectEvery20ms(env *netEnv, _ *olcd, stop <-chan struct{}, wg *sync.WaitGroup) (func() string, func(*testing.T)) {
	var conns, failed atomic.Int64
	var firstErr atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := env.connectOnce(passTimeout); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("new connection: %w", err))
					return
				}
				conns.Add(1)
			}()
		}
	}()
	summary := func() string {
		return fmt.Sprintf("%d new connections (%d failed, first: %v)", conns.Load(), failed.Load(), firstErr.Load())
	}
	check := func(t *testing.T) {
		if n := failed.Load(); n != 0 {
			t.Errorf("%d new connections failed across the restarts (first: %v)", n, firstErr.Load())
		}
	}
	return summary, check
}

// echoOnce writes msg on c and reads it back within a second.
func echoOnce(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	for got := 0; got < len(buf); {
		n, err := c.Read(buf[got:])
		if err != nil {
			return err
		}
		got += n
	}
	if string(buf) != msg {
		return fmt.Errorf("echo %q, want %q", buf, msg)
	}
	return nil
}

// pinnedMinP reads the pinned policies map (struct olcd_policy: drop_prob
// u32 at 0, flags u8 at 6) and returns the smallest drop probability of the
// protected ports, as the programs read it; false when it cannot be read.
func pinnedMinP(pinDir string) (uint32, bool) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, "olcd_policies"), nil)
	if err != nil {
		return 0, false
	}
	defer m.Close()
	var k uint32
	var v []byte
	minP, found := uint32(0), false
	it := m.Iterate()
	for it.Next(&k, &v) {
		if len(v) < 7 || v[6]&1 == 0 || v[6]&2 != 0 {
			continue
		}
		p := binary.LittleEndian.Uint32(v[0:4])
		if !found || p < minP {
			minP, found = p, true
		}
	}
	return minP, found && it.Err() == nil
}

// checkMapsShared fails unless the attached program uses the policies map
// pinned in pinDir: the maps the new daemon writes.
func checkMapsShared(t *testing.T, pinDir string, prog ebpf.ProgramID) {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, "olcd_policies"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := info.ID()
	p, err := ebpf.NewProgramFromID(prog)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pinfo, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := pinfo.MapIDs()
	if !slices.Contains(ids, want) {
		t.Fatalf("attached program %d uses maps %v, not the pinned policies map %d", prog, ids, want)
	}
}
