package adaptive

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// queueRig is a controller with one port at a fixed 20 ms target (500 ms
// ticks, the onset check every 50 ms), fed onset windows of its measured
// queue.
type queueRig struct {
	t    *testing.T
	c    *Controller
	port olc.PortKey
	at   float64 // the last window's end, seconds
}

func newQueueRig(t *testing.T, target ResponseTarget) *queueRig {
	t.Helper()
	port := olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}
	cfg := Config{Interval: 500 * time.Millisecond, Params: DefaultParams(),
		Ports: []PortConfig{{Key: port, Class: olc.ClassNormal, Target: target}}}
	cfg.Params.MinPassRate = 0.05
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &queueRig{t: t, c: c, port: port, at: 1}
}

// window feeds one 50 ms window: requests arrived, responses answered,
// inflight at its end.
func (r *queueRig) window(req, resp, inflight float64) (Decision, bool) {
	r.at += 0.05
	return r.c.Onset(TraceOrigin.Add(seconds(r.at)), 50*time.Millisecond, map[olc.PortKey]PortStats{r.port: {
		New: uint64(req), Response: PortResponse{Requests: req, Responses: resp, Inflight: inflight}}})
}

// steady feeds n windows of a service answering 1000/s at the arrival
// rate, 3 requests in flight.
func (r *queueRig) steady(n int) {
	for range n {
		if _, ok := r.window(50, 50, 3); ok {
			r.t.Fatal("the onset check cut a steady queue")
		}
	}
}

// cutStep feeds a steady second, then a 3 × step (three windows at 3 ×
// the answers, the queue growing by 100 a window) that the onset check
// must cut, and returns the cut's pass rate.
func (r *queueRig) cutStep() float64 {
	r.t.Helper()
	r.steady(10)
	r.window(150, 50, 103)
	r.window(150, 50, 203)
	d, ok := r.window(150, 50, 303)
	if !ok {
		r.t.Fatal("no cut")
	}
	return 1 - d.Ports[0].DropProbability
}

