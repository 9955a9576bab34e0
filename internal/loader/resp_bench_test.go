package loader

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
)

// baseObject is the datapath as it was before response timing (commit
// 1ab021d, bpfel), the baseline BenchmarkResponseTiming measures the SYN
// path and established segments against in the same run.
//
//go:embed testdata/olcd_base_bpfel.o
var baseObject []byte

// loadBase loads the baseline object with one protected port, tcp/8080, in
// enforce mode at p, with a fresh heartbeat (loadOld).
func loadBase(tb testing.TB, p float64) *ebpf.Collection {
	tb.Helper()
	return loadOld(tb, "baseline", baseObject, p, nil)
}

// loadOld loads an older datapath object (a benchmark's baseline, named
// what) with one protected port, tcp/8080, in enforce mode at p, with a
// fresh heartbeat. Only what the benchmarks need is set: the control
// record, the port index, the policy and its slot; size, when set, sizes
// the spec's maps further before the load.
func loadOld(tb testing.TB, what string, obj []byte, p float64, size func(*ebpf.CollectionSpec)) *ebpf.Collection {
	tb.Helper()
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(obj))
	if err != nil {
		tb.Fatalf("%s spec: %v", what, err)
	}
	spec.Maps[olcdMapOlcdSyns].MaxEntries = synSets(olc.DefaultSYNTableSize)
	if size != nil {
		size(spec)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		tb.Fatalf("load %s: %v", what, err)
	}
	tb.Cleanup(coll.Close)
	now, err := monotonicNow()
	must(tb, err)
	// The old objects' records are laid out as their own BTF says: the
	// current generated structs have grown since (fair, caps), so the
	// fields are written by name.
	setOldVar(tb, coll, "olcd_ctl", map[string]uint64{"heartbeat_ns": now, "stale_after_ns": uint64(time.Hour),
		"syn_seed": rand.Uint64(), "syn_sets_mask": uint64(synSets(olc.DefaultSYNTableSize) - 1),
		"mark_dscp": uint64(olcdOlcdDscpOLCD_DSCP_KEEP), "mode": uint64(olc.ModeEnforce)})
	idx := new(olcdOlcdPortIndex)
	idx.Idx[0][8080] = 1
	must(tb, coll.Variables["olcd_ports"].Set(idx))
	pol := oldRecord(tb, spec.Maps["olcd_policies"].Value, map[string]uint64{"drop_prob": uint64(ProbabilityToFixed(p)), "stats_slot": 1,
		"flags": uint64(olcdOlcdPolicyFlagOLCD_POLICY_PROTECTED), "mode": uint64(olc.ModeEnforce), "action": uint64(olc.ActionDrop)})
	must(tb, coll.Maps["olcd_policies"].Update(uint32(1), pol, ebpf.UpdateAny))
	return coll
}

// setOldVar writes the named fields of an old object's global variable
// name (its other bytes zero), laid out by the object's BTF.
func setOldVar(tb testing.TB, coll *ebpf.Collection, name string, fields map[string]uint64) {
	tb.Helper()
	v, ok := coll.Variables[name]
	if !ok || v.Type() == nil {
		tb.Fatalf("old object: no variable %s with BTF", name)
	}
	must(tb, v.Set(oldRecord(tb, v.Type().Type, fields)))
}

// oldRecord returns the bytes of the struct t with the named scalar fields
// set (little endian, as bpfel) and the rest zero: an old object's record
// whatever the generated struct of today looks like. A field t lacks fails
// the benchmark.
func oldRecord(tb testing.TB, t btf.Type, fields map[string]uint64) []byte {
	tb.Helper()
	st, ok := btf.UnderlyingType(t).(*btf.Struct)
	if !ok {
		tb.Fatalf("old object: %v is not a struct", t)
	}
	b := make([]byte, st.Size)
	for name, v := range fields {
		i := slices.IndexFunc(st.Members, func(m btf.Member) bool { return m.Name == name })
		if i < 0 {
			tb.Fatalf("old object: struct %s has no field %s", st.Name, name)
		}
		m := st.Members[i]
		size, err := btf.Sizeof(m.Type)
		must(tb, err)
		var le [8]byte
		binary.LittleEndian.PutUint64(le[:], v)
		copy(b[m.Offset.Bytes():m.Offset.Bytes()+uint32(size)], le[:size])
	}
	return b
}

