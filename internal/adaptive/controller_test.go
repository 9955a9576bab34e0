package adaptive

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// sig is a signal value for snap.
type sig struct {
	s olc.Signal
	v float64
}

// snap returns a snapshot at TraceOrigin + t seconds with the given values
// and a 500 ms interval.
func snap(t float64, vals ...sig) olc.Snapshot {
	s := olc.Snapshot{At: TraceOrigin.Add(seconds(t)), Interval: 500 * time.Millisecond}
	for _, v := range vals {
		s.Set(v.s, v.v)
	}
	return s
}

// cfgWith returns a controller config with default params and the given
// thresholds.
func cfgWith(th ...sig) Config {
	cfg := Config{Interval: 500 * time.Millisecond, Params: DefaultParams()}
	for _, x := range th {
		cfg.Thresholds[x.s] = x.v
	}
	return cfg
}

// onePort returns the step of a controller of cfg protecting key alone
// with target tgt: one 0.5 s tick of st, its snapshot edited by edit when
// given (a signal, the throttle gap).
func onePort(t *testing.T, cfg Config, key olc.PortKey, tgt ResponseTarget) func(st PortStats, edit ...func(*olc.Snapshot)) Decision {
	t.Helper()
	cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: tgt}}
	c := mustNew(t, cfg)
	at := 0.0
	return func(st PortStats, edit ...func(*olc.Snapshot)) Decision {
		at += 0.5
		s := snap(at)
		for _, e := range edit {
			e(&s)
		}
		return c.Step(s, map[olc.PortKey]PortStats{key: st})
	}
}

func mustNew(t *testing.T, cfg Config) *Controller {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func stateOf(d Decision, s olc.Signal) SignalState {
	for _, st := range d.Signals {
		if st.Signal == s {
			return st
		}
	}
	return SignalState{}
}

func TestSignalEvaluation(t *testing.T) {
	cfg := cfgWith(sig{olc.CPUBusy, 0.8}, sig{olc.Load1PerCore, 2}, sig{olc.PSIIOSome, 0.5},
		sig{olc.CgroupThrottledRatio, 0.25}, sig{olc.ListenOverflowsPerS, 10})
	tests := []struct {
		name         string
		vals         []sig
		check        olc.Signal
		available    bool
		corroborated bool
		pressure     float64 // node pressure
		nodeOK       bool
	}{
		{"plain fraction", []sig{{olc.CPUBusy, 0.4}}, olc.CPUBusy, true, true, 0.5, true},
		{"NaN ignored", []sig{{olc.CPUBusy, math.NaN()}}, olc.CPUBusy, false, false, 0, false},
		{"+Inf ignored", []sig{{olc.CPUBusy, math.Inf(1)}}, olc.CPUBusy, false, false, 0, false},
		{"negative ignored", []sig{{olc.CPUBusy, -0.5}}, olc.CPUBusy, false, false, 0, false},
		{"fraction above 1.05 ignored", []sig{{olc.CPUBusy, 1.06}}, olc.CPUBusy, false, false, 0, false},
		{"fraction jitter 1.04 kept", []sig{{olc.CPUBusy, 1.04}}, olc.CPUBusy, true, true, 1.3, true},
		{"rate above 1 is valid", []sig{{olc.ListenOverflowsPerS, 30}}, olc.ListenOverflowsPerS, true, true, 3, true},
		{"load without cpu: not counted", []sig{{olc.Load1PerCore, 8}, {olc.CPUBusy, 0.1}}, olc.Load1PerCore, true, false, 0.125, true},
		{"load without any cpu signal: not counted", []sig{{olc.Load1PerCore, 8}}, olc.Load1PerCore, true, false, 0, false},
		{"load with cpu at half threshold", []sig{{olc.Load1PerCore, 8}, {olc.CPUBusy, 0.4}}, olc.Load1PerCore, true, true, 4, true},
		{"load confirmed by psi cpu (default reference 0.2)", []sig{{olc.Load1PerCore, 8}, {olc.PSICPUSome, 0.1}}, olc.Load1PerCore, true, true, 4, true},
		{"load, psi cpu below half reference", []sig{{olc.Load1PerCore, 8}, {olc.PSICPUSome, 0.09}}, olc.Load1PerCore, true, false, 0, false},
		{"load, invalid confirmer ignored", []sig{{olc.Load1PerCore, 8}, {olc.CPUBusy, math.NaN()}}, olc.Load1PerCore, true, false, 0, false},
		{"throttling without usage: not counted", []sig{{olc.CgroupThrottledRatio, 0.9}, {olc.CgroupCPUUsageOfQuota, 0.2}}, olc.CgroupThrottledRatio, true, false, 0, false},
		{"throttling with usage (default reference 0.9)", []sig{{olc.CgroupThrottledRatio, 0.5}, {olc.CgroupCPUUsageOfQuota, 0.45}}, olc.CgroupThrottledRatio, true, true, 2, true},
		{"throttling with cgroup psi", []sig{{olc.CgroupThrottledRatio, 0.5}, {olc.CgroupPSICPUSomeAvg10, 0.15}}, olc.CgroupThrottledRatio, true, true, 2, true},
		{"throttling, node psi does not confirm", []sig{{olc.CgroupThrottledRatio, 0.5}, {olc.PSICPUSome, 0.9}}, olc.CgroupThrottledRatio, true, false, 0, false},
		{"largest corroborated wins", []sig{{olc.CPUBusy, 0.4}, {olc.PSIIOSome, 0.6}}, olc.PSIIOSome, true, true, 1.2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, cfg)
			d := c.Step(snap(0, tt.vals...), nil)
			st := stateOf(d, tt.check)
			if st.Available != tt.available || st.Corroborated != tt.corroborated {
				t.Errorf("%s: available %v corroborated %v, want %v %v", tt.check, st.Available, st.Corroborated, tt.available, tt.corroborated)
			}
			if d.PressureAvailable != tt.nodeOK || math.Abs(d.Pressure-tt.pressure) > 1e-9 {
				t.Errorf("node pressure %v (available %v), want %v (%v)", d.Pressure, d.PressureAvailable, tt.pressure, tt.nodeOK)
			}
		})
	}
}