func TestQueueOnset(t *testing.T) {
	fixed := ResponseTarget{Seconds: 0.02}
	type win struct{ req, resp, inflight float64 }
	cases := []struct {
		name   string
		target ResponseTarget
		wins   []win
		// wantAt is the window (index into wins) that cuts, -1 for none;
		// wantPass the pass rate after it.
		wantAt   int
		wantPass float64
	}{
		{
			// 3 × the 1000/s answered: the queue grows by 100 a window.
			// Cut at the third window at 3 × the answers: served 1000/s
			// (the newest three windows busy), 20 keep the target,
			// excess 283: admit (1000 − 283 ÷ 0.5) ÷ 3000 of the pass rate.
			name: "3 × step", target: fixed, wins: []win{{150, 50, 103}, {150, 50, 203}, {150, 50, 303}},
			wantAt: 2, wantPass: (1000 - 283/0.5) / 3000,
		},
		{
			// 1.5 C with a fixed target: left to the tick (outrun).
			name: "1.5 C, fixed target", target: fixed,
			wins: []win{{75, 50, 25}, {75, 50, 50}, {75, 50, 75}, {75, 50, 100}, {75, 50, 125}}, wantAt: -1,
		},
		{
			// the same with an auto target and no baseline yet (a service
			// that just started): 1.25 × the answers suffice; 100 keep the
			// initial target, the excess reaches half of it at 150 in
			// flight.
			name: "cold start, no baseline yet", target: ResponseTarget{Auto: true},
			wins:   []win{{75, 50, 25}, {75, 50, 50}, {75, 50, 75}, {75, 50, 100}, {75, 50, 125}, {75, 50, 150}},
			wantAt: 5, wantPass: (1000 - 50/0.5) / 1500,
		},
		{
			// 64 blocking clients fill the queue at 1.4–1.8 × the answers
			// up to their number, then wait.
			name: "closed pool fills", target: fixed,
			wins: []win{{90, 50, 43}, {70, 50, 63}, {51, 50, 64}, {50, 50, 64}}, wantAt: -1,
		},
		{
			// one window's burst, then the queue drains.
			name: "one window's burst", target: fixed,
			wins: []win{{200, 50, 153}, {40, 50, 143}, {40, 50, 133}}, wantAt: -1,
		},
		{
			// at twice the answers, but the queue is still what a burst
			// of any service holds.
			name: "surge, queue below queueOnsetMin", target: ResponseTarget{Seconds: 0.001},
			wins: []win{{6, 3, 4}, {6, 3, 7}, {6, 3, 10}}, wantAt: -1,
		},
		{
			name: "no target", target: ResponseTarget{},
			wins: []win{{150, 50, 103}, {150, 50, 203}, {150, 50, 303}}, wantAt: -1,
		},
		{
			// no baseline yet: the served rate over a whole 200 ms span
			// first (four windows busy from their start), then the
			// deepest cut, 90 %: 403 beyond the 100 that keep the initial
			// target.
			name: "auto target before a baseline", target: ResponseTarget{Auto: true},
			wins:   []win{{150, 50, 103}, {150, 50, 203}, {150, 50, 303}, {150, 50, 403}, {150, 50, 503}},
			wantAt: 4, wantPass: 1 - maxLatencyCut2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newQueueRig(t, tc.target)
			r.steady(10)
			cut := -1
			for i, w := range tc.wins {
				d, ok := r.window(w.req, w.resp, w.inflight)
				if !ok {
					continue
				}
				if cut < 0 {
					cut = i
				}
				if i == tc.wantAt {
					if p := 1 - d.Ports[0].DropProbability; math.Abs(p-tc.wantPass) > 1e-6 {
						t.Errorf("pass rate %.4f, want %.4f: %s", p, tc.wantPass, d.Reason)
					}
					if !d.Overloaded || len(d.Events) == 0 || d.Events[0].Kind != EventOverloadStart {
						t.Errorf("overloaded %v, events %+v", d.Overloaded, d.Events)
					}
					if !strings.Contains(d.Reason, "requests in flight where") {
						t.Errorf("reason %q", d.Reason)
					}
				}
			}
			if cut != tc.wantAt {
				t.Errorf("cut at window %d, want %d", cut, tc.wantAt)
			}
		})
	}
}

// After a cut between ticks, the tick sizes its first cut from the rate
// since the cut: a tick whose counts mix the step's arrivals before the
// cut with the fewer after it, and whose queue the cut already drains,
// holds the onset's pass rate rather than cutting again.
func TestQueueOnsetTickHolds(t *testing.T) {
	r := newQueueRig(t, ResponseTarget{Seconds: 0.02})
	pass := r.cutStep()
	// Six windows at the cut's pass rate: 3000 × pass ≈ 634/s arrive, the
	// queue drains by ~18 a window.
	infl := 303.0
	for range 6 {
		infl -= 50 - 3000*pass*0.05
		if _, ok := r.window(3000*pass*0.05, 50, infl); ok {
			t.Fatal("a cut queue that drains was cut again")
		}
	}
	r.at += 0.05
	st := PortStats{New: 500, Response: PortResponse{Available: true, P95: 0.15, Samples: 500,
		Requests: 50*10 + 450 + 6*3000*pass*0.05, Responses: 500, Inflight: infl}}
	d := r.c.Step(snap(r.at), map[olc.PortKey]PortStats{r.port: st})
	if got := 1 - d.Ports[0].DropProbability; got < pass-1e-9 {
		t.Errorf("the tick after the cut lowered the pass rate to %.3f from the onset's %.3f: %s", got, pass, d.Reason)
	}
	// The next tick's counts are the cut's own: its arrivals stand.
	if r.c.ports[0].onset.cut {
		t.Error("the mark of the cut outlived the tick")
	}
}

