package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
)

func TestProbabilityToFixed(t *testing.T) {
	tests := []struct {
		p    float64
		want uint32
	}{
		{0, 0},
		{-0.5, 0},
		{math.NaN(), 0},
		{math.Inf(-1), 0},
		{1, math.MaxUint32},
		{1.5, math.MaxUint32},
		{math.Inf(1), math.MaxUint32},
		{0.5, 1 << 31},
		{0.25, 1 << 30},
		{1e-12, 1},                      // nonzero never becomes "never"
		{1 - 1e-12, math.MaxUint32 - 1}, // below 1 never becomes "always"
		{1.0 / (1 << 32), 1},            // one step
		{3.0 / (1 << 33), 2},            // 1.5 steps rounds to even
	}
	for _, tt := range tests {
		if got := ProbabilityToFixed(tt.p); got != tt.want {
			t.Errorf("ProbabilityToFixed(%v) = %d, want %d", tt.p, got, tt.want)
		}
	}
	for _, v := range []uint32{0, 1, 1 << 31, math.MaxUint32 - 1, math.MaxUint32} {
		if got := ProbabilityToFixed(FixedToProbability(v)); got != v {
			t.Errorf("round trip of %d gives %d", v, got)
		}
	}
}

// setup loads a datapath with one protected TCP port 8080 (and UDP 53) in
// enforce mode at probability p, with a fresh heartbeat.
func setup(t *testing.T, cfg Config, action olc.Action, p float64) *Datapath {
	t.Helper()
	d := loadTest(t, cfg)
	must(t, d.SetPolicies([]PortPolicy{
		{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}, Mode: olc.ModeEnforce, Action: action, DropProbability: p},
		{Key: olc.PortKey{Proto: olc.ProtoUDP, Port: 53}, Mode: olc.ModeEnforce, Action: action, DropProbability: p},
	}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	return d
}

var tcp8080 = olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}

// repeat runs a SYN to tcp8080 n times in one BPF_PROG_TEST_RUN call and
// returns the port's new, passed and dropped counts over those n runs. A
// call a signal interrupts (EINTR: the test binary's children exiting) is
// run again whole by cilium/ebpf after some of its runs counted: such a
// call counts more than n and is made again, up to five times.
func repeat(t *testing.T, d *Datapath, h hook, frame []byte, n uint32) Counters {
	t.Helper()
	var c Counters
	for range 5 {
		base := stats(t, d).Ports[tcp8080]
		if _, err := d.prog(h).Run(&ebpf.RunOptions{Data: frame, Repeat: n}); err != nil {
			t.Fatalf("run %s: %v", h, err)
		}
		now := stats(t, d).Ports[tcp8080]
		c = Counters{NewConns: now.NewConns - base.NewConns, Passed: now.Passed - base.Passed, Dropped: now.Dropped - base.Dropped}
		if c.NewConns == uint64(n) {
			break
		}
	}
	return c
}

// TestDropProbability: p = 0 never drops, p = 1 always drops, p = 0.25 drops
// 25 % ± 2 % of 100 000 SYNs, through both programs.
func TestDropProbability(t *testing.T) {
	const n = 100000
	tests := []struct {
		p        float64
		min, max uint64
	}{
		{0, 0, 0},
		{1, n, n},
		{0.25, n * 23 / 100, n * 27 / 100},
	}
	for _, h := range hooks {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/p=%v", h, tt.p), func(t *testing.T) {
				d := setup(t, Config{StaleAfter: time.Hour}, olc.ActionDrop, tt.p)
				c := repeat(t, d, h, syn4(8080, 7), n)
				if c.NewConns != n {
					t.Fatalf("new connections %d, want %d", c.NewConns, n)
				}
				if c.Dropped < tt.min || c.Dropped > tt.max {
					t.Errorf("dropped %d of %d at p=%v, want %d..%d", c.Dropped, n, tt.p, tt.min, tt.max)
				}
				if c.Passed != n-c.Dropped {
					t.Errorf("passed %d, want %d", c.Passed, n-c.Dropped)
				}
			})
		}
	}
}

// TestHeartbeatSeenAtOnce: the program keeps its heartbeat verdict for a
// jiffy (olcd_control.fresh), but every write of the control record clears
// it, so a new heartbeat counts from the next packet on, in both directions.
func TestHeartbeatSeenAtOnce(t *testing.T) {
	// Wide enough that "now" stays fresh however slowly a loaded machine
	// sets up and runs the subtest.
	const staleAfter = 30 * time.Second
	for _, h := range hooks {
		t.Run(string(h), func(t *testing.T) {
			d := setup(t, Config{StaleAfter: staleAfter}, olc.ActionDrop, 1)
			now, err := monotonicNow()
			must(t, err)
			if now < uint64(3*staleAfter) {
				t.Skipf("the monotonic clock is at %v, below the stale heartbeat this test writes", time.Duration(now))
			}
			for i, hb := range []uint64{now - uint64(3*staleAfter), now, 0, now, now - uint64(3*staleAfter)} {
				must(t, d.setHeartbeat(hb))
				want := verdictDrop
				if hb != now {
					want = verdictPass
				}
				if v, _ := run(t, d, h, syn4(8080, uint32(i))); v != want {
					t.Errorf("heartbeat %d (step %d): verdict %s, want %s", hb, i, v, want)
				}
			}
		})
	}
}

// TestDrawSequence: the draw is a generator in the program (olcd_draw), so
// beyond its average (TestDropProbability) its sequence must look random:
// at p = 0.5 over 20 000 single runs, half are dropped, a quarter of
// consecutive pairs are both dropped (no serial correlation), and no run of
// equal verdicts is long (the expected longest is about 14). Bounds are about
// 6 standard deviations wide.
func TestDrawSequence(t *testing.T) {
	const n = 20000
	for _, h := range hooks {
		t.Run(string(h), func(t *testing.T) {
			d := setup(t, Config{StaleAfter: time.Hour}, olc.ActionDrop, 0.5)
			frame := syn4(8080, 9)
			var dropped, pairs, same, longest int
			prev := verdict("")
			for range n {
				v, _ := run(t, d, h, frame)
				if v == verdictDrop {
					dropped++
					if prev == verdictDrop {
						pairs++
					}
				}
				if v == prev {
					same++
				} else {
					same = 1
				}
				longest = max(longest, same)
				prev = v
			}
			if dropped < n*48/100 || dropped > n*52/100 {
				t.Errorf("dropped %d of %d at p=0.5, want 48..52 %%", dropped, n)
			}
			if pairs < n*23/100 || pairs > n*27/100 {
				t.Errorf("%d of %d consecutive pairs both dropped, want 23..27 %%", pairs, n-1)
			}
			if longest > 30 {
				t.Errorf("%d equal verdicts in a row", longest)
			}
		})
	}
}