// TestPressureOverflow: a finite value so large that value ÷ threshold is
// +Inf is an invalid sample; counted, it made the smoothed pressure NaN and
// froze p.
func TestPressureOverflow(t *testing.T) {
	c := mustNew(t, cfgWith(sig{olc.ListenOverflowsPerS, 0.5}))
	d := c.Step(snap(0, sig{olc.ListenOverflowsPerS, math.MaxFloat64}), nil)
	if st := stateOf(d, olc.ListenOverflowsPerS); st.Available || !st.Invalid || d.PressureAvailable {
		t.Errorf("state %+v, node pressure %v (available %v): want an invalid sample", st, d.Pressure, d.PressureAvailable)
	}
}

// TestConfiguredConfirmerThreshold: a configured threshold replaces the
// default reference of a confirming signal.
func TestConfiguredConfirmerThreshold(t *testing.T) {
	c := mustNew(t, cfgWith(sig{olc.Load1, 4}, sig{olc.CPUBusy, 0.6}))
	d := c.Step(snap(0, sig{olc.Load1, 8}, sig{olc.CPUBusy, 0.31}), nil)
	if !stateOf(d, olc.Load1).Corroborated {
		t.Error("cpu_busy 0.31 ≥ 0.5 × 0.6 must corroborate load1")
	}
	d = c.Step(snap(0.5, sig{olc.Load1, 8}, sig{olc.CPUBusy, 0.29}), nil)
	if stateOf(d, olc.Load1).Corroborated {
		t.Error("cpu_busy 0.29 < 0.5 × 0.6 must not corroborate load1")
	}
}

