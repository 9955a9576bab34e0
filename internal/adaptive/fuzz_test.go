package adaptive

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/trace"
)

// fuzzBytes hands out the bytes of a fuzz input; past the end it returns 0,
// so every input decodes to some scenario.
type fuzzBytes struct {
	b []byte
	i int
}

func (f *fuzzBytes) next() byte {
	if f.i >= len(f.b) {
		return 0
	}
	v := f.b[f.i]
	f.i++
	return v
}

func (f *fuzzBytes) done() bool { return f.i >= len(f.b) }

// pick returns one of choices, selected by the next byte.
func pick[T any](f *fuzzBytes, choices ...T) T { return choices[int(f.next())%len(choices)] }

// fuzzSignals are the signals a fuzz scenario may configure and feed: one of
// each kind (fraction, tasks needing CPU corroboration, cgroup throttling
// needing cgroup corroboration with its confirmer, a rate, seconds).
var fuzzSignals = []olc.Signal{
	olc.CPUBusy, olc.Load1PerCore, olc.PSICPUSome, olc.CgroupThrottledRatio,
	olc.CgroupCPUUsageOfQuota, olc.CgroupThrottledS, olc.ListenOverflowsPerS, olc.AcceptQueueFill,
}

// fuzzParams decodes valid controller parameters, edges of every range
// included.
func fuzzParams(f *fuzzBytes) Params {
	return Params{
		Ki:                 pick(f, 0.5, 0.01, 1, 2),
		Kp:                 pick(f, 0.1, 0, 2),
		ActivationTicks:    pick(f, 2, 1, 10),
		Hysteresis:         pick(f, 0.05, 0, 0.5),
		MinPassRate:        pick(f, 0.1, 0, 1, 0.999),
		CorroborationRatio: pick(f, 0.5, 0.01, 1),
		CapacityWindow:     pick(f, 3*time.Second, time.Second, time.Minute),
		ContinueEvery:      pick(f, 10*time.Second, time.Second),
		RecordChange:       pick(f, 0.01, 1e-9, 1),
		OnsetInterval:      pick(f, 50*time.Millisecond, 0, 10*time.Millisecond, time.Second),
		TargetFactor:       pick(f, 3.0, 1.2, 20),
		InitialTarget:      pick(f, 100*time.Millisecond, time.Millisecond, 30*time.Second),
	}
}

// fuzzConfig decodes a valid controller config: parameters, thresholds
// (tiny and huge ones included) and 0, 1, 3, 16 or 1000 ports.
func fuzzConfig(f *fuzzBytes) Config {
	cfg := Config{Interval: pick(f, 500*time.Millisecond, minInterval, time.Hour), Params: fuzzParams(f)}
	for _, s := range fuzzSignals {
		cfg.Thresholds[s] = pick(f, 0, 0.8, 0.5, 1, 3, 1e-300, 1e300, math.SmallestNonzeroFloat64)
	}
	n := pick(f, 1, 0, 3, 16, 1000)
	first := uint16(f.next())
	for i := range n {
		cfg.Ports = append(cfg.Ports, PortConfig{
			Key:    olc.PortKey{Proto: pick(f, olc.ProtoTCP, olc.ProtoUDP), Port: uint16(i) + first + 1},
			Class:  olc.Class((int(f.next()) + i) % int(olc.NumClasses)),
			Target: pick(f, ResponseTarget{Auto: true}, ResponseTarget{}, ResponseTarget{Seconds: 0.05}, ResponseTarget{Seconds: 1e-9}),
		})
	}
	// Keys must be unique: the protocol byte may repeat a port.
	seen := map[olc.PortKey]bool{}
	out := cfg.Ports[:0]
	for _, pc := range cfg.Ports {
		if !seen[pc.Key] {
			seen[pc.Key] = true
			out = append(out, pc)
		}
	}
	cfg.Ports = out
	return cfg
}

// fuzzValue decodes a sample of sig relative to its threshold th: invalid
// numbers, values at the threshold ± one ulp, at the fraction limit 1.05,
// or scaled by the byte. ok is false for an unavailable signal.
func fuzzValue(f *fuzzBytes, th float64) (v float64, ok bool) {
	if th <= 0 {
		th = 0.8
	}
	b := f.next()
	switch b % 16 {
	case 0:
		return 0, false
	case 1:
		return math.NaN(), true
	case 2:
		return math.Inf(pick(f, 1, -1)), true
	case 3:
		return pick(f, -1.0, math.Copysign(0, -1), 0), true
	case 4:
		return math.Nextafter(th, math.Inf(1)), true
	case 5:
		return math.Nextafter(th, 0), true
	case 6:
		return th, true
	case 7:
		return pick(f, 1.05, math.Nextafter(1.05, 2), 0.97, 1), true
	case 8:
		return pick(f, math.MaxFloat64, 1e300, 1e-300), true
	}
	return th * float64(b) / 128, true
}

