package adaptive

import (
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/olc"
)

// measuredTick is one 500 ms tick's port counts with a measured p95
// (seconds), the requests answered, and in flight what Little's law says
// the p95 holds (responses per second × p95, at least 1).
func measuredTick(p95, responses float64) PortStats {
	return PortStats{New: uint64(responses), Response: PortResponse{Available: true, P95: p95, Samples: uint64(responses),
		Requests: responses, Responses: responses, Inflight: max(1, responses/0.5*p95)}}
}

// TestBaselineNotFromOverload is the lesson of envoyproxy/envoy#11579 on
// the auto target: after a baseline of 10 ms is learnt on quiet ticks, a
// sustained overload whose p95 sits at 35–60 ms (the loop shedding) for
// 5 minutes must not move the baseline or the target; once the overload is
// over, quiet ticks teach again, and only after baselineQuiet of them.
func TestBaselineNotFromOverload(t *testing.T) {
	step := onePort(t, cfgWith(), olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, ResponseTarget{Auto: true})
	for range 20 {
		step(measuredTick(0.010, 100))
	}
	d := step(measuredTick(0.010, 100))
	if b := d.Ports[0].Baseline; b < 0.0099 || b > 0.0101 || d.Ports[0].ResponseTarget < 0.0299 || d.Ports[0].ResponseTarget > 0.0301 {
		t.Fatalf("baseline %v target %v after quiet ticks at 10 ms, want 10 ms and 30 ms", b, d.Ports[0].ResponseTarget)
	}
	for i := range 600 {
		d = step(measuredTick(0.035+0.025*float64(i%2), 100))
		if !d.Overloaded && i > 0 {
			t.Fatalf("tick %d: not overloaded at p95 %v over the target", i, 0.035+0.025*float64(i%2))
		}
	}
	if b := d.Ports[0].Baseline; b < 0.0099 || b > 0.0101 {
		t.Fatalf("baseline %v after 5 min of overload, want it still 10 ms", b)
	}
	// Quiet again, at 12 ms: the loop recovers, then the baseline moves up
	// slowly (a twentieth per tick), never in one step.
	var prev float64
	for i := range 60 {
		d = step(measuredTick(0.012, 100))
		b := d.Ports[0].Baseline
		if prev > 0 && b-prev > 0.05*0.002+1e-9 {
			t.Fatalf("tick %d: baseline jumped from %v to %v", i, prev, b)
		}
		prev = b
	}
	if prev <= 0.010 || prev > 0.012 {
		t.Errorf("baseline %v after a minute of quiet ticks at 12 ms, want in (10, 12] ms", prev)
	}
}

// TestQueueLawEvents: an overload seen by the queue law alone (no resource
// signal over its threshold) starts, continues and ends in the decision
// log like one of the resource law, with one start and one end.
func TestQueueLawEvents(t *testing.T) {
	cfg := cfgWith(sig{olc.CPUBusy, 0.9})
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: ResponseTarget{Seconds: 0.05}}}
	c := mustNew(t, cfg)
	var kinds []string
	for i := range 100 {
		p95 := 0.02
		if i >= 10 && i < 50 {
			p95 = 0.2
		}
		d := c.Step(snap(float64(i)*0.5, sig{olc.CPUBusy, 0.3}), map[olc.PortKey]PortStats{key: measuredTick(p95, 100)})
		for _, ev := range d.Events {
			if ev.Kind != EventProbabilityChange {
				kinds = append(kinds, ev.Kind.String())
			}
		}
		if i == 20 && (d.Ports[0].DropProbability == 0 || !d.Overloaded || !strings.Contains(d.Reason, "response_time_p95")) {
			t.Fatalf("tick 20: p %v overloaded %v reason %q", d.Ports[0].DropProbability, d.Overloaded, d.Reason)
		}
		if i == 99 && (d.Ports[0].DropProbability != 0 || d.Overloaded) {
			t.Fatalf("end: p %v overloaded %v", d.Ports[0].DropProbability, d.Overloaded)
		}
	}
	got := strings.Join(kinds, ",")
	if !strings.HasPrefix(got, "overload_start,") || !strings.HasSuffix(got, ",overload_end") ||
		strings.Count(got, "overload_start") != 1 || strings.Count(got, "overload_end") != 1 {
		t.Errorf("events %s, want one start, continues, one end", got)
	}
}

