package overload

import (
	"math"
	"slices"
	"testing"
	"time"
)

// TestCapacityDips: a pinned second counts as a capacity dip only while
// olcd admitted what it admitted in the rest of the phase, at its usual p;
// the phase's first second, over-admission, a recovery probe and a phase
// pinned for longer than MaxDipSeconds are not dips.
func TestCapacityDips(t *testing.T) {
	steady := SecondPoint{Admitted: 170, P: 0.68, CPU: 0.92}
	mk := func(edit map[int]SecondPoint) *RunResult {
		r := &RunResult{Phases: []PhaseResult{{Name: "0.5x", DurationS: 5}, {Name: "3x", DurationS: 30}, {Name: "0.5x-after", DurationS: 10}}}
		for i := 0; i < 45; i++ {
			pt := steady
			if i < 5 || i >= 35 {
				pt = SecondPoint{Admitted: 90, P: 0, CPU: 0.5}
			}
			if e, ok := edit[i]; ok {
				pt = e
			}
			pt.T = float64(i)
			r.Series = append(r.Series, pt)
		}
		return r
	}
	cases := []struct {
		name string
		edit map[int]SecondPoint
		want []int
	}{
		{"steady", nil, nil},
		{"a dip", map[int]SecondPoint{20: {Admitted: 168, P: 0.69, CPU: 1.0}, 21: {Admitted: 166, P: 0.72, CPU: 0.99}}, []int{20, 21}},
		{"the step's first second", map[int]SecondPoint{5: {Admitted: 200, P: 0.5, CPU: 1.0}}, nil},
		{"over-admission", map[int]SecondPoint{20: {Admitted: 190, P: 0.64, CPU: 1.0}}, nil},
		{"a recovery probe", map[int]SecondPoint{20: {Admitted: 170, P: 0.6, CPU: 1.0}}, nil},
		{"pinned for 4 s", map[int]SecondPoint{
			10: {Admitted: 170, P: 0.68, CPU: 1.0}, 11: {Admitted: 170, P: 0.68, CPU: 1.0},
			12: {Admitted: 170, P: 0.68, CPU: 1.0}, 13: {Admitted: 170, P: 0.68, CPU: 1.0}}, nil},
		{"no CPU sample", map[int]SecondPoint{20: {Admitted: 170, P: 0.68, CPU: math.NaN()}}, nil},
	}
	for _, tc := range cases {
		if got := mk(tc.edit).CapacityDips("3x"); !slices.Equal(got, tc.want) {
			t.Errorf("%s: dips %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestP99Excluding: the requests started in a dip second and the second
// after it are left out of the p99; the others are not.
func TestP99Excluding(t *testing.T) {
	rec := &records{}
	for i := 0; i < 3000; i++ {
		start := 5*time.Second + time.Duration(i)*10*time.Millisecond // 5 s … 35 s
		lat := 10 * time.Millisecond
		if start >= 20*time.Second && start < 22*time.Second {
			lat = 80 * time.Millisecond // 200 requests: beyond the 1 % of 3000
		}
		rec.requests = append(rec.requests, request{start: start, latency: lat, outcome: outcomeOK})
	}
	rec.requests = append(rec.requests, request{health: true, start: 20 * time.Second, latency: time.Second, outcome: outcomeOK})
	r := &RunResult{Phases: []PhaseResult{{Name: "0.5x", DurationS: 5}, {Name: "3x", DurationS: 30}}, rec: rec}
	if p := r.P99Excluding("3x", nil); p != 80 {
		t.Errorf("p99 with the dip: %v ms, want 80", p)
	}
	if p := r.P99Excluding("3x", []int{20}); p != 10 {
		t.Errorf("p99 without the dip second and the next: %v ms, want 10", p)
	}
	if p := r.P99Excluding("none", nil); p != 0 {
		t.Errorf("p99 of a missing phase: %v", p)
	}
}

// TestCapacityAtRun: C is scaled down by the backend's extra CPU per
// request against the knee of the calibration, never up, and not at all
// beyond MaxSlowdown.
func TestCapacityAtRun(t *testing.T) {
	cal := &Calibration{CapacityRPS: 180, Steps: []CalibrationStep{
		{RateRPS: 170, GoodputRPS: 170, CPUBusy: 0.92},
		{RateRPS: 180, GoodputRPS: 180, CPUBusy: 0.972, Knee: true}, // 5.4 ms per request
	}}
	run := func(succPerS, cpu float64) *RunResult {
		return &RunResult{Phases: []PhaseResult{{Name: "3x", DurationS: 30, Successes: int(succPerS * 30), CPUBusy: cpu}}}
	}
	cases := []struct {
		name     string
		r        *RunResult
		want     float64
		wantOK   bool
		slowdown float64
	}{
		{"as fast as the calibration", run(172, 0.929), 180, true, 0},
		{"faster", run(180, 0.90), 180, true, -0.0741},
		{"10 % slower", run(150, 0.891), 180 / 1.1, true, 0.1},
		{"30 % slower", run(130, 0.9126), 180, false, 0.3},
		{"nothing served", run(0, 0.9), 180, false, 0},
	}
	for _, tc := range cases {
		got, slow, ok := tc.r.CapacityAtRun("3x", cal)
		if ok != tc.wantOK || math.Abs(got-tc.want) > 0.5 || math.Abs(slow-tc.slowdown) > 0.005 {
			t.Errorf("%s: %.1f/s (slowdown %.3f, ok %v), want %.1f/s (%.3f, %v)", tc.name, got, slow, ok, tc.want, tc.slowdown, tc.wantOK)
		}
	}
}

// TestSteadyShare: the share of 1 s windows at 0.8 × the mean or more.
func TestSteadyShare(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		want float64
	}{
		{"empty", nil, 1},
		{"flat", []float64{100, 100, 100, 100}, 1},
		{"one dip", []float64{100, 100, 100, 20}, 0.75},
		{"limit cycle", []float64{200, 10, 200, 10}, 0.5},
		{"all zero", []float64{0, 0}, 1},
	} {
		if got := steadyShare(tc.xs, windowOKShare); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: steadyShare %v = %v, want %v", tc.name, tc.xs, got, tc.want)
		}
	}
}

// TestOverloadPhase: the phase with the highest offered load, the first of
// equals.
func TestOverloadPhase(t *testing.T) {
	for _, tc := range []struct {
		sc   Scenario
		want string
	}{
		{Overload3x, "3x"},
		{ColdStart, "1.5x"},
		{CapacityHalved, "1.5x-quota-halved"},
		{Matrix3x(BackendPHP, ClientsClosedPool, time.Second, time.Second, time.Second), "3x"},
		{Scenario{}, ""},
	} {
		if got := tc.sc.OverloadPhase(); got != tc.want {
			t.Errorf("%s: overload phase %q, want %q", tc.sc.Name, got, tc.want)
		}
	}
	if n := Matrix3x(BackendPool, ClientsOpenRetry, time.Second, time.Second, time.Second).Name; n != "pool-open-retry-3x" {
		t.Errorf("matrix name %q, want pool-open-retry-3x", n)
	}
	if Overload3x.Name != "cpu-open-giveup-3x" {
		t.Errorf("scenario 1 is named %q, want cpu-open-giveup-3x", Overload3x.Name)
	}
}

// TestSummarise: the overload phase's goodput, the drop probability's
// spread and the steady share come from the 1 s series from +SettleTime;
// the health checks from the whole run.
func TestSummarise(t *testing.T) {
	r := &RunResult{Variant: VariantEnforce, Phases: []PhaseResult{
		{Name: "0.5x", DurationS: 2, HealthOK: 20, HealthTotal: 20},
		{Name: "3x", DurationS: 10, GoodputRPS: 180, P99Ms: 30, MeanConnectMs: 400, HealthOK: 99, HealthTotal: 100,
			Settled: &PhaseResult{GoodputRPS: 190}},
	}}
	for i := range 12 {
		pt := SecondPoint{T: float64(i), Goodput: 190, P: 0.6}
		if i == 9 {
			pt.Goodput, pt.P = 50, 0.7 // one bad window in the steady part
		}
		if i < 7 { // before +5 s of the 3x phase (which starts at 2 s): not counted
			pt.Goodput, pt.P = 0, 0
		}
		r.Series = append(r.Series, pt)
	}
	m := r.summarise("3x", 200)
	if m.GoodputC != 0.9 || m.SettledGoodputC != 0.95 || m.P99Ms != 30 || m.MeanConnectMs != 400 {
		t.Errorf("summary %+v: want goodput 0.9 C, settled 0.95 C, p99 30, connect 400", m)
	}
	if m.HealthOK != 119 || m.HealthTotal != 120 {
		t.Errorf("health %d/%d, want 119/120", m.HealthOK, m.HealthTotal)
	}
	// Windows 7..11: one of five below 0.8 × the mean.
	if math.Abs(m.WindowsOK-0.8) > 1e-9 {
		t.Errorf("steady share %.3f, want 0.8", m.WindowsOK)
	}
	if m.PStdDev == nil || math.Abs(*m.PStdDev-0.04) > 1e-9 {
		t.Errorf("p std-dev %v, want 0.04", m.PStdDev)
	}
	r.Variant = VariantStatic
	if m := r.summarise("3x", 200); m.PStdDev != nil {
		t.Errorf("static: p std-dev %v, want none (no olcd)", *m.PStdDev)
	}
}

func TestDropViolations(t *testing.T) {
	at := func(s float64, p float64, dropped, rejected uint64) sample {
		return sample{t: time.Duration(s * float64(time.Second)), olcd: true, p: p, dropped: dropped, rejected: rejected}
	}
	capped := func(s sample, n uint64) sample { s.capped = n; return s }
	cases := []struct {
		name    string
		variant Variant
		samples []sample
		want    int
	}{
		{"shedding, then a tick's tail", VariantEnforce, []sample{at(0, 0.5, 0, 0), at(0.5, 0.5, 10, 0), at(1, 0, 12, 0), at(1.5, 0, 12, 0), at(2, 0, 12, 0)}, 0},
		{"a drop with p 0 three samples long", VariantEnforce, []sample{at(0, 0, 0, 0), at(0.5, 0, 0, 0), at(1, 0, 3, 0)}, 1},
		{"rejected under the drop action", VariantEnforce, []sample{at(0, 0.5, 2, 1)}, 1},
		{"rejected under the reject action", VariantEnforceReject, []sample{at(0, 0.5, 2, 1)}, 0},
		{"a new olcd's counters", VariantEnforce, []sample{at(0, 0, 50, 0), at(0.5, 0, 50, 0), at(1, 0, 0, 0), at(1.5, 0, 0, 0)}, 0},
		{"a static cap's drops with p 0", VariantEnforce, []sample{capped(at(0, 0, 0, 0), 0), capped(at(0.5, 0, 40, 0), 40), capped(at(1, 0, 90, 0), 90)}, 0},
		{"more drops than the cap's with p 0", VariantEnforce, []sample{capped(at(0, 0, 0, 0), 0), capped(at(0.5, 0, 40, 0), 40), capped(at(1, 0, 95, 0), 90)}, 1},
		{"an onset episode between two samples", VariantEnforce, []sample{at(5, 0, 0, 0), at(5.5, 0, 0, 0), at(6, 0, 6, 0)}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The decision log's one episode: p above 0 from 5.55 s to 5.9 s.
			shed := []span{{5550 * time.Millisecond, 5900 * time.Millisecond}}
			r := &RunResult{Variant: tc.variant, rec: &records{samples: tc.samples, shed: shed}}
			if got := r.DropViolations(); len(got) != tc.want {
				t.Errorf("violations %q, want %d", got, tc.want)
			}
		})
	}
}

// TestAfterCuts: a cut is a sample whose drop probability for first
// attempts rose by 0.1 or more; what counts is the connects that completed
// in the second after it over the capacity measured at it, the fewest of
// the cuts in the span.
func TestAfterCuts(t *testing.T) {
	rec := &records{samples: []sample{
		{t: 10 * time.Second, olcd: true, p: 0.1, connCap: 200},
		{t: 10500 * time.Millisecond, olcd: true, p: 0.5, connCap: 200}, // a cut
		{t: 11 * time.Second, olcd: true, p: 0.55, connCap: 200},
		{t: 20 * time.Second, olcd: true, p: 0.2, connCap: 200},
		{t: 20500 * time.Millisecond, olcd: true, p: 0.4, connCap: 100}, // a cut
		{t: 40 * time.Second, olcd: true, p: 0, connCap: 100},
		{t: 40500 * time.Millisecond, olcd: true, p: 0.9, connCap: 100}, // out of the span
	}}
	add := func(at time.Duration, n int) {
		for i := range n {
			rec.dials = append(rec.dials, dial{start: at + time.Duration(i)*time.Millisecond, dur: time.Millisecond, outcome: outcomeOK})
		}
	}
	add(10600*time.Millisecond, 190) // 0.95 of 200
	add(20600*time.Millisecond, 60)  // 0.6 of 100
	rec.dials = append(rec.dials, dial{start: 20600 * time.Millisecond, dur: time.Millisecond, outcome: outcomeTimeout})
	r := &RunResult{rec: rec}
	n, worst := r.afterCuts(5*time.Second, 35*time.Second)
	if n != 2 || worst == nil || math.Abs(*worst-0.6) > 1e-9 {
		t.Errorf("cuts %d, worst %v; want 2 and 0.6", n, worst)
	}
	if n, worst := r.afterCuts(0, 5*time.Second); n != 0 || worst != nil {
		t.Errorf("no cut in the span: %d %v", n, worst)
	}
}

// TestPhaseFromAndClientInflight: a phase without its first second, and
// the requests in flight as the clients saw them: 100 requests a second of
// 50 ms each keep 5 in flight; timed-out, health and other phases'
// requests are not counted.
func TestPhaseFromAndClientInflight(t *testing.T) {
	rec := &records{phases: []Phase{{Name: "a", Duration: 2 * time.Second}, {Name: "b", Duration: 4 * time.Second}}}
	for i := range 600 {
		start := time.Duration(i) * 10 * time.Millisecond // 0 … 6 s
		rec.requests = append(rec.requests, request{start: start, latency: 50 * time.Millisecond, outcome: outcomeOK})
		if i%10 == 0 {
			rec.requests = append(rec.requests, request{start: start, latency: time.Second, outcome: outcomeTimeout},
				request{health: true, start: start, latency: time.Second, outcome: outcomeOK})
		}
		rec.dials = append(rec.dials, dial{start: start, outcome: outcomeOK})
	}
	// Phase a's requests are 3 long: they must not count in b.
	for i := range rec.requests {
		if rec.requests[i].start < 2*time.Second && rec.requests[i].outcome == outcomeOK && !rec.requests[i].health {
			rec.requests[i].latency = 150 * time.Millisecond
		}
	}
	r := &RunResult{Variant: VariantEnforce, Phases: []PhaseResult{{Name: "a", DurationS: 2}, {Name: "b", DurationS: 4}}, rec: rec, slo: 200 * time.Millisecond}
	p := r.PhaseFrom("b", time.Second)
	if p.DurationS != 3 || p.Connected != 300 || p.Successes != 300 || p.Timeouts != 30 || p.HealthTotal != 30 {
		t.Errorf("b from +1 s: %.1f s, %d connected, %d successes, %d timeouts, %d health checks; want 3 s, 300, 300, 30, 30", p.DurationS, p.Connected, p.Successes, p.Timeouts, p.HealthTotal)
	}
	if mean, p99 := r.ClientInflight("b", time.Second); math.Abs(mean-5) > 0.01 || p99 != 5 {
		t.Errorf("b from +1 s: %.2f in flight on average, p99 %v; want 5 and 5", mean, p99)
	}
	if p := r.PhaseFrom("b", 4*time.Second); p.Name != "" {
		t.Errorf("b from +4 s: %+v, want nothing", p)
	}
	if mean, _ := r.ClientInflight("none", 0); mean != 0 {
		t.Errorf("a missing phase: %v in flight", mean)
	}
}

// TestConnectIdle: the time a stalled client left a cap's bucket idle is
// each gap in its connects (and from the phase's start, to its end) past
// CapBurstTime; the light clients' connects do not fill the heavy one's.
func TestConnectIdle(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name        string
		heavy       []int // the work client's connect starts (ms)
		light       []int
		all, onlyHv float64 // the idle seconds wanted
	}{
		{"steady, no gap past the burst", []int{0, 50, 100, 150, 200, 250, 300, 350, 400, 450, 500, 550, 600, 650, 700, 750, 800, 850, 900, 950}, nil, 0, 0},
		{"a 0.5 s stall", []int{0, 50, 100, 600, 650, 700, 750, 800, 850, 900, 950}, nil, 0.4, 0.4},
		{"a late start and an early end", []int{300, 350, 400}, nil, 0.2 + 0.5, 0.2 + 0.5},
		{"the light clients do not fill it", []int{0, 50, 100, 600, 650, 700, 750, 800, 850, 900, 950}, []int{200, 300, 400, 500}, 0, 0.4},
		{"none", nil, nil, 0.9, 0.9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &records{phases: []Phase{{Name: "a", Duration: time.Second}}}
			for _, s := range tc.heavy {
				rec.dials = append(rec.dials, dial{start: ms(s), outcome: outcomeOK})
			}
			for _, s := range tc.light {
				rec.dials = append(rec.dials, dial{start: ms(s), outcome: outcomeOK, light: true})
			}
			p := phaseResult(rec, "a", 0, time.Second, time.Second, VariantEnforce)
			if math.Abs(p.ConnectIdleS-tc.all) > 1e-9 || math.Abs(p.HeavyConnectIdleS-tc.onlyHv) > 1e-9 {
				t.Errorf("idle %.3f s, the work client's %.3f s; want %.3f and %.3f", p.ConnectIdleS, p.HeavyConnectIdleS, tc.all, tc.onlyHv)
			}
		})
	}
}