// TestDrawState: a port's slot gets a random start of its draw on every CPU
// when the port gets it (the new-connection count the draw hashes, and with
// the even selection the accumulator's phase), so that no two CPUs or ports
// draw the same sequence; the counters still start at 0.
func TestDrawState(t *testing.T) {
	for _, sel := range []Selection{SelectRandom, SelectEven} {
		t.Run(sel.String(), func(t *testing.T) {
			d := setup(t, Config{StaleAfter: time.Hour, Selection: sel}, olc.ActionDrop, 0.5)
			seen := make(map[uint32]string)
			for _, k := range []olc.PortKey{tcp8080, {Proto: olc.ProtoUDP, Port: 53}} {
				if c := stats(t, d).Ports[k]; c != (Counters{}) {
					t.Errorf("%s starts with counters %+v", k, c)
				}
				for cpu, v := range drawStarts(t, d, k) {
					at := fmt.Sprintf("%s on CPU %d", k, cpu)
					if other, ok := seen[v]; ok {
						t.Errorf("%s starts at the state of %s (%#x)", at, other, v)
					}
					seen[v] = at
				}
			}
		})
	}
}

// drawStarts returns per CPU what a port's draw starts from: its slot's
// new-connection count, or with the even selection its accumulator.
func drawStarts(t *testing.T, d *Datapath, k olc.PortKey) []uint32 {
	t.Helper()
	var out []uint32
	if d.cfg.Selection == SelectEven {
		if err := d.objs.OlcdEven.Lookup(uint32(d.slots[k]), &out); err != nil {
			t.Fatalf("read even accumulator of %s: %v", k, err)
		}
		return out
	}
	var per []olcdOlcdCounters
	if err := d.objs.OlcdStats.Lookup(uint32(d.slots[k]), &per); err != nil {
		t.Fatalf("read slot of %s: %v", k, err)
	}
	for _, c := range per {
		out = append(out, c.NewConns)
	}
	return out
}

// drawModel is olcd_draw and olcd_select (bpf/olcd.c) in Go, started from
// a slot's draw state on one CPU (drawStarts): what the datapath selects,
// packet by packet, when every packet is a new connection that draws.
type drawModel struct {
	state uint32
	even  bool
}

func (m *drawModel) selects(p uint32) bool {
	if p == math.MaxUint32 {
		return true
	}
	if m.even {
		sum := uint64(m.state) + uint64(p)
		m.state = uint32(sum)
		return sum>>32 != 0
	}
	m.state++ // olcd_decide counts the connection before its draw
	x := m.state
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x < p
}

// TestDrawSeed: with Config.DrawSeed the draw is fixed. On one CPU, the
// same seed selects the same SYNs on every load and another seed others;
// and the datapath selects exactly what the Go model of the draw does from
// the seeded state, for both selections and both programs.
func TestDrawSeed(t *testing.T) {
	const n, p = 200, 0.3
	for _, sel := range []Selection{SelectRandom, SelectEven} {
		for _, h := range hooks {
			t.Run(fmt.Sprintf("%s/%v", h, sel), func(t *testing.T) {
				// verdicts loads a datapath with seed and runs n SYNs on
				// one CPU; start is that CPU's state of the port's slot.
				verdicts := func(seed uint64) (got []verdict, start uint32) {
					d := setup(t, Config{StaleAfter: time.Hour, Selection: sel, DrawSeed: seed}, olc.ActionDrop, p)
					var rets []uint32
					var err error
					onOneCPU(t, func() {
						var set unix.CPUSet
						if err = unix.SchedGetaffinity(0, &set); err != nil {
							return
						}
						for cpu, v := range drawStarts(t, d, tcp8080) {
							if set.IsSet(cpu) {
								start = v
							}
						}
						for i := range n {
							var ret uint32
							if ret, err = d.prog(h).Run(&ebpf.RunOptions{Data: syn4(8080, uint32(i+1))}); err != nil {
								return
							}
							rets = append(rets, ret)
						}
					})
					must(t, err)
					for _, r := range rets {
						got = append(got, toVerdict(t, h, r))
					}
					return got, start
				}
				a, startA := verdicts(7)
				b, startB := verdicts(7)
				c, _ := verdicts(8)
				if startA != startB || !slices.Equal(a, b) {
					t.Errorf("seed 7 twice: start states %#x and %#x, verdicts differ: %v", startA, startB, !slices.Equal(a, b))
				}
				if slices.Equal(a, c) {
					t.Errorf("seeds 7 and 8 select the same %d SYNs", n)
				}
				m := drawModel{state: startA, even: sel == SelectEven}
				fixed, dropped := ProbabilityToFixed(p), 0
				for i, v := range a {
					want := verdictPass
					if m.selects(fixed) {
						want = verdictDrop
						dropped++
					}
					if v != want {
						t.Fatalf("SYN %d: %s, the model of the draw says %s", i+1, v, want)
					}
				}
				t.Logf("%d of %d dropped at p = %v", dropped, n, p)
			})
		}
	}
}

// TestFailOpen: with the heartbeat older than StaleAfter (or never written)
// p = 1 drops nothing and counts stale; a fresh one drops again.
func TestFailOpen(t *testing.T) {
	const staleAfter = 2 * time.Second
	// Heartbeats relative to the moment of each run: a loaded machine can
	// take seconds to load the datapaths of the earlier cases.
	tests := []struct {
		name      string
		heartbeat func(now uint64) uint64
		stale     bool
	}{
		{"fresh", func(now uint64) uint64 { return now }, false},
		{"older than stale-after", func(now uint64) uint64 { return now - uint64(3*staleAfter) }, true},
		{"never written", func(uint64) uint64 { return 0 }, true},
		{"ahead of the clock", func(now uint64) uint64 { return now + uint64(time.Minute) }, false},
	}
	for _, h := range hooks {
		for _, tt := range tests {
			t.Run(string(h)+"/"+tt.name, func(t *testing.T) {
				d := setup(t, Config{StaleAfter: staleAfter}, olc.ActionDrop, 1)
				now, err := monotonicNow()
				must(t, err)
				must(t, d.setHeartbeat(tt.heartbeat(now)))
				got, _ := run(t, d, h, syn4(8080, 1))
				c := stats(t, d).Ports[tcp8080]
				want, wantC := verdictDrop, Counters{NewConns: 1, Dropped: 1}
				if tt.stale {
					want, wantC = verdictPass, Counters{NewConns: 1, Passed: 1, Stale: 1}
				}
				if got != want || c != wantC {
					t.Errorf("verdict %s, counters %+v; want %s, %+v", got, c, want, wantC)
				}
			})
		}
	}
}

