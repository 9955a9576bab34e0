package loader

import (
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
				must(t, d.SetInFlightCeilings(map[olc.PortKey]int{tcp8080: tt.law}))
				if got := d.InFlightCeiling(tcp8080); got != tt.want {
					t.Fatalf("ceiling in force %d, want %d", got, tt.want)
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
func TestInFlightCeilingNeedsTiming(t *testing.T) {
	d := loadTest(t, Config{StaleAfter: time.Hour})
	must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, Caps: PortCaps{InFlight: 2}}}))
	must(t, d.SetInFlightCeilings(map[olc.PortKey]int{tcp8080: 1}))
	if got := d.InFlightCeiling(tcp8080); got != 0 {
		t.Errorf("ceiling %d on an untimed port, want none", got)
	}
	if err := d.SetInFlightCeilings(map[olc.PortKey]int{tcp8080: -1}); err == nil {
		t.Error("a negative ceiling was taken")
	}
	if err := d.SetInFlightCeilings(map[olc.PortKey]int{{Proto: olc.ProtoTCP, Port: 9}: 1}); err == nil {
		t.Error("a ceiling for a port without a policy was taken")
	}
}

// TestInFlightCeilingGate: the law's ceiling meets a request start on an
// idle keep-alive connection of a port with the request gate, at p = 0 too
// (the draw passes it): two requests in flight on other connections, a
// ceiling of 2, and the start is reset (XDP_TX, counted a reset); one
// answered, and the next start passes. A static ceiling is for new
// connections only: it lets the start pass.
func TestInFlightCeilingGate(t *testing.T) {
	for _, tt := range []struct {
		name        string
		static, law int
		wantReset   bool
	}{
		{"the law's", 0, 2, true},
		{"static", 2, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := loadTest(t, Config{StaleAfter: time.Hour, ResponseSample: 1, FlowTableSize: 64})
			must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, RequestGate: true, Caps: PortCaps{InFlight: tt.static}}}))
			must(t, d.SetMode(olc.ModeEnforce))
			must(t, d.Heartbeat())
			must(t, d.SetInFlightCeilings(map[olc.PortKey]int{tcp8080: tt.law}))
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
				// Two idle keep-alive connections, each answered once.
				for _, p := range []uint16{40010, 40011} {
					run(d.prog(hookXDP), cli(p, cseq0, sseq0, 100))
					run(d.objs.OlcdTcEgress, srv(p, sseq0, cseq0+100, 200))
				}
				// Two requests in flight on two others.
				for _, p := range []uint16{40001, 40002} {
					run(d.prog(hookXDP), cli(p, cseq0, sseq0, 100))
				}
				reset := run(d.prog(hookXDP), cli(40010, cseq0+100, sseq0+200, 100)) == xdpTx
				if reset != tt.wantReset {
					t.Errorf("a request start at 2 in flight under the ceiling: reset %v, want %v", reset, tt.wantReset)
				}
				run(d.objs.OlcdTcEgress, srv(40001, sseq0, cseq0+100, 200))
				if run(d.prog(hookXDP), cli(40011, cseq0+100, sseq0+200, 100)) != xdpPass {
					t.Error("a request start at 1 in flight under a ceiling of 2 was reset")
				}
			})
			r := stats(t, d).Response[tcp8080]
			want := uint64(0)
			if tt.wantReset {
				want = 1
			}
			if r.Resets != want {
				t.Errorf("resets %d, want %d", r.Resets, want)
			}
		})
	}
}
