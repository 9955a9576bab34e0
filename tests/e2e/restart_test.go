package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/olcd/olcd/internal/testutil"
)

// flowPort is the port of the established flows the restart tests keep
// sending on: protected like serverPort, so its SYNs are shed too.
const flowPort = 8081

// restartCase is one conn-disrupt test (issue 27): four established flows
// echo every 20 ms while olcd goes through three steps of its kind (how),
// and not one flow message fails; beside runs the case's own probes until
// stop closes and returns their summary and final check, restarted checks
// the daemon after each restart or upgrade (before: the programs attached
// before that SIGTERM). A reload keeps the program: its check is the
// run's own.
type restartCase struct {
	name      string
	how       stepKind
	threshold float64
	shed      bool // the node sheds every new connection (p = 1) before the restarts
	beside    func(env *netEnv, d *olcd, stop <-chan struct{}, wg *sync.WaitGroup) (summary func() string, check func(t *testing.T))
	restarted func(t *testing.T, env *netEnv, d *olcd, round int, before []attachedProg)
}

// stepKind is what a conn-disrupt round does to the daemon.
type stepKind int

const (
	// restart: SIGTERM, then `olcd run` again (systemctl restart).
	restart stepKind = iota
	// upgrade: the first olcd is the earlier build (oldOlcd), and each
	// round is a restart with the other binary: new, old, new (an
	// upgrade, a downgrade, an upgrade).
	upgrade
	// reload: the interface list gains a second interface of the node
	// namespace, loses it, gains it again, each a SIGHUP: the daemon
	// attaches and detaches beside the protected interface, whose
	// program stays.
	reload
	// reattach: a restart whose config moves the attach mode: xdp, tc,
	// xdp. A reload cannot (attach is restart-only); the new daemon
	// detaches the other hook's link before it attaches its own, a gap
	// of one attach in the shedding (docs/datapath.md, "Take-over"):
	// its KeepsProtection row counts the probing SYNs that pass and
	// logs them, without failing on them.
	reattach
	// resize: a restart whose config sizes the pinned maps otherwise
	// (datapath.max_ports and syn_table_size doubled, back to the
	// defaults, doubled again): the new daemon recreates the maps of
	// another size, carries the policies over and replaces the program in
	// place (docs/datapath.md, "Resized maps"); it was refused until
	// `olcd detach`.
	resize
)

// TestRestart runs the conn-disrupt cases, each through restarts, an
// upgrade and downgrade with an earlier build (Upgrade…), config reloads
// that attach and detach (Reload…), restarts that move the attach mode
// (Reattach…) and restarts that resize the pinned maps (Resize…):
//   - KeepsProtection: a node sheds every new connection (p = 1) while the
//     flows send: every probing SYN is dropped (protection has no gap; but
//     in Reattach, which has one of one attach and counts the SYNs), the
//     drop probability in the pinned policies map never reads 0, and after
//     each restart the attached program uses the policies map the pins hold
//     (map IDs compared).
//   - NoFailedConnections: a node that does not shed, new connections every
//     20 ms (50/s, well under the loadgen server's capacity): not one
//     connection fails, and nothing is dropped (the drop guard).
func TestRestart(t *testing.T) {
	keeps := func(t *testing.T, env *netEnv, d *olcd, round int, before []attachedProg) {
		after := env.attachedProgs(t)
		if len(before) != 1 || len(after) != 1 || after[0].ID == before[0].ID {
			t.Fatalf("round %d: programs %+v before, %+v after: want one, replaced", round, before, after)
		}
		checkMapsShared(t, d.pinDir, after[0].ID)
		d.waitShedding(t)
	}
	ticks := func(t *testing.T, _ *netEnv, d *olcd, _ int, _ []attachedProg) {
		d.nextTick(t, d.mustStatus(t))
	}
	for _, how := range []struct {
		prefix string
		kind   stepKind
	}{{"", restart}, {"Upgrade", upgrade}, {"Reload", reload}, {"Reattach", reattach}, {"Resize", resize}} {
		for _, rc := range []restartCase{
			{name: "KeepsProtection", threshold: thresholdAlways, shed: true, beside: probeShedding(how.kind == reattach), restarted: keeps},
			{name: "NoFailedConnections", threshold: thresholdNever, beside: connectEvery20ms, restarted: ticks},
		} {
			rc.how = how.kind
			t.Run(how.prefix+rc.name, rc.run)
		}
	}
}