// TestHeartbeatTimeNamespace: in a time namespace whose CLOCK_MONOTONIC is
// shifted ahead of or behind the host's (which bpf_ktime_get_ns reads), a
// fresh heartbeat still lets the datapath shed, and one that stopped still
// fails open. The test runs itself again under unshare(1).
func TestHeartbeatTimeNamespace(t *testing.T) {
	if os.Getenv("OLCD_TIMENS_CHILD") != "" {
		off, err := timensOffset()
		must(t, err)
		if off == 0 {
			t.Fatal("not in a shifted time namespace")
		}
		d := setup(t, Config{StaleAfter: 300 * time.Millisecond}, olc.ActionDrop, 1)
		if v, _ := run(t, d, hookXDP, syn4(8080, 1)); v != verdictDrop {
			t.Errorf("offset %v, fresh heartbeat: %s, want drop", time.Duration(off), v)
		}
		// A heartbeat that stopped 0.5 s ago, on the clock the daemon
		// reads (the namespace's, corrected to the host's).
		now, err := monotonicNow()
		must(t, err)
		must(t, d.setHeartbeat(now-uint64(500*time.Millisecond)))
		if v, _ := run(t, d, hookXDP, syn4(8080, 2)); v != verdictPass {
			t.Errorf("offset %v, heartbeat 0.5 s old, stale after 0.3 s: %s, want pass (fail-open)", time.Duration(off), v)
		}
		return
	}
	requireRoot(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare(1) (util-linux) to enter a time namespace")
	}
	if _, err := os.Stat("/proc/self/timens_offsets"); err != nil {
		t.Skip("kernel without time namespaces (CONFIG_TIME_NS)")
	}
	offsets := []int{3600}
	var up float64
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		fmt.Sscan(string(b), &up)
	}
	if up > 120 { // the shifted clock may not go below zero
		offsets = append(offsets, -60)
	}
	for _, off := range offsets {
		t.Run(fmt.Sprintf("offset=%+ds", off), func(t *testing.T) {
			cmd := exec.Command(unshare, "--time", fmt.Sprintf("--monotonic=%d", off),
				os.Args[0], "-test.run=^TestHeartbeatTimeNamespace$", "-test.count=1")
			cmd.Env = append(os.Environ(), "OLCD_TIMENS_CHILD=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("in a time namespace: %v\n%s", err, out)
			}
		})
	}
}

// TestModesAndExceptions: observe mode at p = 1 passes and counts
// would-drop; exempt ports and source prefixes pass and count exempt; the
// global mode caps the port's.
func TestModesAndExceptions(t *testing.T) {
	type exc struct {
		ports   []olc.PortKey
		sources []string
	}
	tests := []struct {
		name       string
		global     olc.Mode
		port       olc.Mode
		exc        exc
		frame      []byte
		key        olc.PortKey
		want       verdict
		wantCounts Counters
	}{
		{"enforce drops", olc.ModeEnforce, olc.ModeEnforce, exc{}, syn4(8080, 1), tcp8080, verdictDrop,
			Counters{NewConns: 1, Dropped: 1}},
		{"global observe", olc.ModeObserve, olc.ModeEnforce, exc{}, syn4(8080, 1), tcp8080, verdictPass,
			Counters{NewConns: 1, Passed: 1, WouldDrop: 1}},
		{"port observe", olc.ModeEnforce, olc.ModeObserve, exc{}, syn4(8080, 1), tcp8080, verdictPass,
			Counters{NewConns: 1, Passed: 1, WouldDrop: 1}},
		{"global off", olc.ModeOff, olc.ModeEnforce, exc{}, syn4(8080, 1), tcp8080, verdictPass,
			Counters{NewConns: 1, Passed: 1}},
		{"exempt port", olc.ModeEnforce, olc.ModeEnforce, exc{ports: []olc.PortKey{tcp8080}}, syn4(8080, 1), tcp8080, verdictPass,
			Counters{NewConns: 1, Passed: 1, Exempt: 1}},
		{"exempt udp port", olc.ModeEnforce, olc.ModeEnforce, exc{ports: []olc.PortKey{{Proto: olc.ProtoUDP, Port: 53}}}, udp4(53), olc.PortKey{Proto: olc.ProtoUDP, Port: 53}, verdictPass,
			Counters{NewConns: 1, Passed: 1, Exempt: 1}},
		{"exempt IPv4 source", olc.ModeEnforce, olc.ModeEnforce, exc{sources: []string{"192.0.2.0/24"}}, syn4(8080, 1), tcp8080, verdictPass,
			Counters{NewConns: 1, Passed: 1, Exempt: 1}},
		{"other IPv4 source", olc.ModeEnforce, olc.ModeEnforce, exc{sources: []string{"192.0.3.0/24", "2001:db8::/32"}}, syn4(8080, 1), tcp8080, verdictDrop,
			Counters{NewConns: 1, Dropped: 1}},
		{"exempt IPv6 source", olc.ModeEnforce, olc.ModeEnforce, exc{sources: []string{"2001:db8::1/128"}}, syn6(8080, 1), tcp8080, verdictPass,
			Counters{NewConns: 1, Passed: 1, Exempt: 1}},
		{"other IPv6 source", olc.ModeEnforce, olc.ModeEnforce, exc{sources: []string{"2001:db8::2/128", "192.0.2.10/32"}}, syn6(8080, 1), tcp8080, verdictDrop,
			Counters{NewConns: 1, Dropped: 1}},
		{"every IPv4 source", olc.ModeEnforce, olc.ModeEnforce, exc{sources: []string{"0.0.0.0/0"}}, syn4(8080, 1), tcp8080, verdictPass,
			Counters{NewConns: 1, Passed: 1, Exempt: 1}},
		{"every IPv6 source", olc.ModeEnforce, olc.ModeEnforce, exc{sources: []string{"::/0"}}, syn6(8080, 1), tcp8080, verdictPass,
			Counters{NewConns: 1, Passed: 1, Exempt: 1}},
		{"IPv4 everything does not cover IPv6", olc.ModeEnforce, olc.ModeEnforce, exc{sources: []string{"0.0.0.0/0"}}, syn6(8080, 1), tcp8080, verdictDrop,
			Counters{NewConns: 1, Dropped: 1}},
		{"overlapping prefixes", olc.ModeEnforce, olc.ModeEnforce, exc{sources: []string{"192.0.0.0/8", "192.0.2.0/24", "192.0.2.10/32"}}, syn4(8080, 1), tcp8080, verdictPass,
			Counters{NewConns: 1, Passed: 1, Exempt: 1}},
	}
	for _, h := range hooks {
		for _, tt := range tests {
			t.Run(string(h)+"/"+tt.name, func(t *testing.T) {
				d := loadTest(t, Config{StaleAfter: time.Hour})
				must(t, d.SetPolicies([]PortPolicy{
					{Key: tcp8080, Mode: tt.port, Action: olc.ActionDrop, DropProbability: 1},
					{Key: olc.PortKey{Proto: olc.ProtoUDP, Port: 53}, Mode: tt.port, Action: olc.ActionDrop, DropProbability: 1},
				}))
				var prefixes []netip.Prefix
				for _, s := range tt.exc.sources {
					prefixes = append(prefixes, netip.MustParsePrefix(s))
				}
				must(t, d.SetExceptions(tt.exc.ports, prefixes))
				must(t, d.SetMode(tt.global))
				must(t, d.Heartbeat())
				got, _ := run(t, d, h, tt.frame)
				c := stats(t, d).Ports[tt.key]
				c.SYNRetransmits = 0
				if got != tt.want || c != tt.wantCounts {
					t.Errorf("verdict %s, counters %+v; want %s, %+v", got, c, tt.want, tt.wantCounts)
				}
			})
		}
	}
}