// emptyTC is the floor of the egress program: returns TC_ACT_UNSPEC.
func emptyTC(tb testing.TB) *ebpf.Program {
	tb.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "olcd_floor_tc", Type: ebpf.SchedCLS,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()},
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		tb.Fatalf("load empty TC program: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// unsampledPort returns a client port whose flow to tcp/8080 the sample of
// d leaves out, and sampledPort one it takes.
func samplePorts(d *Datapath) (unsampled, sampled uint16) {
	max := sampleMax(d.cfg.ResponseSample)
	for p := uint16(20000); p < 60000 && (unsampled == 0 || sampled == 0); p++ {
		if uint32(flowHash(d.rctl.Seed, client4, server4, p, sport)>>32) <= max {
			if sampled == 0 {
				sampled = p
			}
		} else if unsampled == 0 {
			unsampled = p
		}
	}
	return unsampled, sampled
}

// BenchmarkResponseTiming measures what response timing costs per packet
// (tcp/8080 with the request gate on, which only request starts reach):
// each sub-benchmark runs, chunk after chunk, an empty program (floor), the
// frame through the datapath as it was before response timing (base) and
// through this one (timing on, 1 flow in 16), and reports both over the
// floor and delta-ns, the interquartile mean of the per-chunk differences
// this − base: the machine's noise moves both of a chunk alike (see
// BenchmarkDatapath for the method).
//
//	syn-p50           SYN to a protected port, p = 0.5 (goal: delta within ± 2 ns)
//	ack               pure ACK to a protected port
//	data-unsampled    100-byte segment of an established flow the sample leaves out (goal ≤ 5 ns)
//	data-sampled      the same, of a sampled flow with a request outstanding: hash, flow table,
//	                  way found (goal ≤ 40 ns)
//	egress-unsampled  the server's 100-byte answer at TC egress; base is the empty TC program,
//	                  as there was no egress program before (goal ≤ 5 ns)
//	egress-sampled    the same, sampled: the first run stops the timer, the rest find none
//
// The two segments per request that start and stop a timer add a clock
// read and, at the stop, the histogram update; a repeated frame cannot
// alternate them, so they are not isolated here (docs/datapath.md).
func BenchmarkResponseTiming(b *testing.B) {
	requireRoot(b)
	base := loadBase(b, 0.5)
	d := loadTest(b, Config{StaleAfter: time.Hour, ResponseSample: 16})
	must(b, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 0.5, RequestGate: true}}))
	must(b, d.SetMode(olc.ModeEnforce))
	must(b, d.Heartbeat())
	floor, floorTC := emptyXDP(b), emptyTC(b)
	un, sa := samplePorts(d)
	data := func(cp uint16) []byte {
		return tcpData{client4, server4, cp, sport, cseq0, sseq0, psh, 100}.frame()
	}
	answer := func(cp uint16) []byte {
		return tcpData{server4, client4, sport, cp, sseq0, cseq0 + 100, psh, 100}.frame()
	}
	// A sampled flow with a request outstanding (the real clock: no
	// injected time). Egress then stops it on its first run.
	if _, err := d.objs.OlcdXdp.Run(&ebpf.RunOptions{Data: data(sa)}); err != nil {
		b.Fatal(err)
	}
	bx, nx := base.Programs["olcd_xdp"], d.objs.OlcdXdp
	ack := ipv4Frame(client4, server4, 6, 0, tcpSeg{40000, 8080, 1, tcpACK}.bytes())
	cases := []struct {
		name            string
		fl, bprog, prog *ebpf.Program
		bframe, frame   []byte
	}{
		{"syn-p50", floor, bx, nx, syn4(8080, 1), syn4(8080, 1)},
		{"ack", floor, bx, nx, ack, ack},
		{"data-unsampled", floor, bx, nx, data(un), data(un)},
		{"data-sampled", floor, bx, nx, data(sa), data(sa)},
		{"egress-unsampled", floorTC, floorTC, d.objs.OlcdTcEgress, answer(un), answer(un)},
		{"egress-sampled", floorTC, floorTC, d.objs.OlcdTcEgress, answer(sa), answer(sa)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var fl, bs, nw []float64
			for n := b.N; n > 0; n -= benchChunk {
				k := min(n, benchChunk)
				fl = append(fl, runChunk(b, c.fl, c.frame, k))
				bs = append(bs, runChunk(b, c.bprog, c.bframe, k))
				nw = append(nw, runChunk(b, c.prog, c.frame, k))
			}
			over := func(x, y []float64) float64 { return (&pairs{floor: y, prog: x}).overFloor() }
			b.ReportMetric(mean(nw), "ns/op")
			b.ReportMetric(over(bs, fl), "base-over-floor-ns")
			b.ReportMetric(over(nw, fl), "over-floor-ns/pkt")
			b.ReportMetric(over(nw, bs), "delta-ns")
		})
	}
}