// A port is cut at most once a tick: the windows right after a cut still
// bring requests of connections admitted before it. In the next tick, a
// queue that still grows is cut again.
func TestQueueOnsetOncePerTick(t *testing.T) {
	r := newQueueRig(t, ResponseTarget{Seconds: 0.02})
	pass := r.cutStep()
	infl := 303.0
	for range 3 {
		infl += 3 * 3000 * pass * 0.05
		if _, ok := r.window(3*3000*pass*0.05+50, 50, infl); ok {
			t.Fatal("cut twice in one tick")
		}
	}
	r.at += 0.05
	r.c.Step(snap(r.at), map[olc.PortKey]PortStats{r.port: {New: 500, Response: PortResponse{Available: true, P95: 0.02,
		Samples: 500, Requests: 500, Responses: 500, Inflight: 3}}})
	d, ok := r.window(200, 50, infl+150)
	if !ok {
		t.Fatal("a queue still growing in the next tick was not cut")
	}
	if got := 1 - d.Ports[0].DropProbability; got >= pass {
		t.Errorf("second cut to %.3f, want below %.3f", got, pass)
	}
}

// Twenty checks a second: a window in which nothing acts allocates
// nothing.
func TestQueueOnsetNoAlloc(t *testing.T) {
	r := newQueueRig(t, ResponseTarget{Seconds: 0.02})
	r.steady(25)
	stats := map[olc.PortKey]PortStats{r.port: {New: 50, Response: PortResponse{Requests: 50, Responses: 50, Inflight: 3}}}
	allocs := testing.AllocsPerRun(200, func() {
		r.at += 0.05
		if _, ok := r.c.Onset(TraceOrigin.Add(seconds(r.at)), 50*time.Millisecond, stats); ok {
			t.Fatal("acted")
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per quiet check, want 0", allocs)
	}
}

// Classes keep their order between ticks: a critical port's surge is not
// cut while a best-effort one sheds with room to shed more; once the
// best-effort port is at its bound, it is.
func TestQueueOnsetClassOrder(t *testing.T) {
	for _, tc := range []struct {
		name         string
		beReq        float64 // the best-effort port's requests a window
		wantCritical bool
	}{
		{name: "best-effort cut with room", beReq: 150},
		{name: "best-effort cut to its bound", beReq: 3000, wantCritical: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crit := olc.PortKey{Proto: olc.ProtoTCP, Port: 443}
			be := olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}
			cfg := Config{Interval: 500 * time.Millisecond, Params: DefaultParams(), Ports: []PortConfig{
				{Key: crit, Class: olc.ClassCritical, Target: ResponseTarget{Seconds: 0.02}},
				{Key: be, Class: olc.ClassBestEffort, Target: ResponseTarget{Seconds: 0.02}}}}
			cfg.Params.MinPassRate = 0.1 // the onset's deepest cut, 90 %, reaches it
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			at := 1.0
			win := func(critReq, beReq, infl float64) Decision {
				at += 0.05
				d, _ := c.Onset(TraceOrigin.Add(seconds(at)), 50*time.Millisecond, map[olc.PortKey]PortStats{
					crit: {New: uint64(critReq), Response: PortResponse{Requests: critReq, Responses: 50, Inflight: infl}},
					be:   {New: uint64(beReq), Response: PortResponse{Requests: beReq, Responses: 50, Inflight: infl}}})
				return d
			}
			for range 10 {
				win(50, 50, 3)
			}
			var d Decision
			for i := range 3 {
				d = win(150, tc.beReq, 103+100*float64(i))
			}
			if len(d.Ports) != 2 || d.Ports[1].DropProbability == 0 {
				t.Fatalf("best-effort not cut: %+v", d.Ports)
			}
			if got := d.Ports[0].DropProbability > 0; got != tc.wantCritical {
				t.Errorf("critical cut %v (p %.3f), want %v; best-effort p %.3f: %s", got, d.Ports[0].DropProbability, tc.wantCritical, d.Ports[1].DropProbability, d.Reason)
			}
		})
	}
}