// run feeds cpu_busy values (threshold 0.8) one per 500 ms tick and returns
// the decisions.
func run(t *testing.T, c *Controller, busy ...float64) []Decision {
	t.Helper()
	out := make([]Decision, len(busy))
	for i, b := range busy {
		var s olc.Snapshot
		if math.IsNaN(b) {
			s = snap(float64(i) * 0.5) // unavailable
		} else {
			s = snap(float64(i)*0.5, sig{olc.CPUBusy, b})
		}
		out[i] = c.Step(s, nil)
	}
	return out
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func concat(parts ...[]float64) []float64 {
	var out []float64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func kinds(ds []Decision) map[EventKind][]int {
	m := map[EventKind][]int{}
	for i, d := range ds {
		for _, e := range d.Events {
			m[e.Kind] = append(m[e.Kind], i)
		}
	}
	return m
}

func TestActivation(t *testing.T) {
	tests := []struct {
		name  string
		busy  []float64
		first int // first tick with p > 0; -1 = never
	}{
		{"single spike is noise", concat(repeat(0.3, 4), []float64{1}, repeat(0.3, 10)), -1},
		{"two separated spikes are noise", concat(repeat(0.3, 4), []float64{1, 0.3, 1}, repeat(0.3, 10)), -1},
		{"step acted on at its second tick", concat(repeat(0.3, 4), repeat(0.98, 10)), 5},
		{"spike then unavailable then spike", concat(repeat(0.3, 4), []float64{1, math.NaN(), 1}, repeat(0.3, 4)), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := run(t, mustNew(t, cfgWith(sig{olc.CPUBusy, 0.8})), tt.busy...)
			first := -1
			for i, d := range ds {
				if d.DropProbability > 0 {
					first = i
					break
				}
			}
			if first != tt.first {
				t.Errorf("first tick with p > 0: %d, want %d", first, tt.first)
			}
			if tt.first >= 0 {
				if k := kinds(ds); len(k[EventOverloadStart]) != 1 || k[EventOverloadStart][0] != tt.first {
					t.Errorf("overload_start at %v, want [%d]", k[EventOverloadStart], tt.first)
				}
			}
		})
	}
}

// TestBoundsAndSteps: p never exceeds 1 − min_pass_rate, never rises by
// more than MaxStep, and falls only after the cooldown, by at most
// RecoveryStep per tick.
func TestBoundsAndSteps(t *testing.T) {
	for _, mpr := range []float64{0, 0.05, 0.3, 0.9, 1} {
		cfg := cfgWith(sig{olc.CPUBusy, 0.5})
		cfg.Params.MinPassRate = mpr
		ds := run(t, mustNew(t, cfg), concat(repeat(1, 60), repeat(0.1, 60))...)
		bound := 1 - mpr
		lastOver := 59
		for i := 1; i < len(ds); i++ {
			p, prev := ds[i].DropProbability, ds[i-1].DropProbability
			if p > bound+1e-12 {
				t.Fatalf("min_pass_rate %v: p = %v above the bound at tick %d", mpr, p, i)
			}
			if p-prev > cfg.Params.MaxStep+1e-12 {
				t.Errorf("min_pass_rate %v: p rose by %v at tick %d", mpr, p-prev, i)
			}
			if p < prev {
				if i <= lastOver+cfg.Params.Cooldown {
					t.Errorf("min_pass_rate %v: p fell at tick %d, inside the cooldown", mpr, i)
				}
				if prev-p > cfg.Params.RecoveryStep+1e-12 {
					t.Errorf("min_pass_rate %v: p fell by %v at tick %d", mpr, prev-p, i)
				}
			}
		}
		if mpr < 1 && ds[59].DropProbability != bound {
			t.Errorf("min_pass_rate %v: p = %v after 30 s of pressure 2, want the bound %v", mpr, ds[59].DropProbability, bound)
		}
		if last := ds[len(ds)-1]; last.DropProbability != 0 || last.Overloaded {
			t.Errorf("min_pass_rate %v: p = %v overloaded %v at the end, want recovered", mpr, last.DropProbability, last.Overloaded)
		}
	}
}

// TestHysteresis: inside the band p holds; a tick over the target resets
// the cooldown.
func TestHysteresis(t *testing.T) {
	c := mustNew(t, cfgWith(sig{olc.CPUBusy, 0.8}))
	ds := run(t, c, concat(repeat(0.98, 10), repeat(0.78, 20))...)
	held := ds[12].DropProbability
	for i := 12; i < 30; i++ {
		if ds[i].DropProbability != held {
			t.Fatalf("tick %d: p = %v, want it held at %v with pressure 0.975 (inside the band)", i, ds[i].DropProbability, held)
		}
	}
	if held == 0 || !ds[29].Overloaded {
		t.Fatalf("p %v overloaded %v: want shedding to continue inside the band", held, ds[29].Overloaded)
	}
	// Healthy for 4 ticks, one over, then healthy: the fall starts only
	// after 5 consecutive healthy ticks counted from the last over tick.
	ds = run(t, mustNew(t, cfgWith(sig{olc.CPUBusy, 0.8})), concat(repeat(0.98, 10), repeat(0.2, 4), repeat(1, 2), repeat(0.2, 12))...)
	firstFall := -1
	for i := 1; i < len(ds); i++ {
		if ds[i].DropProbability < ds[i-1].DropProbability {
			firstFall = i
			break
		}
	}
	// The smoothed pressure of the two over ticks stays over 1 for 2 ticks
	// (0.2 → 1.25 averaged at 0.5), so the last over tick is 15; healthy
	// ticks 16..20 are the cooldown, 21 is the first that may fall.
	if firstFall < 21 {
		t.Errorf("p fell first at tick %d, want ≥ 21 (after the cooldown)", firstFall)
	}
}

// TestNoSignalDecays: when every signal disappears, p decays to 0 at
// RecoveryStep per tick after the cooldown and the overload ends.
func TestNoSignalDecays(t *testing.T) {
	for _, name := range []string{"unavailable", "invalid", "stale"} {
		t.Run(name, func(t *testing.T) {
			c := mustNew(t, cfgWith(sig{olc.CPUBusy, 0.8}))
			ds := run(t, c, repeat(0.98, 40)...)
			p0 := ds[39].DropProbability
			var last Decision
			for i := 0; i < 40; i++ {
				var s olc.Snapshot
				switch name {
				case "unavailable":
					s = snap(20 + float64(i)*0.5)
				case "invalid":
					s = snap(20+float64(i)*0.5, sig{olc.CPUBusy, math.NaN()})
				case "stale":
					s = snap(19.5, sig{olc.CPUBusy, 0.98}) // the last tick's time again
				}
				last = c.Step(s, nil)
				want := math.Max(0, p0-float64(i+1-c.cfg.Params.Cooldown)*c.cfg.Params.RecoveryStep)
				if i < c.cfg.Params.Cooldown {
					want = p0
				}
				if math.Abs(last.DropProbability-want) > 1e-9 {
					t.Fatalf("tick %d without signal: p = %v, want %v", i, last.DropProbability, want)
				}
			}
			if last.DropProbability != 0 || last.Overloaded {
				t.Errorf("p = %v overloaded %v, want decayed to 0", last.DropProbability, last.Overloaded)
			}
		})
	}
}

// TestEvents checks the event sequence of a 25 s overload.
func TestEvents(t *testing.T) {
	cfg := cfgWith(sig{olc.CPUBusy, 0.8})
	cfg.Ports = []PortConfig{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, Class: olc.ClassNormal}}
	c := mustNew(t, cfg)
	var ds []Decision
	for i := 0; i < 120; i++ {
		b := 0.3
		if i >= 4 && i < 54 {
			b = 0.98
		}
		ds = append(ds, c.Step(snap(float64(i)*0.5, sig{olc.CPUBusy, b}), map[olc.PortKey]PortStats{{Proto: olc.ProtoTCP, Port: 80}: {New: 100}}))
	}
	k := kinds(ds)
	if got := k[EventOverloadStart]; len(got) != 1 || got[0] != 5 {
		t.Errorf("overload_start at ticks %v, want [5]", got)
	}
	// Continues every 10 s (20 ticks) after the start, while overloaded.
	if got := k[EventOverloadContinue]; len(got) < 2 || got[0] != 25 || got[1] != 45 {
		t.Errorf("overload_continue at ticks %v, want 25, 45, …", got)
	}
	end := k[EventOverloadEnd]
	if len(end) != 1 || ds[end[0]].DropProbability != 0 || ds[end[0]-1].DropProbability == 0 {
		t.Fatalf("overload_end at %v, want once, at the tick p reached 0", end)
	}
	for _, i := range k[EventOverloadContinue] {
		if i >= end[0] {
			t.Errorf("overload_continue at %d after the end at %d", i, end[0])
		}
	}
	var changes, recorded = 0, 0.0
	for i, d := range ds {
		for _, e := range d.Events {
			if e.Reason == "" || len(e.Signals) == 0 || !e.At.Equal(d.At) {
				t.Errorf("tick %d: %s event without reason, signals or time: %+v", i, e.Kind, e)
			}
			if e.Kind != EventProbabilityChange || e.Port.Port != 80 {
				continue
			}
			changes++
			if e.From != recorded || e.To != d.Ports[0].DropProbability {
				t.Errorf("tick %d: change %v → %v, want %v → %v", i, e.From, e.To, recorded, d.Ports[0].DropProbability)
			}
			recorded = e.To
		}
		if math.Abs(d.Ports[0].DropProbability-recorded) > cfg.Params.RecordChange+1e-12 {
			t.Errorf("tick %d: port p %v moved %v from the last record without an event", i, d.Ports[0].DropProbability, recorded)
		}
	}
	if changes < 3 || recorded != 0 {
		t.Errorf("%d probability_change records, last at %v: want several, the last at 0", changes, recorded)
	}
	if s := ds[end[0]].Events; !strings.Contains(s[len(s)-1].Reason+s[0].Reason, "back to 0") {
		t.Errorf("overload_end reason %q", s[0].Reason)
	}
}