func (rc restartCase) run(t *testing.T) {
	requireRoot(t)
	var oldPath, oldRev string
	if rc.how == upgrade {
		oldPath, oldRev = oldOlcd(t)
	}
	env := newNetEnv(t)
	env.serve(t)
	env.ServeTCP(t, flowPort, 64, time.Minute, func(in []byte) []byte { return in })
	cfg := daemonConfig{Mode: "enforce", Attach: "tc", Threshold: rc.threshold, Ports: []int{serverPort, flowPort}}
	d := prepareDaemon(t, env, cfg)
	d.bin = oldPath // the earlier build first; "" (this build) unless upgrading
	d.start(t)
	var extra string
	if rc.how == reload {
		extra = addSecondLink(t, env)
	}
	tags := []string{attachedTag(t, env)}

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
		if rc.how == reload {
			reloadInterfaces(t, env, d, cfg, extra, round)
			gaps = append(gaps, time.Since(t0))
			if after := env.attachedProgs(t); !slices.Equal(after, before) {
				t.Fatalf("round %d: programs %+v before the reload, %+v after: want the same", round, before, after)
			}
			checkMapsShared(t, d.pinDir, before[0].ID)
			// Two ticks on the reloaded config with the flows and
			// probes running, still shedding where it shed.
			d.nextTick(t, d.nextTick(t, d.mustStatus(t)))
			if rc.shed {
				d.waitShedding(t)
			}
			continue
		}
		d.stop(t, fmt.Sprintf("round %d", round))
		d.logPath = fmt.Sprintf("%s.%d", d.logPath, round)
		wantHook := "tcx"
		if rc.how == reattach {
			c := cfg
			if round%2 == 1 {
				c.Attach, wantHook = "xdp", "xdp"
			}
			writeFileAtomic(t, d.realCfg, renderConfig(t, startedConfig(d, c)))
		}
		if rc.how == resize {
			c := cfg
			if round%2 == 1 {
				c.MaxPorts, c.SYNTableSize = 2048, 131072
			}
			writeFileAtomic(t, d.realCfg, renderConfig(t, startedConfig(d, c)))
		}
		if rc.how == upgrade {
			d.bin = "" // rounds 1 and 3: this build
			if round == 2 {
				d.bin = oldPath
			}
		}
		d.start(t)
		gaps = append(gaps, time.Since(t0))
		if rc.how == resize {
			log, err := os.ReadFile(d.logPath)
			i := strings.Index(string(log), "pinned maps of another size recreated")
			if err != nil || i < 0 {
				t.Fatalf("round %d: the restart's log does not say it recreated the resized maps (%v):\n%s", round, err, log)
			}
			if round == 1 {
				line, _, _ := strings.Cut(string(log[i:]), "\n")
				t.Logf("round 1 logged: %s", line)
			}
		}
		rc.restarted(t, env, d, round, before)
		if after := env.attachedProgs(t); len(after) != 1 || after[0].Hook != wantHook {
			t.Fatalf("round %d: programs %+v after the restart, want one on %s", round, after, wantHook)
		}
		tags = append(tags, attachedTag(t, env))
	}
	close(stop)
	wg.Wait()
	what := map[stepKind]string{restart: "3 restarts, SIGTERM to ready", reload: "3 reloads, SIGHUP to applied",
		reattach: "3 restarts attached by xdp, tc, xdp, SIGTERM to ready",
		resize:   "3 restarts with datapath.max_ports 2048, 1024, 2048, SIGTERM to ready",
		upgrade:  fmt.Sprintf("old %.7s → new → old → new, SIGTERM to ready", oldRev)}[rc.how]
	t.Logf("%s: %v; %d flow messages (%d failed); %s", what, gaps, flowMsgs.Load(), flowErrs.Load(), summary())
	if n := flowErrs.Load(); n != 0 {
		t.Errorf("%d established flows failed across the restarts (first: %v)", n, firstFlowErr.Load())
	}
	check(t)
	if rc.how == upgrade {
		// old, new, old, new: the upgrade replaced the program by
		// another one each time.
		if tags[0] != tags[2] || tags[1] != tags[3] || tags[0] == tags[1] {
			t.Errorf("attached program tags %v (old, new, old, new): want two alternating tags", tags)
		}
		t.Logf("program tags: old %s, new %s", tags[0], tags[1])
	}
}