// TestExceptionWithoutPolicy: a TCP exception port without a policy counts
// in its own slot as exempt (Stats.ExemptPorts), so its health checks can be
// seen per port; a UDP one is not a request and counts nothing. Removing the
// exception takes the port back to plain "other".
func TestExceptionWithoutPolicy(t *testing.T) {
	for _, h := range hooks {
		t.Run(string(h), func(t *testing.T) {
			d := setup(t, Config{StaleAfter: time.Hour}, olc.ActionDrop, 1)
			ssh, ntp := olc.PortKey{Proto: olc.ProtoTCP, Port: 22}, olc.PortKey{Proto: olc.ProtoUDP, Port: 123}
			must(t, d.SetExceptions([]olc.PortKey{ssh, ntp}, nil))
			run(t, d, h, syn4(22, 1))
			run(t, d, h, syn4(22, 2))
			run(t, d, h, udp4(123))
			s := stats(t, d)
			if want := (Counters{NewConns: 2, Passed: 2, Exempt: 2}); s.ExemptPorts[ssh] != want {
				t.Errorf("tcp/22 %+v, want %+v", s.ExemptPorts[ssh], want)
			}
			if want := (Counters{}); s.ExemptPorts[ntp] != want || s.Other != want {
				t.Errorf("udp/123 %+v, other %+v: want nothing counted", s.ExemptPorts[ntp], s.Other)
			}
			must(t, d.SetExceptions(nil, nil))
			run(t, d, h, syn4(22, 1))
			s = stats(t, d)
			if want := (Counters{NewConns: 1, Passed: 1}); s.Other != want || len(s.ExemptPorts) != 0 {
				t.Errorf("other %+v, exempt ports %v; want %+v and none", s.Other, s.ExemptPorts, want)
			}
		})
	}
}

// TestExceptionSlotsYield: exception ports hold stats slots only while
// protected ports do not need them. With MaxPorts 2 and two exception ports,
// a second protected port takes one exception port's slot (that port counts
// in "other" again), the others keep counting, and the slot comes back when
// the protected port goes.
func TestExceptionSlotsYield(t *testing.T) {
	d := loadTest(t, Config{MaxPorts: 2, StaleAfter: time.Hour})
	a, b := olc.PortKey{Proto: olc.ProtoTCP, Port: 8081}, olc.PortKey{Proto: olc.ProtoTCP, Port: 8082}
	web, api := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}
	must(t, d.SetExceptions([]olc.PortKey{a, b}, nil))
	must(t, d.SetPolicies([]PortPolicy{{Key: web, Mode: olc.ModeEnforce, Action: olc.ActionDrop, Class: olc.ClassNormal}}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	h := hooks[0]
	run(t, d, h, syn4(8081, 1))
	run(t, d, h, syn4(8082, 1))
	s := stats(t, d)
	// Two slots: web has one, so one exception port has the other.
	if n := len(s.ExemptPorts); n != 1 {
		t.Fatalf("exception ports with a slot: %v, want one", s.ExemptPorts)
	}
	if got := s.ExemptPorts[a].Exempt + s.ExemptPorts[b].Exempt + s.Other.Exempt; got != 2 {
		t.Errorf("exempt counted %d times, want 2 (%v, other %+v)", got, s.ExemptPorts, s.Other)
	}
	must(t, d.SetPolicies([]PortPolicy{{Key: web, Mode: olc.ModeEnforce, Action: olc.ActionDrop, Class: olc.ClassNormal},
		{Key: api, Mode: olc.ModeEnforce, Action: olc.ActionDrop, Class: olc.ClassNormal}}))
	if s := stats(t, d); len(s.ExemptPorts) != 0 || len(s.Ports) != 2 {
		t.Errorf("after a second protected port: ports %v, exception ports %v; want 2 and none", s.Ports, s.ExemptPorts)
	}
	before := stats(t, d).Other.Exempt
	run(t, d, h, syn4(8081, 3))
	if got := stats(t, d).Other.Exempt - before; got != 1 {
		t.Errorf("an exception port without a slot counted %d in other, want 1", got)
	}
	must(t, d.SetPolicies([]PortPolicy{{Key: web, Mode: olc.ModeEnforce, Action: olc.ActionDrop, Class: olc.ClassNormal}}))
	run(t, d, h, syn4(8081, 4))
	if s := stats(t, d); len(s.ExemptPorts) != 1 || s.ExemptPorts[a].Exempt+s.ExemptPorts[b].Exempt != 1 {
		t.Errorf("after the protected port went: exception ports %v, want one slot back, counting from 0", s.ExemptPorts)
	}
}

// TestSYNRetransmits: the same SYN four times at p = 1 is 4 new connections
// and 3 retransmits; another ISN or another source is not a retransmit.
func TestSYNRetransmits(t *testing.T) {
	for _, h := range hooks {
		for _, fam := range []struct {
			name string
			syn  func(uint16, uint32) []byte
		}{{"ipv4", syn4}, {"ipv6", syn6}} {
			t.Run(string(h)+"/"+fam.name, func(t *testing.T) {
				d := setup(t, Config{StaleAfter: time.Hour}, olc.ActionDrop, 1)
				for range 4 {
					if v, _ := run(t, d, h, fam.syn(8080, 1000)); v != verdictDrop {
						t.Fatalf("verdict %s, want drop", v)
					}
				}
				want := Counters{NewConns: 4, Dropped: 4, SYNRetransmits: 3}
				if c := stats(t, d).Ports[tcp8080]; c != want {
					t.Fatalf("counters %+v, want %+v", c, want)
				}
				run(t, d, h, fam.syn(8080, 1001)) // a new ISN: a new connection attempt
				if c := stats(t, d).Ports[tcp8080]; c.SYNRetransmits != 3 {
					t.Errorf("a new ISN counted as a retransmit: %+v", c)
				}
			})
		}
	}
}

// TestRetransmitRules: with the rule "shed" a retransmit of a dropped SYN
// is dropped whatever the draw while p > 0, a first attempt is drawn as
// usual, and at p = 0 everything passes; "as-first" draws the retransmit;
// "last" passes every first attempt and draws retransmits; a UDP request,
// which has no retransmits, passes under "last".
func TestRetransmitRules(t *testing.T) {
	for _, h := range hooks {
		t.Run(string(h), func(t *testing.T) {
			d := setup(t, Config{StaleAfter: time.Hour}, olc.ActionDrop, 1)
			run(t, d, h, syn4(8080, 1)) // dropped at p = 1: remembered
			const tiny = 1e-6           // a draw practically never drops
			for _, tc := range []struct {
				name string
				p    float64
				rule olc.Retransmits
				isn  uint32
				want verdict
			}{
				{"retransmit, shed", tiny, olc.RetransmitsShed, 1, verdictDrop},
				{"first attempt, shed", tiny, olc.RetransmitsShed, 2, verdictPass},
				{"retransmit, as-first", tiny, olc.RetransmitsAsFirst, 1, verdictPass},
				{"retransmit, shed at p = 0", 0, olc.RetransmitsShed, 1, verdictPass},
				{"retransmit, last at p = 1", 1, olc.RetransmitsLast, 1, verdictDrop},
				{"first attempt, last at p = 1", 1, olc.RetransmitsLast, 3, verdictPass},
				{"retransmit, last, a draw that passes", tiny, olc.RetransmitsLast, 1, verdictPass},
				{"first attempt, as-first at p = 1", 1, olc.RetransmitsAsFirst, 4, verdictDrop},
			} {
				must(t, d.SetDropProbabilities(map[olc.PortKey]float64{tcp8080: tc.p}))
				must(t, d.SetRetransmits(map[olc.PortKey]olc.Retransmits{tcp8080: tc.rule}))
				if v, _ := run(t, d, h, syn4(8080, tc.isn)); v != tc.want {
					t.Errorf("%s: verdict %s, want %s %+v", tc.name, v, tc.want, stats(t, d).Ports[tcp8080])
				}
			}
			udp53 := olc.PortKey{Proto: olc.ProtoUDP, Port: 53}
			must(t, d.SetDropProbabilities(map[olc.PortKey]float64{udp53: 1}))
			must(t, d.SetRetransmits(map[olc.PortKey]olc.Retransmits{udp53: olc.RetransmitsLast}))
			if v, _ := run(t, d, h, udp4(53)); v != verdictPass {
				t.Errorf("a UDP request (no retransmits told apart), last at p = 1: verdict %s, want pass", v)
			}
			if err := d.SetRetransmits(map[olc.PortKey]olc.Retransmits{{Proto: olc.ProtoTCP, Port: 1}: olc.RetransmitsShed}); err == nil {
				t.Error("a port without a policy: no error")
			}
			if err := d.SetRetransmits(map[olc.PortKey]olc.Retransmits{tcp8080: 3}); err == nil {
				t.Error("an invalid rule: no error")
			}
		})
	}
}

// TestSYNTableLRU: with one set of four ways (SYNTableSize 4), a fifth
// dropped SYN evicts the least recently used one, where a retransmit counts
// as a use. The table's clock is the heartbeat (olcd_syn_clock), so the test
// moves it forward 2 ms per step (ahead of the real clock: still fresh).
func TestSYNTableLRU(t *testing.T) {
	for _, h := range hooks {
		t.Run(string(h), func(t *testing.T) {
			d := setup(t, Config{StaleAfter: time.Hour, SYNTableSize: 4}, olc.ActionDrop, 1)
			now, err := monotonicNow()
			must(t, err)
			steps := []struct {
				isn        uint32
				retransmit bool
			}{
				{1, false}, {2, false}, {3, false}, {4, false}, // the set is full
				{1, true},  // 1 is used again: 2 is now the oldest
				{5, false}, // evicts 2
				{2, false}, // gone: new again, evicts 3
				{1, true}, {4, true}, {5, true}, {2, true},
				{3, false}, // evicted by 2
			}
			var want uint64
			for i, s := range steps {
				must(t, d.setHeartbeat(now+uint64(i)*2_000_000))
				before := stats(t, d).Ports[tcp8080].SYNRetransmits
				if v, _ := run(t, d, h, syn4(8080, s.isn)); v != verdictDrop {
					t.Fatalf("step %d (ISN %d): verdict %s, want drop", i, s.isn, v)
				}
				got := stats(t, d).Ports[tcp8080].SYNRetransmits - before
				if s.retransmit {
					want++
				}
				if (got == 1) != s.retransmit {
					t.Errorf("step %d (ISN %d): counted as retransmit %v, want %v", i, s.isn, got == 1, s.retransmit)
				}
			}
			if c := stats(t, d).Ports[tcp8080]; c.SYNRetransmits != want {
				t.Errorf("retransmits %d, want %d", c.SYNRetransmits, want)
			}
		})
	}
}

// TestSYNRetransmitsMarkAndObserve: neither marking nor observing drops, so
// neither makes retransmits; a SYN dropped in enforce mode is still
// recognised after the port goes to observe.
func TestSYNRetransmitsMarkAndObserve(t *testing.T) {
	d := setup(t, Config{StaleAfter: time.Hour}, olc.ActionMark, 1)
	run(t, d, hookXDP, syn4(8080, 5))
	run(t, d, hookXDP, syn4(8080, 5))
	if c := stats(t, d).Ports[tcp8080]; c.SYNRetransmits != 0 || c.Marked != 2 {
		t.Errorf("mark: %+v, want 2 marked and no retransmits", c)
	}
	must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1}}))
	run(t, d, hookXDP, syn4(8080, 6))
	must(t, d.SetMode(olc.ModeObserve))
	run(t, d, hookXDP, syn4(8080, 6))
	if c := stats(t, d).Ports[tcp8080]; c.SYNRetransmits != 1 || c.WouldDrop != 1 {
		t.Errorf("observe after drop: %+v, want 1 retransmit and 1 would-drop", c)
	}
}

