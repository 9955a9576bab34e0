package loader

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/olcd/olcd/internal/olc"
)

// emptyXDP is the floor: an XDP program that returns XDP_PASS and does
// nothing else. Its cost is what BPF_PROG_TEST_RUN itself adds per packet.
func emptyXDP(tb testing.TB) *ebpf.Program {
	tb.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "olcd_floor",
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, xdpPass),
			asm.Return(),
		},
		License: "Dual MIT/GPL",
	})
	if err != nil {
		tb.Fatalf("load empty XDP program: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// benchChunk is how many packets one BPF_PROG_TEST_RUN call runs.
//
// Each XDP call with a repeat count above 1 has a fixed cost of milliseconds
// (the kernel switches the XDP dispatcher to the program and back;
// docs/datapath.md, "Per-packet cost"), so wall time would measure that,
// not the program. The kernel's own per-run average is used instead: it
// times only the loop and stops its clock while the task is scheduled out.
// It is whole nanoseconds; the statistics below average many chunks, which
// gives the fraction.
const benchChunk = 1 << 19

// runChunk runs frame n times through p and returns the kernel's per-run
// average in ns.
func runChunk(b *testing.B, p *ebpf.Program, frame []byte, n int) float64 {
	_, per, err := p.Benchmark(frame, n, nil)
	if err != nil {
		b.Fatalf("run: %v", err)
	}
	return float64(per.Nanoseconds())
}

// pairs holds per-chunk results of the floor and the program measured back
// to back, so that each difference sees the same machine state.
type pairs struct {
	floor, prog []float64
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// overFloor is the interquartile mean of the paired differences: the middle
// half, so that a chunk disturbed by the host (a VM shares its CPUs) does
// not move the figure.
func (p *pairs) overFloor() float64 {
	d := make([]float64, len(p.prog))
	for i := range d {
		d[i] = p.prog[i] - p.floor[i]
	}
	slices.Sort(d)
	q := len(d) / 4
	return mean(d[q : len(d)-q])
}

func (p *pairs) run(b *testing.B, floor, prog *ebpf.Program, floorFrame, frame []byte) {
	for n := b.N; n > 0; n -= benchChunk {
		k := min(n, benchChunk)
		p.floor = append(p.floor, runChunk(b, floor, floorFrame, k))
		if prog != nil {
			p.prog = append(p.prog, runChunk(b, prog, frame, k))
		}
	}
}

// BenchmarkDatapath measures the XDP program per packet with
// BPF_PROG_TEST_RUN (repeat), against an empty XDP program (floor) measured
// in the same run. Every sub-benchmark but floor alternates floor and program
// chunks and reports:
//
//	ns/op, ns/pkt      the program, mean per packet (one op is one packet)
//	floor-ns/pkt       the empty program, mean per packet
//	over-floor-ns/pkt  what olcd adds to a packet: interquartile mean of the
//	                   per-chunk differences program − floor
//	x-floor            (floor-ns/pkt + over-floor-ns/pkt) / floor-ns/pkt
//
// fair-over-syn-p50 pairs syn-p50-fair with syn-p50 instead of the empty
// program (over-syn-p50-ns/pkt: what fair shedding adds to the SYN path).
// Goals (docs/datapath.md): over floor, ack ≤ 5 ns, syn-p50 ≤ 30 ns,
// ipv6-hbh-syn ≤ 35 ns, fairness ≤ +15 ns over syn-p50. Use -benchtime 16000000x or more for 30+ pairs;
// scripts/bench-datapath.sh does.
func BenchmarkDatapath(b *testing.B) {
	requireRoot(b)
	d := loadTest(b, Config{StaleAfter: time.Hour})
	floor := emptyXDP(b)
	const protected, unprotected, fair = 8080, 9999, 8081
	if err := d.SetPolicies([]PortPolicy{{
		Key: olc.PortKey{Proto: olc.ProtoTCP, Port: protected}, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 0.5,
	}, {
		Key: olc.PortKey{Proto: olc.ProtoTCP, Port: fair}, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 0.5, Fair: true,
	}}); err != nil {
		b.Fatal(err)
	}
	must(b, d.SetMode(olc.ModeEnforce))
	must(b, d.Heartbeat())

	cases := []struct {
		name  string
		frame []byte
	}{
		{"ack", ipv4Frame(client4, server4, 6, 0, tcpSeg{40000, protected, 1, tcpACK}.bytes())},
		{"syn-unprotected", syn4(unprotected, 1)},
		{"syn-p50", syn4(protected, 1)},
		{"syn-p50-fair", syn4(fair, 1)}, // fair shedding on (bpf/fair.h)
		{"ipv6-hbh-syn", ipv6Frame(client6, server6, 0, 0, hopByHop(6), tcpSeg{40000, protected, 1, tcpSYN}.bytes())},
	}
	floorFrame := cases[0].frame

	b.Run("floor", func(b *testing.B) {
		var p pairs
		p.run(b, floor, nil, floorFrame, nil)
		b.ReportMetric(mean(p.floor), "ns/op")
		b.ReportMetric(mean(p.floor), "ns/pkt")
	})
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var p pairs
			p.run(b, floor, d.objs.OlcdXdp, floorFrame, c.frame)
			fl, over := mean(p.floor), p.overFloor()
			b.ReportMetric(mean(p.prog), "ns/op")
			b.ReportMetric(mean(p.prog), "ns/pkt")
			b.ReportMetric(fl, "floor-ns/pkt")
			b.ReportMetric(over, "over-floor-ns/pkt")
			b.ReportMetric((fl+over)/fl, "x-floor")
		})
	}
	// What fairness adds to the SYN path, paired chunk by chunk (the
	// sub-benchmarks above are seconds apart, and this VM's scatter between
	// them is larger than the difference): syn-p50 and syn-p50-fair
	// alternately, the interquartile mean of the per-chunk differences.
	b.Run("fair-over-syn-p50", func(b *testing.B) {
		var p pairs
		p.run(b, d.objs.OlcdXdp, d.objs.OlcdXdp, cases[2].frame, cases[3].frame)
		b.ReportMetric(mean(p.prog), "ns/op")
		b.ReportMetric(mean(p.floor), "syn-p50-ns/pkt")
		b.ReportMetric(mean(p.prog), "syn-p50-fair-ns/pkt")
		b.ReportMetric(p.overFloor(), "over-syn-p50-ns/pkt")
	})
}

