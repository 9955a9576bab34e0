package loader

import (
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
)

// onCPU runs fn on a thread pinned to cpu; false when the test may not run
// there (not in its affinity mask).
func onCPU(t *testing.T, cpu int, fn func()) bool {
	t.Helper()
	ok := make(chan bool)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with its mask
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil || !set.IsSet(cpu) {
			ok <- false
			return
		}
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			ok <- false
			return
		}
		fn()
		ok <- true
	}()
	return <-ok
}

// TestInFlightCeiling: new work meets the ceiling on requests in flight per
// arrival, the response timer's count summed over the CPUs. Three requests
// start on CPU 0; one is answered on CPU 1 (its own count goes below zero
// there: only the sum means anything). A SYN passes while fewer than the
// ceiling are in flight; the law's refusals count dropped (its shed), the
// static cap's capped too; the lower of the two ceilings is in force, and
// none without one.
func TestInFlightCeiling(t *testing.T) {
	for _, tt := range []struct {
		name        string
		static, law int
		want        int  // the ceiling in force
		capped      bool // its refusals are counted capped (the static cap's)
	}{
		{"the law's", 0, 3, 3, false},
		{"static", 3, 0, 3, true},
		{"the lower: static", 3, 5, 3, true},
		{"the lower: the law's", 8, 3, 3, false},
		{"none", 0, 0, 0, false},
	} {
		for _, h := range hooks {
			t.Run(tt.name+"/"+string(h), func(t *testing.T) {
				d := loadTest(t, Config{StaleAfter: time.Hour, ResponseSample: 1, FlowTableSize: 64})
				must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, Caps: PortCaps{InFlight: tt.static}}}))
				must(t, d.SetMode(olc.ModeEnforce))
				must(t, d.Heartbeat())
				must(t, d.SetInFlightCeilings(map[olc.PortKey]int{tcp8080: tt.law}, 0))
				if s, l := d.InFlightCeiling(tcp8080); s != tt.static || l != tt.law {
					t.Fatalf("ceilings in force %d, %d; want %d, %d", s, l, tt.static, tt.law)
				}
				run := func(p *ebpf.Program, frame []byte) uint32 {
					t.Helper()
					ret, err := p.Run(&ebpf.RunOptions{Data: frame})
					must(t, err)
					return ret
				}
				synPasses := func(i int) bool {
					t.Helper()
					return toVerdict(t, h, run(d.prog(h), ipv4Frame(client4, server4, 6, 0, tcpSeg{uint16(30000 + i), 8080, 1, tcpSYN}.bytes()))) == verdictPass
				}
				var before, after bool
				onCPU(t, 0, func() {
					for i := range 3 {
						run(d.prog(h), tcpData{client4, server4, uint16(40001 + i), 8080, cseq0, 1, psh, 100}.frame())
					}
					before = synPasses(0)
				})
				answer := func() {
					run(d.objs.OlcdTcEgress, tcpData{server4, client4, 8080, 40001, sseq0, cseq0 + 100, psh, 50}.frame())
				}
				if !onCPU(t, 1, answer) {
					t.Log("CPU 1 not available: the answer on CPU 0")
					onCPU(t, 0, answer)
				}
				onCPU(t, 0, func() { after = synPasses(1) })
				r := stats(t, d)
				if n := r.Response[tcp8080].Outstanding(); n != 2 {
					t.Fatalf("in flight %d after 3 requests and 1 answer, want 2", n)
				}
				wantBefore := tt.want == 0 || tt.want > 3
				if before != wantBefore || !after {
					t.Errorf("ceiling %d: a SYN at 3 in flight passed %v (want %v), at 2 passed %v (want true)", tt.want, before, wantBefore, after)
				}
				c := r.Ports[tcp8080]
				var refused uint64
				if !wantBefore {
					refused = 1
				}
				var capped uint64
				if tt.capped {
					capped = refused
				}
				if c.Dropped != refused || c.Capped != capped {
					t.Errorf("dropped %d, capped %d; want %d, %d", c.Dropped, c.Capped, refused, capped)
				}
			})
		}
	}
}