// fuzzStats decodes the port counts of one tick: missing ports, zero,
// retransmits equal to or above New, counts near 2^64.
func fuzzStats(f *fuzzBytes, ports []PortConfig) map[olc.PortKey]PortStats {
	mode := f.next()
	if mode%4 == 0 {
		return nil
	}
	stats := make(map[olc.PortKey]PortStats, len(ports))
	for i, pc := range ports {
		b := f.next()
		if len(ports) > 16 {
			// Keep the input short for many ports: one pattern byte per tick.
			b = mode + byte(i)
		}
		if b%5 == 0 {
			continue
		}
		n := pick(&fuzzBytes{b: []byte{b / 5}}, uint64(0), 1, 1000, math.MaxUint64, 1<<53+1)
		r := pick(&fuzzBytes{b: []byte{b / 25}}, uint64(0), n/2, n, n+1, math.MaxUint64)
		st := PortStats{New: n, Retransmits: r, Dropped: pick(&fuzzBytes{b: []byte{b / 7}}, uint64(0), n/3, n, n+1)}
		if rb := f.next(); rb%3 != 0 {
			st.Response = PortResponse{Available: rb%3 == 1, Samples: uint64(rb),
				P95:       pick(&fuzzBytes{b: []byte{rb / 3}}, 0.01, 0.2, 0, 5, math.NaN(), -1, math.Inf(1), 1e-300),
				Requests:  pick(&fuzzBytes{b: []byte{rb / 9}}, 100.0, 0, 1e9, math.NaN(), -5),
				Responses: pick(&fuzzBytes{b: []byte{rb / 27}}, 100.0, 0, 1e-9, math.Inf(1)),
				Inflight:  pick(&fuzzBytes{b: []byte{rb / 81}}, 3.0, 0, 1e6, -1)}
		}
		stats[pc.Key] = st
	}
	return stats
}