func TestSplitClasses(t *testing.T) {
	const b = 0.7
	tests := []struct {
		name    string
		p       float64
		weights [olc.NumClasses]float64 // critical, normal, best-effort
		want    [olc.NumClasses]float64
	}{
		{"nothing to shed", 0, [olc.NumClasses]float64{1, 1, 1}, [olc.NumClasses]float64{}},
		{"best-effort absorbs", 0.2, [olc.NumClasses]float64{1, 1, 1}, [olc.NumClasses]float64{0, 0, 0.6}},
		{"then normal", 0.4, [olc.NumClasses]float64{1, 1, 1}, [olc.NumClasses]float64{0, 0.5, 0.7}},
		{"critical only when the others are at the bound", 0.6, [olc.NumClasses]float64{1, 1, 1}, [olc.NumClasses]float64{0.4, 0.7, 0.7}},
		{"all at the bound", 0.7, [olc.NumClasses]float64{1, 1, 1}, [olc.NumClasses]float64{0.7, 0.7, 0.7}},
		{"weighted by demand, empty normal untouched", 0.1, [olc.NumClasses]float64{800, 0, 200}, [olc.NumClasses]float64{0, 0, 0.5}},
		{"empty best-effort gets the bound", 0.1, [olc.NumClasses]float64{500, 500, 0}, [olc.NumClasses]float64{0, 0.2, 0.7}},
		{"only critical", 0.3, [olc.NumClasses]float64{1, 0, 0}, [olc.NumClasses]float64{0.3, 0.7, 0.7}},
		{"no weight at all", 0.3, [olc.NumClasses]float64{}, [olc.NumClasses]float64{}},
	}
	for _, tt := range tests {
		got := splitClasses(tt.p, b, tt.weights)
		for cl := range got {
			if math.Abs(got[cl]-tt.want[cl]) > 1e-9 {
				t.Errorf("%s: %s, want %s", tt.name, ClassSummary(got), ClassSummary(tt.want))
				break
			}
		}
	}
}