// singleChunk is how many single runs make one pair of means in
// runSingles, and maxSingles how many single runs of each program a
// sub-benchmark makes at most, whatever b.N: each is a syscall of a few
// microseconds.
const (
	singleChunk = 2048
	maxSingles  = 400_000
)

// runSingles is run for a program that changes the frame it answers: the
// reject path turns the SYN into its reply, so BPF_PROG_TEST_RUN's repeat
// (which runs the program again on the same buffer) would measure the reply
// going through, not the SYN. Each run here is a call with repeat 1 on a
// fresh copy of the frame; the kernel times the run alone (its clock reads
// included, the same for floor and program). want is the return code every
// program run must give.
func (p *pairs) runSingles(b *testing.B, floor, prog *ebpf.Program, floorFrame, frame []byte, want uint32) {
	n := min(b.N, maxSingles)
	for done := 0; done < n; done += singleChunk {
		k := min(singleChunk, n-done)
		var f, g float64
		for range k {
			_, per, err := floor.Benchmark(floorFrame, 1, nil)
			if err != nil {
				b.Fatalf("run: %v", err)
			}
			f += float64(per.Nanoseconds())
			ret, per, err := prog.Benchmark(frame, 1, nil)
			if err != nil {
				b.Fatalf("run: %v", err)
			}
			if ret != want {
				b.Fatalf("program returned %d, want %d", ret, want)
			}
			g += float64(per.Nanoseconds())
		}
		p.floor = append(p.floor, f/float64(k))
		p.prog = append(p.prog, g/float64(k))
	}
}

// BenchmarkDatapathReject measures the reject path of the XDP program: a
// SYN (with an MSS option, so the reply is also shortened) to a port with
// the reject action at p = 1, answered with XDP_TX, against the empty
// program, both run once per call (see runSingles). drop-p1 is the drop
// path measured the same way, to relate the figures to BenchmarkDatapath's.
// Goal (issue 17): reject ≤ 60 ns over floor. At most maxSingles runs of
// each program, whatever -benchtime says.
func BenchmarkDatapathReject(b *testing.B) {
	requireRoot(b)
	d := loadTest(b, Config{StaleAfter: time.Hour, RejectRate: olc.MaxRejectRate, RejectBurst: olc.MaxRejectRate})
	floor := emptyXDP(b)
	const dropPort, rejectPort = 8080, 8443
	must(b, d.SetPolicies([]PortPolicy{
		{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: dropPort}, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1},
		{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: rejectPort}, Mode: olc.ModeEnforce, Action: olc.ActionReject, DropProbability: 1},
	}))
	must(b, d.SetMode(olc.ModeEnforce))
	must(b, d.Heartbeat())
	floorFrame := ipv4Frame(client4, server4, 6, 0, tcpSeg{40000, dropPort, 1, tcpACK}.bytes())
	for _, c := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"drop-p1", syn4(dropPort, 1), xdpDrop},
		{"reject", syn4(rejectPort, 1), xdpTX},
		{"reject-ipv6-hbh", ipv6Frame(client6, server6, 0, 0, hopByHop(6), tcpSeg{40000, rejectPort, 1, tcpSYN}.bytes()), xdpTX},
	} {
		b.Run(c.name, func(b *testing.B) {
			var p pairs
			p.runSingles(b, floor, d.objs.OlcdXdp, floorFrame, c.frame, c.want)
			fl, over := mean(p.floor), p.overFloor()
			b.ReportMetric(mean(p.prog), "ns/op")
			b.ReportMetric(mean(p.prog), "ns/pkt")
			b.ReportMetric(fl, "floor-ns/pkt")
			b.ReportMetric(over, "over-floor-ns/pkt")
			b.ReportMetric((fl+over)/fl, "x-floor")
		})
	}
}