// TestInFlightCeilingNeedsTiming: a port that is not timed (response timing
// off) has no ceiling, static or the law's: nothing counts its requests.
// With one flow in 16 timed, the law's ceiling is of the sampled count
// (divided by 16, at least 1), and the static cap is not set (it needs
// every flow). Bad input is refused and changes nothing.
func TestInFlightCeilingNeedsTiming(t *testing.T) {
	d := loadTest(t, Config{StaleAfter: time.Hour})
	must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, Caps: PortCaps{InFlight: 2}}}))
	must(t, d.SetInFlightCeilings(map[olc.PortKey]int{tcp8080: 1}, 0.1))
	if s, l := d.InFlightCeiling(tcp8080); s != 0 || l != 0 {
		t.Errorf("ceilings %d, %d on an untimed port, want none", s, l)
	}
	sampled := loadTest(t, Config{StaleAfter: time.Hour, ResponseSample: 16})
	must(t, sampled.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, Caps: PortCaps{InFlight: 2}}}))
	for _, tc := range []struct{ law, want int }{{40, 3}, {3, 1}} {
		must(t, sampled.SetInFlightCeilings(map[olc.PortKey]int{tcp8080: tc.law}, 0.1))
		if s, l := sampled.InFlightCeiling(tcp8080); s != 0 || l != tc.want {
			t.Errorf("one flow in 16 timed, the law's ceiling %d: ceilings %d, %d; want 0, %d", tc.law, s, l, tc.want)
		}
	}
	for _, bad := range []struct {
		m     map[olc.PortKey]int
		floor float64
	}{
		{map[olc.PortKey]int{tcp8080: -1}, 0.1},
		{map[olc.PortKey]int{{Proto: olc.ProtoTCP, Port: 9}: 1}, 0.1},
		{map[olc.PortKey]int{tcp8080: 5}, 1.5},
		{map[olc.PortKey]int{tcp8080: 5}, math.NaN()},
	} {
		if err := sampled.SetInFlightCeilings(bad.m, bad.floor); err == nil {
			t.Errorf("ceilings %v with floor %v were taken", bad.m, bad.floor)
		}
		if _, l := sampled.InFlightCeiling(tcp8080); l != 1 {
			t.Errorf("a refused call changed the ceiling to %d", l)
		}
	}
}

// TestInFlightCeilingFloor: of what the law's ceiling refuses, a share
// floor passes all the same (a count gone wrong never silences the port),
// and the heartbeat gone stale or observe mode refuse nothing: 400 SYNs at
// a count stuck above the ceiling.
func TestInFlightCeilingFloor(t *testing.T) {
	for _, tt := range []struct {
		name     string
		floor    float64
		mode     olc.Mode
		stale    bool
		lo, hi   int // SYNs passed of 400
		ceiledOK func(c Counters) bool
	}{
		{"floor 0.1", 0.1, olc.ModeEnforce, false, 20, 65, func(c Counters) bool { return c.Ceiled == c.Dropped && c.Ceiled > 300 }},
		{"floor 0", 0, olc.ModeEnforce, false, 0, 0, func(c Counters) bool { return c.Ceiled == 400 && c.Dropped == 400 }},
		{"observe", 0.1, olc.ModeObserve, false, 400, 400, func(c Counters) bool { return c.Dropped == 0 && c.WouldDrop == c.Ceiled && c.Ceiled > 300 }},
		{"stale heartbeat", 0, olc.ModeEnforce, true, 400, 400, func(c Counters) bool { return c.Dropped == 0 && c.Ceiled == 0 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := loadTest(t, Config{StaleAfter: time.Hour, ResponseSample: 1, FlowTableSize: 64})
			must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: tt.mode, Action: olc.ActionDrop}}))
			must(t, d.SetMode(olc.ModeEnforce))
			must(t, d.Heartbeat())
			must(t, d.SetInFlightCeilings(map[olc.PortKey]int{tcp8080: 1}, tt.floor))
			if tt.stale {
				d.mu.Lock()
				// At boot, stale after 1 µs: stale whatever the uptime (a
				// heartbeat of 1 ns is fresh for an hour after boot).
				d.ctl.HeartbeatNs, d.ctl.StaleAfterNs = 1, uint64(time.Microsecond)
				err := d.writeControl()
				d.mu.Unlock()
				must(t, err)
			}
			passed := 0
			onCPU(t, 0, func() {
				// A request that is never answered: the count stays at 1.
				if _, err := d.prog(hookXDP).Run(&ebpf.RunOptions{Data: tcpData{client4, server4, 40001, 8080, cseq0, 1, psh, 100}.frame()}); err != nil {
					t.Error(err)
					return
				}
				for i := range 400 {
					ret, err := d.prog(hookXDP).Run(&ebpf.RunOptions{Data: ipv4Frame(client4, server4, 6, 0, tcpSeg{uint16(20000 + i), 8080, uint32(i + 1), tcpSYN}.bytes())})
					if err != nil {
						t.Error(err)
						return
					}
					if ret == xdpPass {
						passed++
					}
				}
			})
			c := stats(t, d).Ports[tcp8080]
			if passed < tt.lo || passed > tt.hi || !tt.ceiledOK(c) {
				t.Errorf("passed %d of 400 (want %d..%d); dropped %d, would drop %d, ceiled %d", passed, tt.lo, tt.hi, c.Dropped, c.WouldDrop, c.Ceiled)
			}
		})
	}
}