// fuzzChecker asserts the controller's invariants tick by tick.
type fuzzChecker struct {
	t          *testing.T
	cfg        Config
	prevP      float64
	overloaded bool
	ticks      int
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// check asserts one decision's invariants: p and every class and port p in
// [0, bound], finite; class order (a class sheds only when every less
// protected class is at the bound); steps within MaxStep and RecoveryStep;
// p > 0 only during an overload; events well formed (start outside an
// overload, continue and end inside one, end leaves it).
func (k *fuzzChecker) check(d Decision, c *Controller) { k.checkDecision(d, c, false) }

// checkOnset asserts an onset decision's invariants: those of a tick but
// the step limits (the onset cuts to what fits and drains beyond them).
func (k *fuzzChecker) checkOnset(d Decision, c *Controller) { k.checkDecision(d, c, true) }

func (k *fuzzChecker) checkDecision(d Decision, c *Controller, onset bool) {
	t := k.t
	t.Helper()
	k.ticks++
	prm := k.cfg.Params
	bound := prm.Bound()
	const eps = 1e-9
	where := fmt.Sprintf("tick %d (%s)", k.ticks, d.Reason)
	p := d.DropProbability
	if !finite(p) || p < 0 || p > bound+eps {
		t.Fatalf("%s: p %v outside [0, %v]", where, p, bound)
	}
	if p != c.Export().DropProbability {
		t.Fatalf("%s: decision p %v, controller p %v", where, p, c.Export().DropProbability)
	}
	if !finite(d.Pressure) || d.Pressure < 0 {
		t.Fatalf("%s: pressure %v", where, d.Pressure)
	}
	// The resource law moves the node's p by at most ki × the floored
	// error and kp × its change a tick; between ticks it does not move.
	if step := prm.Ki*2 + prm.Kp*4; !onset && p > k.prevP+step*(1-k.prevP)+eps {
		t.Fatalf("%s: p %v → %v beyond the law's step", where, k.prevP, p)
	}
	if onset && math.Abs(p-k.prevP) > eps {
		t.Fatalf("%s: the node's p moved between ticks: %v → %v", where, k.prevP, p)
	}
	for cl, q := range d.Classes {
		if !finite(q) || q < 0 || q > bound+eps {
			t.Fatalf("%s: class %s p %v outside [0, %v]", where, olc.Class(cl), q, bound)
		}
	}
	if d.Classes[olc.ClassCritical] > 0 && (d.Classes[olc.ClassNormal] < bound-eps || d.Classes[olc.ClassBestEffort] < bound-eps) {
		t.Fatalf("%s: critical shed while others are below the bound: %s", where, classSummary(d.Classes))
	}
	if d.Classes[olc.ClassNormal] > 0 && d.Classes[olc.ClassBestEffort] < bound-eps {
		t.Fatalf("%s: normal shed while best-effort is below the bound: %s", where, classSummary(d.Classes))
	}
	if len(d.Ports) != len(k.cfg.Ports) {
		t.Fatalf("%s: %d port decisions for %d ports", where, len(d.Ports), len(k.cfg.Ports))
	}
	for i, pd := range d.Ports {
		// Under retransmits last the p applies to retransmits alone, every
		// first attempt passing: the bound holds for new work, not for it.
		last := pd.Retransmits == olc.RetransmitsLast
		qb := bound
		if last {
			qb = 1
		}
		if !finite(pd.QueueP) || pd.QueueP < 0 || pd.QueueP > qb+eps || !finite(pd.ResponseTarget) || pd.ResponseTarget < 0 {
			t.Fatalf("%s: port %d queue law %+v", where, i, pd)
		}
		want := math.Min(bound, math.Max(d.Classes[pd.Class], pd.QueueP))
		if last {
			want = pd.QueueP
			if d.Classes[pd.Class] > 0 {
				t.Fatalf("%s: port %d retransmits last while its class sheds %v", where, i, d.Classes[pd.Class])
			}
		}
		if pd.Key != k.cfg.Ports[i].Key || pd.DropProbability != want || !finite(pd.Demand) || pd.Demand < 0 {
			t.Fatalf("%s: port %d decision %+v (classes %s)", where, i, pd, classSummary(d.Classes))
		}
	}
	for _, ev := range d.Events {
		if !ev.At.Equal(d.At) {
			t.Fatalf("%s: event %s at %v, decision at %v", where, ev.Kind, ev.At, d.At)
		}
		switch ev.Kind {
		case EventOverloadStart:
			if k.overloaded {
				t.Fatalf("%s: overload_start during an overload", where)
			}
			k.overloaded = true
		case EventOverloadContinue:
			if !k.overloaded {
				t.Fatalf("%s: overload_continue outside an overload", where)
			}
		case EventOverloadEnd:
			if !k.overloaded {
				t.Fatalf("%s: overload_end without overload_start", where)
			}
			k.overloaded = false
		case EventProbabilityChange:
			if !finite(ev.From) || !finite(ev.To) || ev.From == ev.To {
				t.Fatalf("%s: probability_change %v → %v", where, ev.From, ev.To)
			}
		default:
			t.Fatalf("%s: unknown event kind %d", where, ev.Kind)
		}
		if ev.Kind != EventProbabilityChange && ev.OverloadSince.IsZero() {
			t.Fatalf("%s: %s without the overload's start time", where, ev.Kind)
		}
	}
	if d.Overloaded != k.overloaded {
		t.Fatalf("%s: Overloaded %v, events say %v", where, d.Overloaded, k.overloaded)
	}
	if p > 0 && !d.Overloaded {
		t.Fatalf("%s: p %v outside an overload", where, p)
	}
	k.prevP = p
}

// classSummary renders class probabilities for a failure message.
func classSummary(classes [olc.NumClasses]float64) string {
	var b strings.Builder
	for cl := olc.Class(0); cl < olc.NumClasses; cl++ {
		fmt.Fprintf(&b, "%s=%.3f ", cl, classes[cl])
	}
	return b.String()
}

// fuzzRun decodes data into a config and a snapshot sequence (with
// reconfigurations), drives a controller with it while checking the
// invariants, then lets every signal vanish and checks that p returns to 0
// and the overload ends. It returns the decisions.
func fuzzRun(t *testing.T, data []byte) []Decision {
	f := &fuzzBytes{b: data}
	cfg := fuzzConfig(f)
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	k := &fuzzChecker{t: t, cfg: cfg}
	var out []Decision
	at := trace.Origin
	step := func(s olc.Snapshot, stats map[olc.PortKey]PortStats) {
		d := c.Step(s, stats)
		k.check(d, c)
		out = append(out, d)
	}
	maxTicks := 2000
	if len(cfg.Ports) > 16 {
		maxTicks = 100 // a tick with 1000 ports is slow; the pattern repeats
	}
	for tick := 0; !f.done() && tick < maxTicks; tick++ {
		code := f.next()
		var s olc.Snapshot
		switch code % 8 {
		case 0: // time stands still
		case 1:
			at = at.Add(-cfg.Interval)
		case 2:
			at = at.Add(time.Nanosecond)
		case 3:
			at = at.Add(time.Hour)
		default:
			at = at.Add(cfg.Interval * time.Duration(code%8-3))
		}
		s.At = at
		s.Interval = pick(f, cfg.Interval, 0, -time.Second, time.Nanosecond, time.Hour)
		for _, sig := range fuzzSignals {
			if v, ok := fuzzValue(f, cfg.Thresholds[sig]); ok {
				s.Set(sig, v)
			}
		}
		stats := fuzzStats(f, cfg.Ports)
		if code >= 0xf0 {
			// Reconfigure mid-run: new thresholds, parameters and ports.
			next := fuzzConfig(f)
			if err := c.Reconfigure(next); err != nil {
				t.Fatalf("valid config rejected: %v", err)
			}
			cfg = next
			k.cfg = next
			k.prevP = math.Min(k.prevP, next.Params.Bound())
		}
		step(s, stats)
		// The daemon's onset check between ticks, now and then.
		if pick(f, false, true) {
			window := pick(f, 100*time.Millisecond, 0, -time.Second, time.Nanosecond, time.Hour)
			if d, ok := c.Onset(at.Add(cfg.Interval/3), window, fuzzStats(f, cfg.Ports)); ok {
				k.checkOnset(d, c)
				out = append(out, d)
			}
		}
	}

	// Every signal and count vanishes: p must reach 0 and the overload end
	// within a capacity window (the ports) and the resource law's
	// recovery (from 1 % by × 1 + ki a tick at least).
	prm := cfg.Params
	limit := int(math.Ceil(prm.CapacityWindow.Seconds()/cfg.Interval.Seconds())) + int(math.Ceil(math.Log(100)/math.Log(1+prm.Ki))) + 2
	for i := 0; i <= limit; i++ {
		at = at.Add(cfg.Interval)
		step(olc.Snapshot{At: at, Interval: cfg.Interval}, nil)
	}
	if c.Export().DropProbability != 0 || k.overloaded {
		t.Fatalf("signals vanished for %d ticks: p %v, overloaded %v", limit+1, c.Export().DropProbability, k.overloaded)
	}
	return out
}

// fuzzSeeds are hand-made scenarios: a sawtooth at the threshold, signals
// flapping between available and unavailable, time going backwards, a
// reconfiguration during an overload, a retransmit storm on many ports.
var fuzzSeeds = [][]byte{
	{},
	{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 4, 0, 4, 0, 5, 0, 4, 0, 4, 0, 5, 0},
	{0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 2, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 120, 0, 1, 0, 0, 0, 0, 0, 0, 0, 4, 0, 250},
	{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 4, 0, 200, 1, 4, 0, 200, 2, 1, 0, 200, 3, 0, 0, 200, 4, 0xf4, 0, 250, 1, 1},
	{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 0, 255, 0, 0, 0, 0, 0, 0, 0, 255, 7, 4, 0, 255, 0, 0, 0, 0, 0, 0, 0, 255, 9},
}

// FuzzControllerInvariants drives the controller with decoded snapshot
// sequences and asserts its invariants every tick (see fuzzChecker.check),
// recovery once the signals vanish, and determinism: the same input gives
// the same decisions.
func FuzzControllerInvariants(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a := fuzzRun(t, data)
		b := fuzzRun(t, data)
		if len(a) != len(b) {
			t.Fatalf("same input, %d and %d decisions", len(a), len(b))
		}
		for i := range a {
			if !sameDecision(a[i], b[i]) {
				t.Fatalf("same input, decision %d differs:\n%+v\n%+v", i, a[i], b[i])
			}
		}
	})
}

