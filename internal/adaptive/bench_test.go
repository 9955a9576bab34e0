package adaptive

import (
	"fmt"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/resptime"
	"github.com/olcd/olcd/internal/trace"
)

// benchController returns a controller of n timed ports with auto targets,
// cpu_busy and psi_cpu_some as guards, and a tick's counts of a port at
// 3 × its capacity with a standing queue, so every part of the law runs.
func benchController(b *testing.B, n int) (*Controller, map[olc.PortKey]PortStats) {
	cfg := Config{Interval: 500 * time.Millisecond, Params: DefaultParams()}
	cfg.Thresholds[olc.CPUBusy] = 0.8
	cfg.Thresholds[olc.PSICPUSome] = 0.4
	stats := make(map[olc.PortKey]PortStats, n)
	hist := make([]uint64, resptime.Buckets) // 100 answers, 20 to 60 ms: the tail budget reads it
	for i := range 100 {
		hist[resptime.Bucket(time.Duration(20+i*40/100)*time.Millisecond)]++
	}
	for i := range n {
		k := olc.PortKey{Proto: olc.ProtoTCP, Port: uint16(1000 + i)}
		cfg.Ports = append(cfg.Ports, PortConfig{Key: k, Class: olc.Class(i % int(olc.NumClasses)), Target: ResponseTarget{Auto: true}})
		stats[k] = PortStats{New: 300, Retransmits: 20, Dropped: 150,
			Response: PortResponse{Available: true, P95: 0.05, Samples: 100, Requests: 150, Responses: 100, Inflight: 30, Hist: hist}}
	}
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c, stats
}

// BenchmarkStep measures one tick with 0, 10 and 100 timed ports (the
// daemon's worst case is about 100 ports every 500 ms); compare ports=100
// with ports=0 of the same run for the per-port cost.
func BenchmarkStep(b *testing.B) {
	for _, n := range []int{0, 10, 100} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			c, stats := benchController(b, n)
			s := olc.Snapshot{Interval: 500 * time.Millisecond}
			s.Set(olc.PSICPUSome, 0.3)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				s.At = trace.Origin.Add(time.Duration(i) * 500 * time.Millisecond)
				s.Set(olc.CPUBusy, 0.3+0.7*float64((i/120)%2))
				_ = c.Step(s, stats)
			}
		})
	}
}

// BenchmarkOnset measures one onset window (the daemon runs ten a tick)
// with 1, 10 and 100 timed ports whose laws shed; compare with
// BenchmarkStep of the same run.
func BenchmarkOnset(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			c, stats := benchController(b, n)
			c.Step(olc.Snapshot{At: trace.Origin, Interval: 500 * time.Millisecond}, stats)
			win := make(map[olc.PortKey]PortStats, n)
			for k := range stats {
				win[k] = PortStats{New: 30, Response: PortResponse{Requests: 15, Responses: 10, Inflight: 30}}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_, _ = c.Onset(trace.Origin.Add(time.Duration(i)*50*time.Millisecond), 50*time.Millisecond, win)
			}
		})
	}
}