// TestDemandUsesUniqueConnections: retransmitted SYNs do not count as
// demand, so a best-effort port flooded with retries does not get more of
// the shedding than its unique demand warrants.
func TestDemandUsesUniqueConnections(t *testing.T) {
	cfg := cfgWith(sig{olc.CPUBusy, 0.8})
	cfg.Params.DemandSmoothing = 1
	be, norm := olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}, olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	cfg.Ports = []PortConfig{{Key: be, Class: olc.ClassBestEffort}, {Key: norm, Class: olc.ClassNormal}}
	c := mustNew(t, cfg)
	d := c.Step(snap(0, sig{olc.CPUBusy, 0.5}), map[olc.PortKey]PortStats{
		be:   {New: 500, Retransmits: 400}, // 100 unique
		norm: {New: 300, Retransmits: 0},   // 300 unique
	})
	if d.Ports[0].Demand != 200 || d.Ports[1].Demand != 600 {
		t.Errorf("demand %v/s and %v/s, want 200 and 600 (unique per second)", d.Ports[0].Demand, d.Ports[1].Demand)
	}
	if (PortStats{New: 3, Retransmits: 5}).Unique() != 0 {
		t.Error("Unique must not wrap when retransmits exceed new")
	}
}

// TestNoDemandMeasured: without counts every port is assumed to carry the
// same load, and the priority order still holds.
func TestNoDemandMeasured(t *testing.T) {
	cfg := cfgWith(sig{olc.CPUBusy, 0.8})
	cfg.Ports = []PortConfig{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 1}, Class: olc.ClassCritical}, {Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 2}, Class: olc.ClassNormal}, {Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 3}, Class: olc.ClassBestEffort}}
	ds := run(t, mustNew(t, cfg), repeat(0.98, 12)...)
	d := ds[len(ds)-1]
	if d.DropProbability == 0 {
		t.Fatal("no shedding")
	}
	want := splitClasses(d.DropProbability, cfg.Params.Bound(), [olc.NumClasses]float64{1, 1, 1})
	if d.Classes != want {
		t.Errorf("classes %s, want %s", ClassSummary(d.Classes), ClassSummary(want))
	}
	if d.Classes[olc.ClassBestEffort] < d.Classes[olc.ClassNormal] || d.Classes[olc.ClassNormal] < d.Classes[olc.ClassCritical] {
		t.Errorf("priority order broken: %s", ClassSummary(d.Classes))
	}
}