// TestMark: the mark action rewrites the DSCP (keeping ECN; IPv4 checksum
// still valid), sets skb->mark at TC, passes, and counts marked.
func TestMark(t *testing.T) {
	const dscp, fwmark = 46, 0x4f4c
	for _, h := range hooks {
		t.Run(string(h)+"/ipv4", func(t *testing.T) {
			d := setup(t, Config{StaleAfter: time.Hour, MarkDSCP: dscp, MarkFwmark: fwmark}, olc.ActionMark, 1)
			in := ipv4Frame(client4, server4, 6, 0x03, tcpSeg{40000, 8080, 1, tcpSYN}.bytes())
			got, out := run(t, d, h, in)
			if got != verdictPass {
				t.Fatalf("verdict %s, want pass", got)
			}
			ip := out[14:34]
			if ip[1] != dscp<<2|0x03 {
				t.Errorf("TOS %#x, want %#x", ip[1], dscp<<2|0x03)
			}
			if sum := ipv4Checksum(ip); sum != 0 {
				t.Errorf("IPv4 header checksum does not verify (%#x)", sum)
			}
			if c := stats(t, d).Ports[tcp8080]; c != (Counters{NewConns: 1, Passed: 1, Marked: 1}) {
				t.Errorf("counters %+v", c)
			}
		})
		t.Run(string(h)+"/ipv6", func(t *testing.T) {
			d := setup(t, Config{StaleAfter: time.Hour, MarkDSCP: dscp}, olc.ActionMark, 1)
			in := ipv6Frame(client6, server6, 0, 0xb9, hopByHop(6), tcpSeg{40000, 8080, 1, tcpSYN}.bytes())
			_, out := run(t, d, h, in)
			word := binary.BigEndian.Uint32(out[14:])
			if tc := uint8(word >> 20); tc != dscp<<2|0x01 {
				t.Errorf("traffic class %#x, want %#x", tc, dscp<<2|0x01)
			}
			if word>>28 != 6 || word&0xfffff != binary.BigEndian.Uint32(in[14:])&0xfffff {
				t.Errorf("version or flow label changed: %#x -> %#x", binary.BigEndian.Uint32(in[14:]), word)
			}
		})
	}
	for _, h := range hooks {
		t.Run(string(h)+"/keep-dscp", func(t *testing.T) {
			d := setup(t, Config{StaleAfter: time.Hour, MarkDSCP: dscp, MarkKeepDSCP: true}, olc.ActionMark, 1)
			in := ipv4Frame(client4, server4, 6, 0x03, tcpSeg{40000, 8080, 1, tcpSYN}.bytes())
			got, out := run(t, d, h, in)
			if got != verdictPass || string(out) != string(in) {
				t.Errorf("verdict %s, frame changed: %v", got, string(out) != string(in))
			}
			if c := stats(t, d).Ports[tcp8080]; c.Marked != 1 {
				t.Errorf("counters %+v, want 1 marked", c)
			}
		})
	}
	t.Run("tc/skb-mark", func(t *testing.T) {
		d := setup(t, Config{StaleAfter: time.Hour, MarkDSCP: dscp, MarkFwmark: fwmark}, olc.ActionMark, 1)
		var ctxIn, ctxOut skbContext
		opts := &ebpf.RunOptions{Data: syn4(8080, 1), Context: ctxIn, ContextOut: &ctxOut}
		if _, err := d.objs.OlcdTc.Run(opts); err != nil {
			t.Fatal(err)
		}
		if ctxOut.Mark != fwmark {
			t.Errorf("skb->mark %#x, want %#x", ctxOut.Mark, fwmark)
		}
	})
}

