package adaptive

import (
	"math"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/olc"
)

// TestNodeLaw: the resource law's activation, hysteresis, recovery and
// bound, on cpu_busy at threshold 0.8.
func TestNodeLaw(t *testing.T) {
	tests := []struct {
		name  string
		busy  []float64
		check func(t *testing.T, ds []Decision)
	}{
		{"one spike is noise", append(append(repeat(0.3, 4), 1), repeat(0.3, 4)...), func(t *testing.T, ds []Decision) {
			for _, d := range ds {
				if d.DropProbability != 0 || d.Overloaded {
					t.Fatalf("p %v overloaded %v at %v", d.DropProbability, d.Overloaded, d.At)
				}
			}
		}},
		{"acts at the second over tick", repeat(0.96, 3), func(t *testing.T, ds []Decision) {
			if ds[0].DropProbability != 0 || ds[1].DropProbability <= 0 {
				t.Fatalf("p %v, %v: want 0 then > 0", ds[0].DropProbability, ds[1].DropProbability)
			}
			// pressure 1.2: e = 1/6 of the work above the target; ki 0.5
			// and kp 0.1 on the first error take (0.5 + 0.1)/6 = 0.1.
			if got := ds[1].DropProbability; math.Abs(got-0.1) > 1e-9 {
				t.Errorf("first cut %v, want 0.1", got)
			}
		}},
		{"holds in the hysteresis band", append(repeat(0.96, 4), repeat(0.78, 6)...), func(t *testing.T, ds []Decision) {
			if ds[9].DropProbability != ds[4].DropProbability || ds[4].DropProbability == 0 {
				t.Errorf("p %v after the band, %v at its start: want held", ds[9].DropProbability, ds[4].DropProbability)
			}
			if !strings.Contains(ds[9].Reason, "holding") {
				t.Errorf("reason %q", ds[9].Reason)
			}
		}},
		{"recovers to 0 and ends the overload", append(repeat(1, 20), repeat(0.3, 10)...), func(t *testing.T, ds []Decision) {
			last := ds[len(ds)-1]
			if last.DropProbability != 0 || last.Overloaded {
				t.Errorf("p %v overloaded %v after 5 s at 30 %%", last.DropProbability, last.Overloaded)
			}
			var ended bool
			for _, ev := range last.Events {
				ended = ended || ev.Kind == EventOverloadEnd
			}
			for _, d := range ds {
				for _, ev := range d.Events {
					ended = ended || ev.Kind == EventOverloadEnd
				}
			}
			if !ended {
				t.Error("no overload_end")
			}
		}},
		{"never beyond the bound", repeat(1, 40), func(t *testing.T, ds []Decision) {
			for _, d := range ds {
				if d.DropProbability > DefaultParams().Bound()+1e-12 {
					t.Fatalf("p %v beyond the bound", d.DropProbability)
				}
			}
		}},
		{"an unavailable signal recovers", append(repeat(1, 10), repeat(math.NaN(), 12)...), func(t *testing.T, ds []Decision) {
			if p := ds[len(ds)-1].DropProbability; p != 0 {
				t.Errorf("p %v after 6 s without a signal", p)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, run(mustNew(t, cfgWith(sig{olc.CPUBusy, 0.8})), tc.busy...))
		})
	}
}

// TestClassOrder: the node's p is taken from best-effort first, then
// normal, critical last, by each class's measured demand; without demand
// every port counts alike.
func TestClassOrder(t *testing.T) {
	cfg := cfgWith(sig{olc.CPUBusy, 0.8})
	keys := []olc.PortKey{{Proto: olc.ProtoTCP, Port: 1}, {Proto: olc.ProtoTCP, Port: 2}, {Proto: olc.ProtoTCP, Port: 3}}
	cfg.Ports = []PortConfig{{Key: keys[0], Class: olc.ClassCritical}, {Key: keys[1], Class: olc.ClassNormal}, {Key: keys[2], Class: olc.ClassBestEffort}}
	for _, withDemand := range []bool{false, true} {
		c := mustNew(t, cfg)
		var d Decision
		for i := range 12 {
			var stats map[olc.PortKey]PortStats
			if withDemand {
				stats = map[olc.PortKey]PortStats{keys[0]: {New: 100}, keys[1]: {New: 100}, keys[2]: {New: 100}}
			}
			d = c.Step(snap(float64(i)*0.5, sig{olc.CPUBusy, 1}), stats)
		}
		cl := d.Classes
		if d.DropProbability == 0 || cl[olc.ClassBestEffort] < cl[olc.ClassNormal] || cl[olc.ClassNormal] < cl[olc.ClassCritical] {
			t.Errorf("demand %v: p %v classes %v", withDemand, d.DropProbability, cl)
		}
		if cl[olc.ClassNormal] > 0 && cl[olc.ClassBestEffort] < cfg.Params.Bound()-1e-9 {
			t.Errorf("demand %v: normal sheds before best-effort is at the bound: %v", withDemand, cl)
		}
	}
}

// TestReconfigureKeepsState: a reload keeps the node's p, the overload and
// the state of ports that stay; a new port starts idle; a bad config
// changes nothing.
func TestReconfigureKeepsState(t *testing.T) {
	cfg := cfgWith(sig{olc.CPUBusy, 0.8})
	cfg.Ports = []PortConfig{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, Class: olc.ClassNormal}}
	c := mustNew(t, cfg)
	ds := run(c, repeat(0.98, 10)...)
	p := c.Export().DropProbability
	next := cfg
	next.Ports = append([]PortConfig{{Key: olc.PortKey{Proto: olc.ProtoUDP, Port: 53}, Class: olc.ClassCritical}}, cfg.Ports...)
	if err := c.Reconfigure(next); err != nil {
		t.Fatal(err)
	}
	if c.Export().DropProbability != p || !ds[9].Overloaded {
		t.Errorf("p %v → %v across a reload", p, c.Export().DropProbability)
	}
	bad := next
	bad.Interval = 0
	if err := c.Reconfigure(bad); err == nil || c.Config().Interval != next.Interval {
		t.Errorf("bad config: err %v, interval %v", err, c.Config().Interval)
	}
}