// TestQueueLawClassOrder: two ports over their targets, critical and
// best-effort (one bottleneck): the critical port holds while the
// best-effort port can still shed, and sheds once it is at its bound.
func TestQueueLawClassOrder(t *testing.T) {
	cfg := cfgWith()
	cfg.Params.MinPassRate = 0.3
	crit, be := olc.PortKey{Proto: olc.ProtoTCP, Port: 443}, olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}
	tgt := ResponseTarget{Seconds: 0.05}
	cfg.Ports = []PortConfig{{Key: crit, Class: olc.ClassCritical, Target: tgt}, {Key: be, Class: olc.ClassBestEffort, Target: tgt}}
	c := mustNew(t, cfg)
	var critShedAt, beBoundAt int = -1, -1
	for i := range 100 {
		d := c.Step(snap(float64(i)*0.5), map[olc.PortKey]PortStats{crit: measuredTick(0.3, 100), be: measuredTick(0.3, 100)})
		pc, pb := d.Ports[0].DropProbability, d.Ports[1].DropProbability
		if pb >= 0.7-1e-9 && beBoundAt < 0 {
			beBoundAt = i
		}
		if pc > 0 && critShedAt < 0 {
			critShedAt = i
			if pb < 0.7-1e-9 {
				t.Fatalf("tick %d: critical shed (%v) while best-effort at %v below its bound", i, pc, pb)
			}
		}
	}
	if beBoundAt < 0 || critShedAt <= beBoundAt {
		t.Errorf("best-effort at its bound at tick %d, critical shed from tick %d: want best-effort first, then critical", beBoundAt, critShedAt)
	}
}

// TestEstimateStandsDownWhenQueueMeasured: with a port's queue measured, a
// cpu_busy guard pinned at 1 under a 3 × rate does not learn or use the
// saturation estimate; the same ticks without a target do.
func TestEstimateStandsDownWhenQueueMeasured(t *testing.T) {
	for _, measured := range []bool{true, false} {
		cfg := cfgWith(sig{olc.CPUBusy, 0.8})
		key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
		cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal}}
		if measured {
			cfg.Ports[0].Target = ResponseTarget{Seconds: 0.05}
		}
		c := mustNew(t, cfg)
		for i := range 40 {
			busy, rate := 0.5, 100.0
			if i >= 20 {
				busy, rate = 1, 300
			}
			st := measuredTick(0.02, rate/2)
			st.New = uint64(rate / 2)
			c.Step(snap(float64(i)*0.5, sig{olc.CPUBusy, busy}), map[olc.PortKey]PortStats{key: st})
			if c.capOK == measured && i == 19 {
				t.Fatalf("measured %v: estimate learnt %v before the step", measured, c.capOK)
			}
		}
	}
}

// TestSlowServiceNotOverloaded: a service that answers every request in
// 200 ms at a steady low rate (twice the initial target) learns its
// baseline on its first tick and is never shed; the same p95 on a queue
// that grows from the first tick (more requests than answers) is shed at
// the initial target.
func TestSlowServiceNotOverloaded(t *testing.T) {
	for _, growing := range []bool{false, true} {
		cfg := cfgWith()
		key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
		cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: ResponseTarget{Auto: true}}}
		c := mustNew(t, cfg)
		var shed bool
		for i := range 40 {
			st := measuredTick(0.2, 20)
			if growing {
				st.Response.Requests = 60
				st.Response.Inflight = 10 + 20*float64(i)
			}
			d := c.Step(snap(float64(i)*0.5), map[olc.PortKey]PortStats{key: st})
			shed = shed || d.Ports[0].DropProbability > 0
		}
		if shed != growing {
			t.Errorf("queue growing %v: shed %v", growing, shed)
		}
	}
}