// skbContext is the head of struct __sk_buff as BPF_PROG_TEST_RUN takes it
// (uapi/linux/bpf.h); the kernel accepts a prefix.
type skbContext struct {
	Len, PktType, Mark uint32
	_                  [45]uint32
}

// TestUnclassified counts frames that could carry a connection but cannot be
// examined, and nothing else.
func TestUnclassified(t *testing.T) {
	requireRoot(t)
	byName := map[string]packetCase{}
	for _, c := range loadPacketCases(t) {
		byName[c.Name] = c
	}
	tests := []struct {
		name string
		want uint64
	}{
		{"vlan-5-deep-syn", 1},
		{"ipv6-9-ext-syn", 1},
		{"ipv6-ext-truncated", 1},
		{"ipv6-frag-nonfirst-udp", 1},
		{"ipv6-esp", 1},
		{"ipv4-frag-nonfirst", 1},
		{"ipv4-ihl4-bogus", 1},
		{"ipv4-tcp-truncated", 1},
		{"ipv4-tcp-doff4", 1},
		// Headers that do not fit in their IP packet, or packets the
		// frame cuts short (testdata/packets/lengths.json).
		{"ipv4-totlen-no-room-for-tcp", 1},
		{"ipv4-totlen-cuts-tcp-options", 1},
		{"ipv4-totlen-past-frame", 1},
		{"ipv4-totlen-below-ihl", 1},
		{"ipv4-tiny-first-fragment", 1},
		{"ipv4-mf-no-transport-header", 1},
		{"ipv4-syn-doff-past-frame", 1},
		{"ipv4-udp-length-0", 1},
		{"ipv4-udp-length-past-packet", 1},
		{"ipv4-udp-length-7", 1},
		{"ipv6-payload-cuts-tcp", 1},
		{"ipv6-payload-length-0", 1},
		{"ipv6-payload-past-frame", 1},
		{"ipv6-hbh-not-first", 1},
		{"ipv6-frag-first-cut-tcp", 1},
		{"ipv4-syn-ethernet-padding", 0},
		{"ipv6-udp-length-0", 0},
		{"ipv6-routing-type0-segleft0-syn", 0},
		{"arp", 0},
		{"ipv4-icmp-echo", 0},
		{"ipv6-icmpv6", 0},
		{"ipv4-tcp-ack", 0},
		{"ipv4-tcp-syn", 0},
	}
	d := loadTest(t, Config{})
	for _, h := range hooks {
		for _, tt := range tests {
			c, ok := byName[tt.name]
			if !ok {
				t.Fatalf("no packet case %q", tt.name)
			}
			before := stats(t, d).Unclassified
			run(t, d, h, c.frame)
			if got := stats(t, d).Unclassified - before; got != tt.want {
				t.Errorf("%s %s: unclassified +%d, want +%d", h, tt.name, got, tt.want)
			}
		}
	}
}