// TestInFlightCeilingGate: the ceilings are for new connections: a request
// start on an idle keep-alive connection of a port with the request gate
// passes at p = 0 with the port at its ceiling, the law's or the static
// one (a reset would cost the client a new connection, which meets them).
func TestInFlightCeilingGate(t *testing.T) {
	for _, tt := range []struct {
		name        string
		static, law int
	}{
		{"the law's", 0, 2},
		{"static", 2, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := loadTest(t, Config{StaleAfter: time.Hour, ResponseSample: 1, FlowTableSize: 64})
			must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, RequestGate: true, Caps: PortCaps{InFlight: tt.static}}}))
			must(t, d.SetMode(olc.ModeEnforce))
			must(t, d.Heartbeat())
			must(t, d.SetInFlightCeilings(map[olc.PortKey]int{tcp8080: tt.law}, 0))
			run := func(p *ebpf.Program, frame []byte) uint32 {
				t.Helper()
				ret, err := p.Run(&ebpf.RunOptions{Data: frame})
				must(t, err)
				return ret
			}
			cli := func(port uint16, seq, ack uint32, n int) []byte {
				return tcpData{client4, server4, port, 8080, seq, ack, psh, n}.frame()
			}
			srv := func(port uint16, seq, ack uint32, n int) []byte {
				return tcpData{server4, client4, 8080, port, seq, ack, psh, n}.frame()
			}
			onCPU(t, 0, func() {
				// An idle keep-alive connection, answered once, and two
				// requests in flight on two others.
				run(d.prog(hookXDP), cli(40010, cseq0, sseq0, 100))
				run(d.objs.OlcdTcEgress, srv(40010, sseq0, cseq0+100, 200))
				for _, p := range []uint16{40001, 40002} {
					run(d.prog(hookXDP), cli(p, cseq0, sseq0, 100))
				}
				if run(d.prog(hookXDP), cli(40010, cseq0+100, sseq0+200, 100)) != xdpPass {
					t.Error("a request start at the ceiling was reset")
				}
				// A new connection meets the ceiling.
				if run(d.prog(hookXDP), ipv4Frame(client4, server4, 6, 0, tcpSeg{30000, 8080, 1, tcpSYN}.bytes())) != xdpDrop {
					t.Error("a SYN at the ceiling passed")
				}
			})
			if r := stats(t, d).Response[tcp8080]; r.Resets != 0 || r.Reused != 1 {
				t.Errorf("resets %d, request starts %d; want 0, 1", r.Resets, r.Reused)
			}
		})
	}
}
