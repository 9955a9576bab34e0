package loader

import (
	_ "embed"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// pregateObject is the datapath as it was before the request gate (commit
// 47e4794, bpfel), the baseline BenchmarkRequestGate measures a request
// start against in the same run.
//
//go:embed testdata/olcd_pregate_bpfel.o
var pregateObject []byte

// loadPregate loads the pre-gate object timing every flow of tcp/8080,
// protected in enforce mode at p, with a fresh heartbeat (loadOld), and
// the response knobs and the sizes of the maps it reads besides.
func loadPregate(tb testing.TB, p float64) *ebpf.Collection {
	tb.Helper()
	ncpu, err := ebpf.PossibleCPU()
	must(tb, err)
	const sets = 16
	coll := loadOld(tb, "pre-gate object", pregateObject, p, func(spec *ebpf.CollectionSpec) {
		spec.Maps[olcdMapOlcdFlows].MaxEntries = sets
		spec.Maps[olcdMapOlcdRhist].MaxEntries = uint32(ncpu) * 2
	})
	rp := new(olcdOlcdRespPorts)
	rp.Slot[0][8080] = 1
	must(tb, coll.Variables["olcd_rports"].Set(rp))
	// rctl is written by name as the object's BTF lays it out (loadOld).
	rctl := map[string]uint64{"seed": rand.Uint64() | 1, "sample_max": uint64(sampleMax(1)), "sets_mask": sets - 1,
		"idle_units": uint64(DefaultFlowIdle.Nanoseconds() >> 20), "hist_slots": 2}
	setOldVar(tb, coll, "olcd_rctl", rctl)
	return coll
}

// BenchmarkRequestGate measures the request gate's check where it runs: a
// request that starts on an idle keep-alive connection. A repeated frame
// cannot repeat that moment (the first run starts the timer), so each
// iteration runs one keep-alive exchange once through each object: the
// empty XDP program (floor), the pre-gate object and this one, each the
// next request (ingress, XDP) and its answer (TC egress), every flow
// sampled, the port at p = 2^-32 (the draw runs and practically never
// selects), the gate on in this one. Each run's time is the kernel's
// (BPF_PROG_TEST_RUN, one repetition); the figures are interquartile
// means of the per-iteration differences:
//
//	start-over-floor-ns   this object's request start − the empty program
//	start-delta-ns        this − pre-gate, the request start: the gate's check (goal ≤ 20 ns)
//	answer-delta-ns       this − pre-gate, the answer at egress: the marks the gate compares
//
// Established segments that are no request start (unsampled, sampled with
// a request outstanding) are BenchmarkResponseTiming's, with the gate on.
func BenchmarkRequestGate(b *testing.B) {
	requireRoot(b)
	const p = 1.0 / (1 << 32)
	pre := loadPregate(b, p)
	d := loadTest(b, Config{StaleAfter: time.Hour, ResponseSample: 1})
	must(b, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: p, RequestGate: true}}))
	must(b, d.SetMode(olc.ModeEnforce))
	must(b, d.Heartbeat())
	floor := emptyXDP(b)
	type side struct{ in, out *ebpf.Program }
	sides := []side{{pre.Programs["olcd_xdp"], pre.Programs["olcd_tc_egress"]}, {d.objs.OlcdXdp, d.objs.OlcdTcEgress}}
	once := func(p *ebpf.Program, f []byte) float64 {
		_, per, err := p.Benchmark(f, 1, nil)
		if err != nil {
			b.Fatalf("run: %v", err)
		}
		return float64(per.Nanoseconds())
	}
	// Each side's flow: the first request and its answer, so that every
	// timed iteration is a request start on a connection in the table.
	req := func(i uint32) []byte { return c(cseq0+100*i, sseq0+200*i, psh, 100) }
	ans := func(i uint32) []byte { return s(sseq0+200*i, cseq0+100*(i+1), psh, 200) }
	for _, sd := range sides {
		once(sd.in, req(0))
		once(sd.out, ans(0))
	}
	var fl, startPre, startNew, ansPre, ansNew []float64
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		q, a := req(uint32(i)), ans(uint32(i))
		fl = append(fl, once(floor, q))
		startPre = append(startPre, once(sides[0].in, q))
		ansPre = append(ansPre, once(sides[0].out, a))
		startNew = append(startNew, once(sides[1].in, q))
		ansNew = append(ansNew, once(sides[1].out, a))
	}
	b.StopTimer()
	if r := stats(b, d).Response[tcp8080]; r.Reused < uint64(b.N) || r.Resets != 0 {
		b.Fatalf("reused %d resets %d over %d iterations: the runs were not request starts on an idle connection", r.Reused, r.Resets, b.N)
	}
	iqm := func(x, y []float64) float64 {
		dd := make([]float64, len(x))
		for i := range dd {
			dd[i] = x[i] - y[i]
		}
		slices.Sort(dd)
		q := len(dd) / 4
		return mean(dd[q : len(dd)-q])
	}
	b.ReportMetric(iqm(startNew, fl), "start-over-floor-ns")
	b.ReportMetric(iqm(startNew, startPre), "start-delta-ns")
	b.ReportMetric(iqm(ansNew, ansPre), "answer-delta-ns")
}