func TestReconfigure(t *testing.T) {
	cfg := cfgWith(sig{olc.CPUBusy, 0.8})
	cfg.Ports = []PortConfig{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, Class: olc.ClassNormal}}
	c := mustNew(t, cfg)
	ds := run(t, c, repeat(0.98, 20)...)
	p := ds[19].DropProbability
	since := ds[19].OverloadSince

	next := cfg
	next.Ports = append([]PortConfig{{Key: olc.PortKey{Proto: olc.ProtoUDP, Port: 53}, Class: olc.ClassCritical}}, cfg.Ports...)
	next.Thresholds[olc.PSICPUSome] = 0.3
	if err := c.Reconfigure(next); err != nil {
		t.Fatal(err)
	}
	if c.DropProbability() != p {
		t.Errorf("p %v after reconfigure, want kept %v", c.DropProbability(), p)
	}
	d := c.Step(snap(10, sig{olc.CPUBusy, 0.78}), nil)
	if !d.Overloaded || !d.OverloadSince.Equal(since) || len(d.Ports) != 2 || len(d.Signals) != 2 {
		t.Errorf("after reconfigure: overloaded %v since %v ports %d signals %d", d.Overloaded, d.OverloadSince, len(d.Ports), len(d.Signals))
	}

	// A lower bound clamps p at once.
	lower := next
	lower.Params.MinPassRate = 0.9
	if err := c.Reconfigure(lower); err != nil {
		t.Fatal(err)
	}
	if got := c.DropProbability(); math.Abs(got-0.1) > 1e-12 {
		t.Errorf("p %v after raising min_pass_rate to 0.9, want 0.1", got)
	}

	// An invalid config is rejected and changes nothing.
	bad := lower
	bad.Ports = append(bad.Ports, PortConfig{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, Class: olc.ClassBestEffort})
	if err := c.Reconfigure(bad); err == nil {
		t.Error("duplicate port accepted")
	}
	if len(c.Config().Ports) != 2 {
		t.Error("rejected config was applied")
	}
}