// TestTruncatedFrames cuts well-formed candidates short at every byte from
// the end of the Ethernet header on: Ethernet, each VLAN tag, every byte of
// the IPv4 header and its options, every IPv6 extension header, the TCP
// header up to its flags and its options, the UDP header. Every cut frame
// passes through both programs, counts as unclassified and moves no
// new-connection counter.
func TestTruncatedFrames(t *testing.T) {
	const ethHeaderLen = 14
	seg := tcpSeg{40000, 8080, 1, tcpSYN}.bytes()
	// Hop-by-Hop, AH (12 bytes), a first fragment (offset 0, M=1), TCP.
	chain := append(hopByHop(51), 44, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1)
	chain = append(chain, 6, 0, 0, 1, 0, 0, 0, 7)
	bases := []struct {
		name  string
		frame []byte
	}{
		{"ipv4-syn", syn4(8080, 1)},
		{"ipv4-options-syn", ipv4OptionsFrame(6, seg)},
		{"vlan-ipv4-syn", tagged(0x8100, syn4(8080, 1))},
		{"qinq-ipv4-syn", tagged(0x88a8, tagged(0x8100, syn4(8080, 1)))},
		{"ipv4-udp", udp4(8080)},
		{"ipv6-syn", syn6(8080, 1)},
		{"ipv6-hbh-ah-frag-syn", ipv6Frame(client6, server6, 0, 0, chain, seg)},
		{"vlan-ipv6-syn", tagged(0x8100, syn6(8080, 1))},
		{"ipv6-udp", udp6(8080)},
	}
	d := loadTest(t, Config{StaleAfter: time.Hour})
	must(t, d.SetPolicies([]PortPolicy{
		{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1},
		{Key: olc.PortKey{Proto: olc.ProtoUDP, Port: 8080}, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1},
	}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	for _, b := range bases {
		for _, h := range hooks {
			if v, _ := run(t, d, h, b.frame); v != verdictDrop {
				t.Fatalf("%s %s: the whole frame is not dropped (%s): the base is wrong", h, b.name, v)
			}
			for n := ethHeaderLen; n < len(b.frame); n++ {
				before := stats(t, d)
				opts := &ebpf.RunOptions{Data: b.frame[:n]}
				ret, err := d.prog(h).Run(opts)
				if err != nil {
					// The skb test runner refuses L3 headers shorter
					// than their fixed part before the program runs.
					if h == hookTC && errors.Is(err, unix.EINVAL) && n < ethHeaderLen+40 {
						continue
					}
					t.Fatalf("%s %s cut to %d bytes: %v", h, b.name, n, err)
				}
				after := stats(t, d)
				if v := toVerdict(t, h, ret); v != verdictPass {
					t.Errorf("%s %s cut to %d bytes: verdict %s, want pass", h, b.name, n, v)
				}
				if got := after.totalNew() - before.totalNew(); got != 0 {
					t.Errorf("%s %s cut to %d bytes: %d new connections counted", h, b.name, n, got)
				}
				if got := after.Unclassified - before.Unclassified; got != 1 {
					t.Errorf("%s %s cut to %d bytes: unclassified +%d, want +1", h, b.name, n, got)
				}
			}
		}
	}
}

// TestPoliciesAndSlots: slots survive SetPolicies for kept ports, a removed
// port's counters do not leak into the next port that takes its slot, and
// bad input is refused whole, naming the field.
func TestPoliciesAndSlots(t *testing.T) {
	d := setup(t, Config{MaxPorts: 2, StaleAfter: time.Hour}, olc.ActionDrop, 1)
	run(t, d, hookXDP, syn4(8080, 1))
	udp53 := olc.PortKey{Proto: olc.ProtoUDP, Port: 53}
	// Keep 8080, drop udp/53, add 9090 (it takes udp/53's slot).
	must(t, d.SetPolicies([]PortPolicy{
		{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1},
		{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 9090}, Mode: olc.ModeEnforce, Action: olc.ActionDrop},
	}))
	run(t, d, hookXDP, udp4(53))
	s := stats(t, d)
	if c := s.Ports[tcp8080]; c.NewConns != 1 {
		t.Errorf("kept port lost its counters: %+v", c)
	}
	if _, ok := s.Ports[udp53]; ok {
		t.Error("removed port still reported")
	}
	if c := s.Ports[olc.PortKey{Proto: olc.ProtoTCP, Port: 9090}]; c != (Counters{}) {
		t.Errorf("new port starts at %+v, want zero", c)
	}

	bad := []struct {
		name string
		ps   []PortPolicy
		msg  string
	}{
		{"protocol", []PortPolicy{{Key: olc.PortKey{Proto: 1, Port: 80}}}, "protocol must be tcp"},
		{"duplicate", []PortPolicy{{Key: tcp8080}, {Key: tcp8080}}, "listed twice"},
		{"mode", []PortPolicy{{Key: tcp8080, Mode: 7}}, "unknown mode"},
		{"action", []PortPolicy{{Key: tcp8080, Action: 9}}, "unknown action"},
		{"class", []PortPolicy{{Key: tcp8080, Class: 9}}, "unknown class"},
		{"probability", []PortPolicy{{Key: tcp8080, DropProbability: 1.5}}, "outside 0..1"},
		{"nan", []PortPolicy{{Key: tcp8080, DropProbability: math.NaN()}}, "outside 0..1"},
		{"too many", []PortPolicy{{Key: tcp8080}, {Key: udp53}, {Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 1}}}, "exceed max ports 2"},
	}
	for _, b := range bad {
		err := d.SetPolicies(b.ps)
		if err == nil || !strings.Contains(err.Error(), b.msg) {
			t.Errorf("%s: error %v, want one containing %q", b.name, err, b.msg)
		}
	}
	if _, ok := stats(t, d).Ports[tcp8080]; !ok {
		t.Error("a refused SetPolicies changed the policies")
	}
	if err := d.SetDropProbabilities(map[olc.PortKey]float64{{Proto: olc.ProtoTCP, Port: 1}: 0.5}); err == nil ||
		!strings.Contains(err.Error(), "tcp/1 has no policy") {
		t.Errorf("SetDropProbabilities on a port without policy: %v", err)
	}
	must(t, d.SetDropProbabilities(map[olc.PortKey]float64{tcp8080: 0}))
	if v, _ := run(t, d, hookXDP, syn4(8080, 2)); v != verdictPass {
		t.Errorf("p set to 0 still drops")
	}
	if err := d.SetExceptions(nil, []netip.Prefix{{}}); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("invalid prefix: %v", err)
	}
	if err := d.SetMode(3); err == nil {
		t.Error("SetMode(3) accepted")
	}
}

// TestStatsFold: the 32-bit per-CPU counters are folded into 64-bit totals
// across a wrap.
func TestStatsFold(t *testing.T) {
	d := loadTest(t, Config{})
	ncpu, err := ebpf.PossibleCPU()
	must(t, err)
	set := func(v uint32) {
		vals := make([]olcdOlcdCounters, ncpu)
		vals[0].NewConns = v
		vals[ncpu-1].Dropped = v
		must(t, d.objs.OlcdStats.Update(uint32(0), vals, ebpf.UpdateAny))
	}
	set(math.MaxUint32 - 5)
	first := stats(t, d).Other
	set(10) // wrapped: 16 more
	second := stats(t, d).Other
	if got := second.NewConns - first.NewConns; got != 16 {
		t.Errorf("new connections moved by %d across the wrap, want 16", got)
	}
	if got := second.Dropped - first.Dropped; got != 16 {
		t.Errorf("dropped moved by %d across the wrap, want 16", got)
	}
}

func TestConfig(t *testing.T) {
	c, err := Config{}.withDefaults()
	must(t, err)
	if c.MaxPorts != olc.DefaultMaxPorts || c.SYNTableSize != olc.DefaultSYNTableSize ||
		c.MaxPrefixes != olc.DefaultMaxPrefixes || c.StaleAfter != olc.DefaultStaleAfter || c.Attach != olc.AttachAuto {
		t.Errorf("defaults not applied: %+v", c)
	}
	bad := []struct {
		cfg Config
		msg string
	}{
		{Config{Attach: "bpf"}, `attach: unknown mode "bpf"`},
		{Config{MaxPorts: -1}, "max_ports: -1"},
		{Config{MaxPorts: olc.MaxMaxPorts + 1}, "max_ports"},
		// The config file's range (dpconfig), not a wider one of the loader's.
		{Config{FlowTableSize: 32}, "flow_table_size: 32 is out of range: must be 64..16777216"},
		{Config{RejectBurst: -1}, "reject_burst: -1"},
		{Config{SYNTableSize: -3}, "syn table size"},
		{Config{MaxPrefixes: -1}, "max_prefixes"},
		{Config{MarkDSCP: 64}, "mark dscp: 64"},
		{Config{StaleAfter: -time.Second}, "stale after"},
	}
	for _, b := range bad {
		if _, err := b.cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), b.msg) {
			t.Errorf("%+v: error %v, want %q", b.cfg, err, b.msg)
		}
	}
	for size, sets := range map[int]uint32{1: 1, 4: 1, 5: 2, 8192: 2048, 8193: 4096} {
		if got := synSets(size); got != sets {
			t.Errorf("synSets(%d) = %d, want %d", size, got, sets)
		}
	}
}

// TestCloseConcurrent: Close racing with the daemon-facing calls (and with
// itself) neither panics nor deadlocks; calls after it fail cleanly. Run
// with -race to check the locking too.
func TestCloseConcurrent(t *testing.T) {
	for range 10 {
		d := loadTest(t, Config{})
		must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce}}))
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 30 {
					_, _ = d.Stats()
					_ = d.SetDropProbabilities(map[olc.PortKey]float64{tcp8080: 0.5})
					_ = d.Heartbeat()
					_ = d.SetMode(olc.ModeObserve)
					_ = d.Attachments()
				}
			}()
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = d.Close() }()
		must(t, d.Close())
		wg.Wait()
		if err := d.SetDropProbabilities(map[olc.PortKey]float64{tcp8080: 1}); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("SetDropProbabilities after Close: %v", err)
		}
	}
}