// BenchmarkStatsResponse measures Stats with response timing on and every
// port timed: the counters plus the histograms (1.5 KB a port and CPU,
// read from the mapped array), as the daemon reads them once per tick. activity=idle: nothing was
// timed since the last read; activity=busy: every port answered on every
// CPU since the last read (the histograms are written between reads, the
// timer stopped), the worst case. core-% is the share of one CPU that
// reading costs at the default 500 ms tick, from the process's CPU time
// (user and system, the kernel's copy included; goal at 1000 ports: < 1 %);
// wall-core-% the same from the wall time. Compare BenchmarkStats (timing
// off) of the same run. Like the daemon's tick, each read releases the
// previous one (ReleaseStats) once it has the new one.
func BenchmarkStatsResponse(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		for _, busy := range []bool{false, true} {
			activity := map[bool]string{false: "idle", true: "busy"}[busy]
			b.Run(fmt.Sprintf("ports=%d/activity=%s", n, activity), func(b *testing.B) {
				d := loadTest(b, Config{StaleAfter: time.Hour, MaxPorts: n, ResponseSample: 1, ResponsePorts: n})
				pols := make([]PortPolicy, n)
				for i := range pols {
					pols[i] = PortPolicy{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: uint16(1000 + i)}, Mode: olc.ModeEnforce, Action: olc.ActionDrop}
				}
				must(b, d.SetPolicies(pols))
				ncpu, err := ebpf.PossibleCPU()
				must(b, err)
				vals := make([]olcdOlcdRespHist, ncpu)
				answer := func(round int) {
					for c := range vals {
						vals[c].Requests, vals[c].Responses = uint32(round), uint32(round)
						vals[c].Bucket[(round+c)%HistBuckets] += 1
					}
					for slot := 1; slot <= n; slot++ {
						for c := range vals {
							_, err := d.resp.mem.WriteAt(bytesOf(&vals[c]), d.resp.offset(c, uint16(slot)))
							must(b, err)
						}
					}
				}
				prev, err := d.Stats()
				must(b, err)
				var cpu time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if busy {
						b.StopTimer()
						answer(i + 1)
						b.StartTimer()
					}
					t0 := processCPU(b)
					s, err := d.Stats()
					if err != nil {
						b.Fatal(err)
					}
					d.ReleaseStats(prev)
					prev = s
					cpu += processCPU(b) - t0
				}
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/5e8*100, "core-%")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/5e8*100, "wall-core-%")
			})
		}
	}
}

// processCPU is the CPU time the process used so far, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