// attachedTag is the tag of the one program attached to the node's
// interface.
func attachedTag(t *testing.T, env *netEnv) string {
	t.Helper()
	progs := env.attachedProgs(t)
	if len(progs) != 1 {
		t.Fatalf("programs on %s: %+v, want one", env.NodeIf, progs)
	}
	return progTag(t, progs[0].ID)
}

// addSecondLink adds a veth pair inside the node namespace (removed with
// it; both ends there, so no traffic of the test crosses it) and returns
// one end, for the reload rows to attach and detach.
func addSecondLink(t *testing.T, env *netEnv) string {
	t.Helper()
	const name = "otreload0"
	if err := env.nodeNL.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "otreload1"}); err != nil {
		t.Fatalf("add veth %s: %v", name, err)
	}
	l, err := env.nodeNL.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.nodeNL.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	return name
}

// reloadInterfaces rewrites the config with extra listed (odd rounds) or
// not (even rounds), sends SIGHUP, waits until the reload is counted, and
// checks that extra is attached or detached, one program on it or none.
func reloadInterfaces(t *testing.T, env *netEnv, d *olcd, cfg daemonConfig, extra string, round int) {
	t.Helper()
	ok0 := mustMetric(t, d.scrape(t), "olcd_config_reloads_total")
	c := startedConfig(d, cfg)
	want := 0
	if round%2 == 1 {
		c.Iface, want = c.Iface+", "+extra, 1
	}
	writeFileAtomic(t, d.realCfg, renderConfig(t, c))
	if err := d.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	d.pollMetric(t, "olcd_config_reloads_total", ok0+1)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() (bool, error) {
		return len(env.attachedProgsOn(t, extra)) == want, nil
	}, "round %d: %d programs on %s after the reload", round, want, extra)
	if st := d.mustStatus(t); len(st.Interfaces) != 1+want {
		t.Fatalf("round %d: status lists interfaces %+v, want %d", round, st.Interfaces, 1+want)
	}
}

// probeShedding sends probing SYNs back to back, each waited for
// synTimeout, and samples the pinned policies map's drop probability every
// 5 ms: the check fails if a SYN got through or p read 0. With gap (the
// restarts that move the hook, reattach, have a known gap of one attach)
// SYNs that pass are counted, not failed on; p must still never read 0.
func probeShedding(gap bool) func(env *netEnv, d *olcd, stop <-chan struct{}, wg *sync.WaitGroup) (func() string, func(*testing.T)) {
	return func(env *netEnv, d *olcd, stop <-chan struct{}, wg *sync.WaitGroup) (func() string, func(*testing.T)) {
		return probeSheddingFor(env, d, stop, wg, gap)
	}
}

func probeSheddingFor(env *netEnv, d *olcd, stop <-chan struct{}, wg *sync.WaitGroup, gap bool) (func() string, func(*testing.T)) {
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
		if n := passed.Load(); n != 0 && !gap {
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
	ids, _ := progInfo(t, prog).MapIDs()
	if !slices.Contains(ids, want) {
		t.Fatalf("attached program %d uses maps %v, not the pinned policies map %d", prog, ids, want)
	}
}
