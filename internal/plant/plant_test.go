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