// BenchmarkDatapathBreakdown takes syn-p50 apart: the same IPv4 SYN to a
// protected port, changing one thing at a time, each reported as cost over
// floor (see BenchmarkDatapath for the method). Differences between
// sub-benchmarks estimate the parts:
//
//	mark-p0       policy, stats slot, mode: the protected path without table or draw
//	drop-p0       + the dropped-SYN table (a miss: nothing was ever dropped)
//	drop-p1       + the drop path (heartbeat verdict, counters) with a table hit, no draw
//	observe-p50   the draw without the drop path
//	drop-p50      syn-p50
//	drop-p50-even syn-p50 with selection: even (error diffusion, no generator)
//	drop-p50-timed    syn-p50 on a port timed (response timing on)
//	drop-p50-ceiling  + the law's ceiling on requests in flight, never reached:
//	                  its sum over the CPUs (olcd_inflight) for every SYN the
//	                  draw passes, and the source address fairness and caps read
func BenchmarkDatapathBreakdown(b *testing.B) {
	requireRoot(b)
	random := loadTest(b, Config{StaleAfter: time.Hour})
	even := loadTest(b, Config{StaleAfter: time.Hour, Selection: SelectEven})
	timed := loadTest(b, Config{StaleAfter: time.Hour, ResponseSample: 1})
	floor := emptyXDP(b)
	for _, d := range []*Datapath{random, even, timed} {
		must(b, d.SetMode(olc.ModeEnforce))
		must(b, d.Heartbeat())
	}
	frame := syn4(8080, 1)
	for _, c := range []struct {
		name   string
		d      *Datapath
		mode   olc.Mode
		action olc.Action
		p      float64
		ceil   int
	}{
		{"mark-p0", random, olc.ModeEnforce, olc.ActionMark, 0, 0},
		{"drop-p0", random, olc.ModeEnforce, olc.ActionDrop, 0, 0},
		{"drop-p1", random, olc.ModeEnforce, olc.ActionDrop, 1, 0},
		{"observe-p50", random, olc.ModeObserve, olc.ActionDrop, 0.5, 0},
		{"drop-p50", random, olc.ModeEnforce, olc.ActionDrop, 0.5, 0},
		{"drop-p50-even", even, olc.ModeEnforce, olc.ActionDrop, 0.5, 0},
		{"drop-p50-timed", timed, olc.ModeEnforce, olc.ActionDrop, 0.5, 0},
		{"drop-p50-ceiling", timed, olc.ModeEnforce, olc.ActionDrop, 0.5, 1 << 20},
	} {
		b.Run(c.name, func(b *testing.B) {
			d := c.d
			must(b, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: c.mode, Action: c.action, DropProbability: c.p}}))
			if d == timed {
				must(b, d.SetInFlightCeilings(map[olc.PortKey]int{tcp8080: c.ceil}, 0.1))
			}
			var p pairs
			p.run(b, floor, d.objs.OlcdXdp, frame, frame)
			b.ReportMetric(mean(p.prog), "ns/op")
			b.ReportMetric(p.overFloor(), "over-floor-ns/pkt")
		})
	}
}

// BenchmarkStats measures Stats, which the daemon calls once per tick and,
// for the onset check, every controller.onset_interval (ten times per
// default tick). read=batch is the loader's choice (BPF_MAP_LOOKUP_BATCH from
// batchMinSlots slots on), read=per-slot one per-CPU lookup per slot, the
// fallback on kernels before 5.6; compare the two of the same run.
func BenchmarkStats(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		for _, read := range []string{"batch", "per-slot"} {
			b.Run(fmt.Sprintf("ports=%d/read=%s", n, read), func(b *testing.B) {
				d := loadTest(b, Config{StaleAfter: time.Hour, MaxPorts: n})
				pols := make([]PortPolicy, n)
				for i := range pols {
					pols[i] = PortPolicy{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: uint16(1000 + i)}, Mode: olc.ModeEnforce, Action: olc.ActionDrop}
				}
				must(b, d.SetPolicies(pols))
				d.stats.noBatch = read == "per-slot"
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := d.Stats(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
