package adaptive

import (
	"fmt"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// BenchmarkStep measures one tick with 0, 10 and 100 ports (the daemon's
// worst case is about 100 ports every 500 ms) under an overload, so the law,
// the split and the change records all run. Compare ports=100 with ports=0
// of the same run for the per-port cost; allocs/op is the per-tick
// allocation count.
func BenchmarkStep(b *testing.B) {
	for _, n := range []int{0, 10, 100} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			cfg := Config{Interval: 500 * time.Millisecond, Params: DefaultParams()}
			cfg.Thresholds[olc.CPUBusy] = 0.8
			cfg.Thresholds[olc.PSICPUSome] = 0.4
			cfg.Thresholds[olc.Load1PerCore] = 2
			cfg.Thresholds[olc.CgroupThrottledRatio] = 0.3
			stats := make(map[olc.PortKey]PortStats, n)
			for i := 0; i < n; i++ {
				k := olc.PortKey{Proto: olc.ProtoTCP, Port: uint16(1000 + i)}
				cfg.Ports = append(cfg.Ports, PortConfig{Key: k, Class: olc.Class(i % int(olc.NumClasses))})
				stats[k] = PortStats{New: uint64(100 + i), Retransmits: uint64(i % 7)}
			}
			c, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			s := olc.Snapshot{Interval: 500 * time.Millisecond}
			s.Set(olc.PSICPUSome, 0.3)
			s.Set(olc.Load1PerCore, 1.5)
			s.Set(olc.CgroupThrottledRatio, 0.1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s.At = TraceOrigin.Add(time.Duration(i) * 500 * time.Millisecond)
				// Alternate 60 s of overload with 60 s of calm so that p
				// keeps moving and events are produced.
				if (i/120)%2 == 0 {
					s.Set(olc.CPUBusy, 0.98)
				} else {
					s.Set(olc.CPUBusy, 0.3)
				}
				_ = c.Step(s, stats)
			}
		})
	}
}

// BenchmarkOnset measures the onset check the daemon runs ten times per
// tick, with an estimate learnt and a window of arrivals below what fits:
// the common case, which must stay a small fraction of a tick's cost.
// Compare with BenchmarkStep of the same run.
func BenchmarkOnset(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			cfg := Config{Interval: 500 * time.Millisecond, Params: DefaultParams()}
			cfg.Thresholds[olc.CPUBusy] = 0.8
			stats := make(map[olc.PortKey]PortStats, n)
			for i := 0; i < n; i++ {
				k := olc.PortKey{Proto: olc.ProtoTCP, Port: uint16(1000 + i)}
				cfg.Ports = append(cfg.Ports, PortConfig{Key: k, Class: olc.Class(i % int(olc.NumClasses))})
				stats[k] = PortStats{New: 50}
			}
			c, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			// Two steady ticks at half the threshold teach the estimate.
			s := olc.Snapshot{Interval: 500 * time.Millisecond}
			s.Set(olc.CPUBusy, 0.4)
			for i := 1; i <= 2; i++ {
				s.At = TraceOrigin.Add(time.Duration(i) * 500 * time.Millisecond)
				c.Step(s, stats)
			}
			if !c.capOK {
				b.Fatal("no estimate learnt")
			}
			window := make(map[olc.PortKey]PortStats, n)
			for k := range stats {
				window[k] = PortStats{New: 10}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, ok := c.Onset(TraceOrigin.Add(time.Second), 100*time.Millisecond, window); ok {
					b.Fatal("the onset check acted below what fits")
				}
			}
		})
	}
}