// TestQueueLawReconfigure: a reload keeps each staying port's loop (its
// pass rate and baseline) and applies new parameters and targets from the
// next tick; a port whose target is switched off leaves the law at once.
func TestQueueLawReconfigure(t *testing.T) {
	cfg := cfgWith()
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: ResponseTarget{Auto: true}}}
	c := mustNew(t, cfg)
	at := 0.0
	step := func(p95 float64) Decision {
		at += 0.5
		return c.Step(snap(at), map[olc.PortKey]PortStats{key: measuredTick(p95, 100)})
	}
	for range 10 {
		step(0.01)
	}
	var d Decision
	for range 6 {
		d = step(0.2)
	}
	p, base := d.Ports[0].DropProbability, d.Ports[0].Baseline
	if p == 0 || base < 0.0099 || base > 0.0101 {
		t.Fatalf("before the reload: p %v baseline %v", p, base)
	}
	next := cfg
	next.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: ResponseTarget{Seconds: 0.5}}}
	next.Params.LatencyKi = 0.1
	if err := c.Reconfigure(next); err != nil {
		t.Fatal(err)
	}
	d = step(0.2)
	if d.Ports[0].ResponseTarget != 0.5 || d.Ports[0].Baseline != base || d.Ports[0].DropProbability > p {
		t.Errorf("after the reload to 500ms: target %v baseline %v p %v (was %v)", d.Ports[0].ResponseTarget, d.Ports[0].Baseline, d.Ports[0].DropProbability, p)
	}
	next.Ports[0].Target = ResponseTarget{}
	if err := c.Reconfigure(next); err != nil {
		t.Fatal(err)
	}
	if d = step(0.2); d.Ports[0].DropProbability != 0 || d.Ports[0].QueueP != 0 {
		t.Errorf("target off: p %v queue p %v, want 0", d.Ports[0].DropProbability, d.Ports[0].QueueP)
	}
}

// TestQueueLawUnmeasured: a loop that cut its port so far that too few
// responses are timed (seen on the halved node of TestOverloadLB: 3
// samples a tick for 22 s at pass rate 0.1) must not hold for good. It
// probes upwards after the cooldown while the requests in flight fit the
// measured capacity, and holds while they pile up (a server that stopped
// answering) or a resource guard is over.
func TestQueueLawUnmeasured(t *testing.T) {
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	few := func(inflight float64) PortStats {
		return PortStats{New: 10, Dropped: 9, Response: PortResponse{Samples: 3, Requests: 3, Responses: 3, Inflight: inflight}}
	}
	for _, tc := range []struct {
		name     string
		cpu      float64 // cpu_busy, threshold 0.9
		inflight float64
		recovers bool
	}{
		{"few samples, queue empty: probes up", 0.1, 1, true},
		{"few samples, requests piling up: holds", 0.1, 500, false},
		{"few samples, resource guard over: holds", 0.99, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cfgWith(sig{olc.CPUBusy, 0.9})
			cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: ResponseTarget{Seconds: 0.05}}}
			c := mustNew(t, cfg)
			at := 0.0
			step := func(cpu float64, st PortStats) Decision {
				at += 0.5
				s := snap(at)
				s.Set(olc.CPUBusy, cpu)
				return c.Step(s, map[olc.PortKey]PortStats{key: st})
			}
			var d Decision
			for range 6 { // 20 × the target, 100 answered a tick: cut hard
				d = step(0.1, measuredTick(1, 100))
			}
			p0 := d.Ports[0].DropProbability
			if p0 < 0.5 {
				t.Fatalf("after the overload: p %v, want a hard cut", p0)
			}
			for range 60 { // 30 s
				d = step(tc.cpu, few(tc.inflight))
			}
			p := d.Ports[0].DropProbability
			if tc.recovers && p > 0 {
				t.Errorf("p %v after 30 s without enough samples and nothing queued, want 0 (%s)", p, d.Reason)
			}
			if !tc.recovers && p < p0-1e-9 {
				t.Errorf("p %v after 30 s, want held at %v (%s)", p, p0, d.Reason)
			}
		})
	}
}

