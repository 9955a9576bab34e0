package adaptive

import (
	"math"
	"testing"

	"github.com/olcd/olcd/internal/olc"
)

// shedTick is one 500 ms tick of a port offered 300 SYNs/s (150 a tick,
// one request each) with the given share shed, answering responses
// requests with the p95 and in flight given.
func shedTick(p, responses, p95, inflight float64) PortStats {
	admitted := math.Round(150 * (1 - p))
	return PortStats{New: 150, Dropped: uint64(150 - admitted), Response: PortResponse{Available: true, P95: p95,
		Samples: uint64(responses), Requests: admitted, Responses: responses, Inflight: inflight}}
}

// TestQueueLawDrainThenCapacity: a cut sized by the measured queue drains
// the excess within a tick; the first tick whose queue fits the target
// goes back at once (no cooldown, no recovery step) to what the measured
// capacity admits, 90 % of the 180/s served against 300/s offered (pass
// 0.54); past what the capacity admits (pass 0.6) a rise is at most
// probeStep a tick while the queue shows no room (a quarter of Little's
// a × T or more in flight). Once it answers more (its capacity grew), the
// capacity follows and the probe goes on up; with room in flight the law's
// own rise is not held (docs/controller.md §0).
func TestQueueLawDrainThenCapacity(t *testing.T) {
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	cfg := cfgWith()
	cfg.Params.MinPassRate = 0.05
	cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: ResponseTarget{Seconds: 0.1}}}
	c := mustNew(t, cfg)
	at := 0.0
	p := 0.0
	step := func(st PortStats) Decision {
		at += 0.5
		d := c.Step(snap(at), map[olc.PortKey]PortStats{key: st})
		p = d.Ports[0].DropProbability
		return d
	}
	// 3 × the target, 100 in flight where 18 keep it: cut to the bound of
	// a sized cut (pass 0.1).
	d := step(shedTick(0, 90, 0.3, 100))
	if pass := 1 - p; pass > 0.1+1e-9 {
		t.Fatalf("first tick: pass %.3f, want the queue-sized cut to 0.1 (%s)", pass, d.Reason)
	}
	// The backlog served: the p95 is still over the target, the queue fits.
	d = step(shedTick(p, 80, 0.25, 2))
	if pass := 1 - p; pass < 0.53 || pass > 0.55 {
		t.Fatalf("queue drained: pass %.3f, want 0.54 at once (%s)", pass, d.Reason)
	}
	// Below the target at 180/s: past pass 0.6 a rise is probeStep a tick,
	// whatever the law's step (a real service would show its queue).
	prev := 1 - p
	for i := range 20 {
		d = step(shedTick(p, math.Min(90, 150*(1-p)), 0.02, 10))
		pass := 1 - p
		if pass-math.Max(prev, 0.6) > probeStep*1.001 {
			t.Fatalf("tick %d at the capacity: pass %.3f after %.3f, want at most %.2f past 0.6 or the last (%s)", i, pass, prev, probeStep, d.Reason)
		}
		prev = pass
	}
	// The service answers everything admitted (its capacity doubled) with
	// a queue of 10: the capacity measured follows, and the pass rate
	// probes up by probeStep a tick.
	for i := range 5 {
		d = step(shedTick(p, 150*(1-p), 0.02, 10))
		if pass := 1 - p; pass-prev > probeStep*1.001 || pass <= prev {
			t.Fatalf("tick %d: pass %.3f after %.3f, want a probe of %.2f", i, pass, prev, probeStep)
		}
		prev = 1 - p
	}
	// With room in flight (2 where 0.25 × a × T is 4 or more) the law's
	// own rise is not held.
	d = step(shedTick(p, 150*(1-p), 0.02, 2))
	if pass := 1 - p; pass-prev < 0.05 {
		t.Fatalf("room in flight: pass %.3f after %.3f, want the law's rise (%s)", pass, prev, d.Reason)
	}
	for range 20 {
		d = step(shedTick(p, 150*(1-p), 0.02, 2))
	}
	if p > 0 {
		t.Errorf("after 30 s answering all it admitted: p %.3f, want 0 (%s)", p, d.Reason)
	}
}

// TestQueueLawNoLoadFloor: a port overloaded from its first tick (a cold
// start into overload) never has a tick to learn its baseline from; the
// ticks of its overload whose queue drained teach a no-load floor instead,
// and its auto target is target_factor × the floor, at most the initial
// target (100 ms). A tick that ends with a queue does not teach; one
// whose requests outnumber its answers (the last message of a connection
// unanswered) does, its queue not growing. The floor is no baseline.
func TestQueueLawNoLoadFloor(t *testing.T) {
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	tests := []struct {
		name       string
		p95        float64 // the drained ticks' p95
		inflight   float64
		requests   float64 // arriving in the drained ticks (answered: 60)
		wantTarget float64
	}{
		{"drained ticks at 12 ms: 3 × the floor", 0.012, 1, 55, 0.036},
		{"drained ticks at 50 ms: at most the initial target", 0.050, 1, 55, 0.1},
		{"a queue at the ticks' end teaches nothing", 0.012, 20, 55, 0.1},
		{"requests outnumbering answers (the last unanswered) still teach", 0.012, 1, 90, 0.036},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			step := onePort(t, cfgWith(), key, ResponseTarget{Auto: true})
			// 1.5 C from the first tick: the queue grows, the loop starts.
			d := step(PortStats{New: 120, Response: PortResponse{Available: true, P95: 0.3, Samples: 90,
				Requests: 120, Responses: 90, Inflight: 60}})
			if !d.Overloaded {
				t.Fatalf("first tick not overloaded: %s", d.Reason)
			}
			for range 2 { // within the cooldown: the loop still on
				d = step(PortStats{New: 120, Dropped: 65, Response: PortResponse{Available: true, P95: tc.p95, Samples: 60,
					Requests: tc.requests, Responses: 60, Inflight: tc.inflight}})
			}
			pd := d.Ports[0]
			if !d.Overloaded {
				t.Fatalf("the loop ended: %s", d.Reason)
			}
			if math.Abs(pd.ResponseTarget-tc.wantTarget) > 0.002 || pd.Baseline != 0 {
				t.Errorf("target %.4f s, baseline %v; want %.3f s and no baseline (%s)", pd.ResponseTarget, pd.Baseline, tc.wantTarget, d.Reason)
			}
		})
	}
}