// sameFloat compares bit patterns, so that NaN equals NaN.
func sameFloat(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// sameDecision reports whether two decisions are identical (NaN values of
// invalid samples included).
func sameDecision(a, b Decision) bool {
	if !a.At.Equal(b.At) || !sameFloat(a.Pressure, b.Pressure) ||
		a.PressureAvailable != b.PressureAvailable || a.Driver != b.Driver || a.Overloaded != b.Overloaded ||
		!a.OverloadSince.Equal(b.OverloadSince) || !sameFloat(a.DropProbability, b.DropProbability) ||
		a.Classes != b.Classes || a.Reason != b.Reason ||
		len(a.Signals) != len(b.Signals) || len(a.Ports) != len(b.Ports) || len(a.Events) != len(b.Events) {
		return false
	}
	for i := range a.Signals {
		x, y := a.Signals[i], b.Signals[i]
		if !sameFloat(x.Value, y.Value) || !sameFloat(x.Pressure, y.Pressure) {
			return false
		}
		x.Value, y.Value, x.Pressure, y.Pressure = 0, 0, 0, 0
		if x != y {
			return false
		}
	}
	for i := range a.Ports {
		if a.Ports[i] != b.Ports[i] {
			return false
		}
	}
	for i := range a.Events {
		x, y := a.Events[i], b.Events[i]
		if x.Kind != y.Kind || !x.At.Equal(y.At) || x.Reason != y.Reason || x.Port != y.Port || x.Class != y.Class ||
			!sameFloat(x.From, y.From) || !sameFloat(x.To, y.To) || !sameFloat(x.DropProbability, y.DropProbability) {
			return false
		}
	}
	return true
}
