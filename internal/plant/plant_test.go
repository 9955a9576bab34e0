package plant

import (
	"math"
	"slices"
	"testing"
	"time"
)

// TestSYNRetransmits checks the kernel's SYN schedules: linear timeouts
// (net.ipv4.tcp_syn_linear_timeouts = 4) and the exponential backoff.
func TestSYNRetransmits(t *testing.T) {
	for _, tc := range []struct {
		linear int
		upTo   float64
		want   []float64
	}{
		{4, 10, []float64{1, 2, 3, 4, 6}},
		{4, 2, []float64{1}},
		{4, 1, nil},
		{0, 30, []float64{1, 3, 7, 15}},
		{1, 30, []float64{1, 3, 7, 15}},
	} {
		if got := SYNRetransmits(tc.linear, tc.upTo); !slices.Equal(got, tc.want) {
			t.Errorf("SYNRetransmits(%d, %g) = %v, want %v", tc.linear, tc.upTo, got, tc.want)
		}
	}
}

// TestCapacityUnshed runs each backend unshed with open-loop clients that
// give up after 1 s. At 0.5 C everything is answered; at 3 C the accept
// queue (511) fills: the cpu backend serves it in 0.5 s and its clients
// still get C, while pool's and php's take 1.6 s and 2.8 s, longer than
// the clients wait, so every answer goes to a client that gave up (the
// collapse the controller exists for).
func TestCapacityUnshed(t *testing.T) {
	for _, b := range []Backend{CPU, Pool, PHP} {
		for _, load := range []float64{0.5, 3} {
			sc := Scenario{Backend: b, Clients: OpenGiveup, Load: func(float64) float64 { return load },
				Seconds: 20, Tick: 500 * time.Millisecond, Seed: 3}
			var full bool
			res := Run(sc, func(o Observation) float64 {
				// A full accept queue refuses SYNs: fewer requests than SYNs.
				full = full || (o.T > 5 && float64(o.Requests) < 0.9*float64(o.New))
				return 0
			})
			g := res.Goodput(5, 20)
			want := load * b.Capacity()
			switch {
			case load == 3 && b.Name == "cpu":
				want = b.Capacity()
			case load == 3:
				want = 0
			}
			if math.Abs(g-want) > 0.03*b.Capacity() {
				t.Errorf("%s at %g C: goodput %.0f/s, want ≈ %.0f", b.Name, load, g, want)
			}
			if full != (load == 3) {
				t.Errorf("%s at %g C: accept queue full %v", b.Name, load, full)
			}
		}
	}
}

// TestParseScenario parses the harness's names and refuses others.
func TestParseScenario(t *testing.T) {
	sc, phase, err := ParseScenario("pool-closed-pool-3x", 2)
	if err != nil || sc.Backend.Name != "pool" || sc.Clients != ClosedPool || sc.Pool != 64 || sc.Seed != 2 || phase != [2]float64{10, 40} {
		t.Errorf("pool-closed-pool-3x: %+v %v %v", sc, phase, err)
	}
	if sc, phase, err = ParseScenario("cpu-open-giveup-coldstart", 1); err != nil || sc.Load(1) != 0 || sc.Load(6) != 1.5 || phase != [2]float64{5, 35} {
		t.Errorf("coldstart: %v %v", phase, err)
	}
	for _, bad := range []string{"", "cpu", "cpu-3x", "gpu-open-retry-3x", "cpu-open-later-3x", "cpu-open-retry-9x"} {
		if _, _, err := ParseScenario(bad, 1); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestStaticLimit: a static SYN limit at C holds the goodput of the 3 C
// phase near C for every backend with clients that give up (the line the
// harness compares olcd with), and refuses about two thirds of the SYNs.
func TestStaticLimit(t *testing.T) {
	for _, b := range []Backend{CPU, Pool, PHP} {
		sc, phase, err := ParseScenario(b.Name+"-open-giveup-3x", 1)
		if err != nil {
			t.Fatal(err)
		}
		sc.Limit = b.Capacity()
		var syn, dropped uint64
		res := Run(sc, func(o Observation) float64 {
			if o.T > phase[0]+1 && o.T <= phase[1] {
				syn, dropped = syn+o.New, dropped+o.Dropped
			}
			return 0
		})
		g := res.Goodput(phase[0], phase[1]) / res.Capacity
		t.Logf("%s-open-giveup-3x behind a static limit at C: goodput %.3f C, %.0f %% of SYNs refused", b.Name, g, 100*float64(dropped)/float64(syn))
		if g < 0.9 || g > 1.01 {
			t.Errorf("%s: goodput %.3f C behind a static limit at C, want 0.9 … 1", b.Name, g)
		}
	}
}

// TestClosedPoolSelection compares, on the harness's closed pool against its
// cpu backend (Quota: 64 blocking clients with a 2 s timeout at 3 C of a
// 190/s service), the three ways a SYN dropper can treat retransmitted
// SYNs, each at its best constant drop probability, counting goodput as the
// harness does (answers within 200 ms of the client's first SYN, from +5 s
// of the 3 C phase, mean of 3 seeds): retransmits drawn like first attempts,
// all retransmits shed, and retransmits admitted first (never dropped). A
// retransmit's answer is at least 1 s late, outside any SLO below 1 s, so
// admitting it spends a worker on an answer that is no goodput; it returns
// its client to the pool 1 s sooner, but that is worth less than the first
// attempt it displaces. Measured: shed 0.95 C (at p 0.08), drawn 0.84 C
// (p 0.15), admitted first 0.80 C (p 0.18): preferring retransmits loses.
func TestClosedPoolSelection(t *testing.T) {
	const slo, seeds = 0.2, 3
	best := func(retx func(p float64) float64) (g, at float64) {
		for _, p0 := range []float64{0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.18, 0.2, 0.25} {
			var sum float64
			for seed := uint64(1); seed <= seeds; seed++ {
				sc := Scenario{Backend: Quota, Clients: ClosedPool, Pool: 64, LinearTimeouts: 4, Seconds: 40,
					Tick: 500 * time.Millisecond, Seed: seed, RetransmitP: retx, Load: func(t float64) float64 {
						if t < 10 {
							return 0.5
						}
						return 3
					}}
				res := Run(sc, func(o Observation) float64 {
					if o.T >= 10 {
						return p0
					}
					return 0
				})
				sum += res.GoodputWithin(15, 40, slo) / res.Capacity / seeds
			}
			if sum > g {
				g, at = sum, p0
			}
		}
		return g, at
	}
	drawn, pd := best(nil)
	shed, ps := best(func(p float64) float64 {
		if p > 0 {
			return 1
		}
		return 0
	})
	first, pf := best(func(float64) float64 { return 0 })
	t.Logf("closed pool on the quota backend, goodput within %.0f ms at the best constant p: retransmits shed %.3f C (p %.2f), drawn %.3f C (p %.2f), admitted first %.3f C (p %.2f)",
		slo*1000, shed, ps, drawn, pd, first, pf)
	if !(shed > drawn && drawn > first) {
		t.Errorf("want shed > drawn > admitted first, got %.3f, %.3f, %.3f C", shed, drawn, first)
	}
}