// TestCloseTwice: Close is idempotent and later calls fail cleanly.
func TestCloseTwice(t *testing.T) {
	requireRoot(t)
	d, err := Load(Config{}, nil)
	must(t, err)
	must(t, d.Close())
	must(t, d.Close())
	if err := d.Heartbeat(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("heartbeat after close: %v", err)
	}
	if _, err := d.Stats(); err == nil {
		t.Error("stats after close succeeded")
	}
}

// TestEvenSelection: with SelectEven the datapath sheds exactly a share p,
// evenly spaced: at p = 0.25 one SYN in four of 100 000, and in a sequence
// at p = 0.75 every fourth SYN passes, never two passes or four drops in a
// row (error diffusion, olcd_select). p = 0 and 1 are exact as ever.
func TestEvenSelection(t *testing.T) {
	for _, h := range hooks {
		t.Run(string(h), func(t *testing.T) {
			for _, tt := range []struct {
				p    float64
				want uint64
			}{{0, 0}, {0.25, 25000}, {1, 100000}} {
				d := setup(t, Config{StaleAfter: time.Hour, Selection: SelectEven}, olc.ActionDrop, tt.p)
				// One more or less: the slot starts at a random phase.
				if got := repeat(t, d, h, syn4(8080, 7), 100000).Dropped; got+1 < tt.want || got > tt.want+1 {
					t.Errorf("p=%v: dropped %d of 100000, want %d ± 1", tt.p, got, tt.want)
				}
			}
			d := setup(t, Config{StaleAfter: time.Hour, Selection: SelectEven}, olc.ActionDrop, 0.75)
			// On one CPU: the accumulator is per CPU, and a run on another
			// one steps another phase.
			var passes []int
			onOneCPU(t, func() {
				for i := range 400 {
					if v, _ := run(t, d, h, syn4(8080, uint32(i))); v == verdictPass {
						passes = append(passes, i)
					}
				}
			})
			if len(passes) < 99 || len(passes) > 101 {
				t.Fatalf("%d of 400 passed at p=0.75, want 100 ± 1", len(passes))
			}
			for i := 1; i < len(passes); i++ {
				if gap := passes[i] - passes[i-1]; gap != 4 {
					t.Fatalf("passes %d and %d are %d SYNs apart, want every 4th", passes[i-1], passes[i], gap)
				}
			}
		})
	}
}

// TestSelectionValidated: an unknown selection is refused at load.
func TestSelectionValidated(t *testing.T) {
	if _, err := (Config{Selection: 7}).withDefaults(); err == nil || !strings.Contains(err.Error(), "selection") {
		t.Errorf("selection 7: error %v, want one naming the selection", err)
	}
}

// TestStatsBatch: many slots are read with batched lookups (in several
// chunks beyond statsChunk) and give the same totals as slot-by-slot reads,
// across a switch between the two (a port set that became sparse).
func TestStatsBatch(t *testing.T) {
	for _, n := range []int{40, 2*statsChunk + 88} {
		t.Run(fmt.Sprintf("ports=%d", n), func(t *testing.T) { testStatsBatch(t, n) })
	}
}

func testStatsBatch(t *testing.T, nports int) {
	d := loadTest(t, Config{StaleAfter: time.Hour, MaxPorts: nports})
	ncpu, err := ebpf.PossibleCPU()
	must(t, err)
	pols := make([]PortPolicy, nports)
	for i := range pols {
		pols[i] = PortPolicy{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: uint16(2000 + i)}, Mode: olc.ModeEnforce, Action: olc.ActionDrop}
	}
	// A slot's new-connection counts start at random (the draw's input):
	// track records them for the slots given a port since its last call,
	// and write counts from there.
	starts := map[uint16][]uint32{}
	assigned := map[olc.PortKey]uint16{}
	track := func() {
		for k := range assigned {
			if _, ok := d.slots[k]; !ok {
				delete(assigned, k)
			}
		}
		for k, slot := range d.slots {
			if s, ok := assigned[k]; !ok || s != slot {
				assigned[k] = slot
				starts[slot] = drawStarts(t, d, k)
			}
		}
	}
	must(t, d.SetPolicies(pols))
	track()
	// write sets every CPU's counters of every slot in use to a value
	// unique to the slot, the CPU and the round.
	write := func(round uint32) {
		for _, slot := range d.slots {
			vals := make([]olcdOlcdCounters, ncpu)
			for cpu := range vals {
				vals[cpu].NewConns = starts[slot][cpu] + round*1000 + uint32(slot)*10 + uint32(cpu) + 1
				vals[cpu].Dropped = round + uint32(slot)
			}
			must(t, d.objs.OlcdStats.Update(uint32(slot), vals, ebpf.UpdateAny))
		}
	}
	want := func(round uint32, slot uint16) Counters {
		var c Counters
		for cpu := range ncpu {
			c.NewConns += uint64(round*1000 + uint32(slot)*10 + uint32(cpu) + 1)
			c.Dropped += uint64(round + uint32(slot))
		}
		c.Passed = c.NewConns - c.Dropped
		return c
	}
	check := func(what string, round uint32) {
		t.Helper()
		s := stats(t, d)
		for k, slot := range d.slots {
			if got, w := s.Ports[k], want(round, slot); got != w {
				t.Errorf("%s: %v (slot %d) reads %+v, want %+v", what, k, slot, got, w)
			}
		}
	}
	write(1)
	check("batched", 1)
	// PortCounters reads what Stats reads, into a reused map.
	into := map[olc.PortKey]Counters{{Proto: olc.ProtoUDP, Port: 1}: {NewConns: 99}}
	must(t, d.PortCounters(into))
	if s := stats(t, d); !maps.Equal(into, s.Ports) {
		t.Errorf("PortCounters %v, want Stats' %v", into, s.Ports)
	}
	if d.stats.keys == nil || d.stats.noBatch {
		t.Fatalf("%d dense slots were read slot by slot", nports)
	}
	// A real packet lands in the slot the batch reads for its port.
	before := stats(t, d).Ports[olc.PortKey{Proto: olc.ProtoTCP, Port: 2007}].NewConns
	run(t, d, hookXDP, syn4(2007, 1))
	if got := stats(t, d).Ports[olc.PortKey{Proto: olc.ProtoTCP, Port: 2007}].NewConns - before; got != 1 {
		t.Errorf("a SYN to tcp/2007 moved its batched count by %d, want 1", got)
	}
	write(2)
	check("batched, second round", 2)

	// Keep only the 9 ports with the highest slots: 10 slots in use up to
	// the last are too sparse for a batch, so they are read slot by slot,
	// and the totals go on from the batched ones.
	var keep []PortPolicy
	for _, p := range pols {
		if int(d.slots[p.Key]) > nports-9 {
			keep = append(keep, p)
		}
	}
	must(t, d.SetPolicies(keep))
	track()
	d.stats.keys = nil
	write(3)
	check("slot by slot", 3)
	if d.stats.keys != nil {
		t.Error("a sparse slot set was read with a batch")
	}

	// Back to a dense set on the kernel's slot-by-slot fallback.
	d.stats.noBatch = true
	must(t, d.SetPolicies(pols))
	track()
	write(4)
	check("fallback", 4)
}