// TestQueueLawThrottleGap: a service at its CFS quota answers in bursts,
// every request that arrives while the cgroup is throttled waiting out the
// gap. With an auto target of 3 × a 6 ms baseline (18 ms), a p95 of 70 ms
// that the 75 ms throttle gap explains is no queue: the law holds; read
// without the gap it sheds (the capacity-halved finding, docs/measurements.md §5);
// a queue beyond the gap is shed. The widening stops at the initial target
// (100 ms), and a fixed target (the user's latency) is not widened.
func TestQueueLawThrottleGap(t *testing.T) {
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	auto := ResponseTarget{Auto: true}
	tests := []struct {
		name     string
		tgt      ResponseTarget
		p95, gap float64 // seconds
		wantShed bool
	}{
		{"the gap explains the p95", auto, 0.070, 0.075, false},
		{"the same p95 without a gap is a queue", auto, 0.070, 0, true},
		{"a queue beyond the gap", auto, 0.200, 0.075, true},
		{"a short gap does not hide a queue", auto, 0.070, 0.004, true},
		{"widened up to the initial target only", auto, 0.110, 0.200, true},
		{"a fixed target is not widened", ResponseTarget{Seconds: 0.020}, 0.070, 0.075, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cfgWith()
			cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: tc.tgt}}
			c := mustNew(t, cfg)
			at := 0.0
			step := func(st PortStats, gap float64) Decision {
				at += 0.5
				s := snap(at)
				s.CgroupThrottleGap = gap
				return c.Step(s, map[olc.PortKey]PortStats{key: st})
			}
			for range 20 {
				step(measuredTick(0.006, 100), 0)
			}
			var d Decision
			shed := false
			for range 20 {
				d = step(measuredTick(tc.p95, 100), tc.gap)
				shed = shed || d.Ports[0].DropProbability > 0
			}
			if shed != tc.wantShed {
				t.Errorf("p95 %v s with a %v s throttle gap against the %v s target: shed %v, want %v; %s",
					tc.p95, tc.gap, d.Ports[0].ResponseTarget, shed, tc.wantShed, d.Reason)
			}
		})
	}
}

// TestBaselineNotFromThrottledTicks: a tick whose p95 holds the throttle
// gap (the cgroup at its quota) does not teach the baseline, not even the
// first one; an unthrottled tick does, and a short gap beside a longer p95
// does not stop it.
func TestBaselineNotFromThrottledTicks(t *testing.T) {
	cfg := cfgWith()
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: ResponseTarget{Auto: true}}}
	c := mustNew(t, cfg)
	at := 0.0
	step := func(p95, gap float64) Decision {
		at += 0.5
		s := snap(at)
		s.CgroupThrottleGap = gap
		return c.Step(s, map[olc.PortKey]PortStats{key: measuredTick(p95, 40)})
	}
	for range 10 {
		if d := step(0.060, 0.050); d.Ports[0].Baseline != 0 {
			t.Fatalf("baseline %v learnt from a tick at the quota (p95 60 ms, gap 50 ms)", d.Ports[0].Baseline)
		}
	}
	var d Decision
	for range 10 {
		d = step(0.008, 0.001)
	}
	if b := d.Ports[0].Baseline; b < 0.0079 || b > 0.0081 {
		t.Errorf("baseline %v after quiet ticks at 8 ms with a 1 ms gap, want 8 ms", b)
	}
}
