package pressure

import (
	"math"
	"testing"

	"github.com/olcd/olcd/internal/olc"
)

// TestEvaluate covers usability, corroboration and the driver: a load
// over its threshold on an idle CPU (I/O wait) does not count, on a busy
// one it does; throttling counts with the cgroup using its quota; a
// fraction above 1.05 or a pressure that overflows is invalid; a stale
// snapshot has nothing available.
func TestEvaluate(t *testing.T) {
	const none = olc.NumSignals
	type sample struct {
		sig olc.Signal
		v   float64
	}
	for _, tc := range []struct {
		name       string
		thresholds map[olc.Signal]float64
		samples    []sample
		stale      bool
		wantP      float64 // 0: unavailable
		wantDriver olc.Signal
		wantCorr   map[olc.Signal]bool
		wantInv    olc.Signal // none: no invalid sample
	}{
		{"load on an idle CPU", map[olc.Signal]float64{olc.Load1PerCore: 1}, []sample{{olc.Load1PerCore, 3}, {olc.CPUBusy, 0.2}},
			false, 0, 0, map[olc.Signal]bool{olc.Load1PerCore: false}, none},
		{"load on a busy CPU", map[olc.Signal]float64{olc.Load1PerCore: 1}, []sample{{olc.Load1PerCore, 3}, {olc.CPUBusy, 0.5}},
			false, 3, olc.Load1PerCore, map[olc.Signal]bool{olc.Load1PerCore: true}, none},
		{"throttling with the quota used", map[olc.Signal]float64{olc.CgroupThrottledRatio: 0.1, olc.CPUBusy: 0.8},
			[]sample{{olc.CgroupThrottledRatio, 0.3}, {olc.CgroupCPUUsageOfQuota, 0.6}, {olc.CPUBusy, 0.4}},
			false, 3, olc.CgroupThrottledRatio, map[olc.Signal]bool{olc.CgroupThrottledRatio: true, olc.CPUBusy: true}, none},
		{"throttling of bursty threads", map[olc.Signal]float64{olc.CgroupThrottledRatio: 0.1}, []sample{{olc.CgroupThrottledRatio, 0.3}, {olc.CgroupCPUUsageOfQuota, 0.1}},
			false, 0, 0, map[olc.Signal]bool{olc.CgroupThrottledRatio: false}, none},
		{"a fraction above 1.05", map[olc.Signal]float64{olc.CPUBusy: 0.8}, []sample{{olc.CPUBusy, 1.2}}, false, 0, 0, nil, olc.CPUBusy},
		{"a pressure that overflows", map[olc.Signal]float64{olc.RequestsPerS: 1e-10}, []sample{{olc.RequestsPerS, 1e300}}, false, 0, 0, nil, olc.RequestsPerS},
		{"stale", map[olc.Signal]float64{olc.CPUBusy: 0.8}, []sample{{olc.CPUBusy, 0.9}}, true, 0, 0, map[olc.Signal]bool{olc.CPUBusy: false}, none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var th [olc.NumSignals]float64
			for sig, x := range tc.thresholds {
				th[sig] = x
			}
			var s olc.Snapshot
			for _, x := range tc.samples {
				s.Set(x.sig, x.v)
			}
			n := Evaluate(&s, &th, 0.5, tc.stale)
			if len(n.Signals) != len(tc.thresholds) {
				t.Fatalf("%d signals, want %d", len(n.Signals), len(tc.thresholds))
			}
			if n.Available != (tc.wantP > 0) || (n.Available && (math.Abs(n.Pressure-tc.wantP) > 1e-9 || n.Driver != tc.wantDriver)) {
				t.Errorf("pressure %v (available %v, driver %s), want %v (%s)", n.Pressure, n.Available, n.Driver, tc.wantP, tc.wantDriver)
			}
			for _, st := range n.Signals {
				if want, ok := tc.wantCorr[st.Signal]; ok && st.Corroborated != want {
					t.Errorf("%s corroborated %v, want %v", st.Signal, st.Corroborated, want)
				}
				if st.Invalid != (st.Signal == tc.wantInv) {
					t.Errorf("%s invalid %v", st.Signal, st.Invalid)
				}
			}
		})
	}
}