func TestNewRejects(t *testing.T) {
	good := cfgWith(sig{olc.CPUBusy, 0.8})
	tests := []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"interval", func(c *Config) { c.Interval = 0 }, "interval"},
		{"negative threshold", func(c *Config) { c.Thresholds[olc.Load1] = -1 }, "threshold of load1"},
		{"NaN threshold", func(c *Config) { c.Thresholds[olc.Load1] = math.NaN() }, "threshold of load1"},
		{"ki", func(c *Config) { c.Params.Ki = 0 }, "ki"},
		{"min_pass_rate", func(c *Config) { c.Params.MinPassRate = 1.5 }, "min_pass_rate"},
		{"cooldown", func(c *Config) { c.Params.Cooldown = -1 }, "cooldown_ticks"},
		{"port 0", func(c *Config) {
			c.Ports = []PortConfig{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 0}, Class: olc.ClassNormal}}
		}, "port 0"},
		{"proto", func(c *Config) {
			c.Ports = []PortConfig{{Key: olc.PortKey{Proto: 1, Port: 80}, Class: olc.ClassNormal}}
		}, "tcp or udp"},
		{"class", func(c *Config) {
			c.Ports = []PortConfig{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, Class: olc.NumClasses}}
		}, "class"},
		{"duplicate", func(c *Config) {
			c.Ports = []PortConfig{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, Class: olc.ClassNormal}, {Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, Class: olc.ClassCritical}}
		}, "listed twice"},
	}
	for _, tt := range tests {
		cfg := good
		cfg.Ports = nil
		tt.mut(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to mention %q", tt.name, err, tt.want)
		}
	}
	if err := DefaultParams().Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

// TestZeroPressureDuringOverload: a tick at pressure 0 (an idle PSI
// resource) inside an overload, right after a tick without signals, is
// followed by an over tick. The law's error must stay finite: with kp 0 the
// derivative term was 0 × Inf = NaN and p stayed NaN for good; with kp > 0
// it was +Inf and p jumped by max_step whatever the error.
func TestZeroPressureDuringOverload(t *testing.T) {
	for _, kp := range []float64{0, 0.1, 2} {
		t.Run(fmt.Sprintf("kp %g", kp), func(t *testing.T) {
			cfg := cfgWith(sig{olc.PSIMemoryFull, 0.1})
			cfg.Params.Kp = kp
			cfg.Params.MinPassRate = 0 // no bound to hide a jump
			c := mustNew(t, cfg)
			vals := []float64{0.3, 0.3, 0.3, math.NaN(), 0, 0.3, 0.3, 0.3, 0, 0, 0}
			prev := 0.0
			for i, v := range vals {
				s := snap(float64(i) * 0.5)
				if !math.IsNaN(v) {
					s.Set(olc.PSIMemoryFull, v)
				}
				d := c.Step(s, nil)
				p := d.DropProbability
				if math.IsNaN(p) || p < 0 || p > cfg.Params.Bound() || math.IsNaN(d.SmoothedPressure) {
					t.Fatalf("tick %d (value %v): p %v, smoothed pressure %v", i, v, p, d.SmoothedPressure)
				}
				if i == 5 && p-prev >= cfg.Params.MaxStep && kp < 1 {
					t.Errorf("tick 5: p %v → %v: the step after a zero-pressure tick hit max_step", prev, p)
				}
				prev = p
			}
			for i := len(vals); i < len(vals)+40; i++ {
				c.Step(snap(float64(i)*0.5), nil)
			}
			if c.DropProbability() != 0 {
				t.Errorf("p %v after the signal vanished, want 0", c.DropProbability())
			}
		})
	}
}
