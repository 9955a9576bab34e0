package adaptive

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// onsetRig is a saturationRig whose estimate is learnt (200 new/s per unit
// of cgroup_cpu_usage_of_quota: 191/s fit under 0.955), with the onset
// check fed 100 ms windows after the last tick.
type onsetRig struct {
	*saturationRig
	at float64 // the last window's end, seconds
}

func newOnsetRig(t *testing.T, edit func(*Params)) *onsetRig {
	r := &onsetRig{saturationRig: newSaturationRig(t, edit)}
	for range 6 {
		r.tick(0.5, 100, 0)
	}
	if !r.c.capOK {
		t.Fatal("no estimate learnt")
	}
	r.at = r.now
	return r
}

// window feeds one 100 ms onset window of newPerS new connections per
// second, of which the datapath dropped the share p in force.
func (r *onsetRig) window(newPerS float64) (Decision, bool) {
	r.at += 0.1
	n := newPerS * 0.1
	st := PortStats{New: uint64(math.Round(n)), Dropped: uint64(math.Round(n * r.c.DropProbability()))}
	return r.c.Onset(TraceOrigin.Add(seconds(r.at)), 100*time.Millisecond, map[olc.PortKey]PortStats{r.port: st})
}

// A surge of 600 new/s against the 191/s that fit starts the overload in
// its first window: p to the bound (0.95) while the 40 connections the
// window queued beyond what the service served (600 × 0.1 − 200 × 0.1) are
// served, then, window by window, down to what fits of 600/s: 1 − 191/600.
func TestOnsetCutsSurge(t *testing.T) {
	r := newOnsetRig(t, nil)
	d, ok := r.window(600)
	if !ok || !d.Overloaded || d.DropProbability != r.c.cfg.Params.Bound() {
		t.Fatalf("first window of the surge: acted %v, overloaded %v, p %.3f: %s", ok, d.Overloaded, d.DropProbability, d.Reason)
	}
	if len(d.Events) == 0 || d.Events[0].Kind != EventOverloadStart || !strings.HasPrefix(d.Events[0].Reason, "surge: 600 new/s, 3.1 × the 191/s") ||
		!strings.Contains(d.Reason, "draining a backlog of 40 connections") {
		t.Fatalf("events %+v, reason %q", d.Events, d.Reason)
	}
	if d.Ports[0].DropProbability != d.DropProbability {
		t.Errorf("port p %.3f, node p %.3f", d.Ports[0].DropProbability, d.DropProbability)
	}
	if len(d.Signals) == 0 {
		t.Error("an onset decision carries the last tick's signals for the log and the status")
	}
	pe := 1 - 200*0.955/600
	var last Decision
	for i := 0; i < 5; i++ {
		if d, ok := r.window(600); ok {
			last = d
		}
	}
	if math.Abs(last.DropProbability-pe) > 0.01 || !strings.Contains(last.Reason, "backlog served") || r.c.onset.active {
		t.Fatalf("after the drain: p %.3f (want what fits, %.3f), active %v: %s", last.DropProbability, pe, r.c.onset.active, last.Reason)
	}
	// Later windows belong to the law: the onset check no longer acts.
	if _, ok := r.window(600); ok {
		t.Error("the onset check acted inside an overload it had handed to the law")
	}
	// The first tick after the drain reads the cgroup pinned (it served
	// the surge's backlog) while admitting what fits: the estimate stands.
	r.now = r.at
	d = r.tick(1.0, 600, 600*pe)
	if strings.Contains(d.Reason, "forgotten") || !r.c.capOK {
		t.Errorf("first tick after the drain: %s", d.Reason)
	}
	if d.DropProbability < pe-1e-9 {
		t.Errorf("first tick after the drain lowered p to %.3f below what fits %.3f: %s", d.DropProbability, pe, d.Reason)
	}
}

// A tick inside the drain holds p; a drain that outlives one tick interval
// (the model is wrong: the backlog never shrinks) ends at the tick that
// follows, at what fits.
func TestOnsetTickHoldsAndEnds(t *testing.T) {
	r := newOnsetRig(t, nil)
	if _, ok := r.window(600); !ok {
		t.Fatal("surge not cut")
	}
	bound := r.c.cfg.Params.Bound()
	// A tick 0.1 s after the cut: the drain goes on.
	r.now = r.at + 0.1
	d := r.c.Step(snap(r.now, sig{olc.CgroupCPUUsageOfQuota, 0.7}), map[olc.PortKey]PortStats{r.port: {New: 100, Dropped: 20}})
	if d.DropProbability != bound || !strings.Contains(d.Reason, "holding while a surge's backlog drains") {
		t.Fatalf("tick inside the drain: p %.3f: %s", d.DropProbability, d.Reason)
	}
	// No window arrives (the daemon's onset timer stalled); the next tick
	// is past the limit.
	r.now += 0.5
	d = r.c.Step(snap(r.now, sig{olc.CgroupCPUUsageOfQuota, 1.0}), map[olc.PortKey]PortStats{r.port: {New: 300, Dropped: 285}})
	if r.c.onset.active || !strings.Contains(d.Reason, "drained for a tick interval") || d.DropProbability >= bound {
		t.Fatalf("tick past the limit: active %v, p %.3f: %s", r.c.onset.active, d.DropProbability, d.Reason)
	}
}

// The cases in which the onset check must not act.
func TestOnsetQuiet(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Params)
		setup func(r *onsetRig)
		rate  float64
	}{
		{name: "load at what fits", rate: 191},
		{name: "1.4 × what fits, below onset_ratio", rate: 1.4 * 191},
		{name: "onset_interval 0", edit: func(p *Params) { p.OnsetInterval = 0 }, rate: 600},
		{name: "onset_interval not below the tick", edit: func(p *Params) { p.OnsetInterval = 500 * time.Millisecond }, rate: 600},
		{name: "onset_ratio 4 against a 3.1 × surge", edit: func(p *Params) { p.OnsetRatio = 4 }, rate: 600},
		{name: "no estimate", setup: func(r *onsetRig) { r.c.forgetEstimate() }, rate: 600},
		{name: "inside an overload the ticks started", setup: func(r *onsetRig) {
			for range r.c.cfg.Params.ActivationTicks {
				r.tick(1.0, 600, 0)
			}
			if !r.c.overloaded {
				t.Fatal("the ticks started no overload")
			}
			r.at = r.now
		}, rate: 1200},
		{name: "fewer than 10 connections", setup: func(r *onsetRig) {
			// A service whose capacity is 19 new/s: 9 connections in
			// 100 ms is 4.7 × what fits, and still a burst.
			r.c.capRate = 20
		}, rate: 90},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newOnsetRig(t, tc.edit)
			if tc.setup != nil {
				tc.setup(r)
			}
			before := r.c.DropProbability()
			if d, ok := r.window(tc.rate); ok {
				t.Errorf("acted: p %.3f: %s", d.DropProbability, d.Reason)
			}
			if r.c.DropProbability() != before {
				t.Errorf("p moved from %.3f to %.3f without a decision", before, r.c.DropProbability())
			}
		})
	}
	// A window of zero or negative length says nothing.
	r := newOnsetRig(t, nil)
	for _, w := range []time.Duration{0, -time.Second} {
		if _, ok := r.c.Onset(TraceOrigin.Add(seconds(r.at)), w, map[olc.PortKey]PortStats{r.port: {New: 1000}}); ok {
			t.Errorf("window %v: acted", w)
		}
	}
}

// twoClassRig is a controller on cgroup_cpu_usage_of_quota (threshold
// 0.955, bound 0.95) with a critical and a normal port, whose estimate was
// learnt at 50 new/s split evenly (200 per unit: 191/s fit); now is the
// last tick's time, seconds.
func twoClassRig(t *testing.T) (c *Controller, crit, norm olc.PortKey, now float64) {
	t.Helper()
	cfg := cfgWith(sig{olc.CgroupCPUUsageOfQuota, 0.955})
	cfg.Params.MinPassRate = 0.05
	crit, norm = olc.PortKey{Proto: olc.ProtoTCP, Port: 443}, olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}
	cfg.Ports = []PortConfig{{Key: crit, Class: olc.ClassCritical}, {Key: norm, Class: olc.ClassNormal}}
	c = mustNew(t, cfg)
	for range 6 {
		now += 0.5
		c.Step(snap(now, sig{olc.CgroupCPUUsageOfQuota, 0.5}), map[olc.PortKey]PortStats{crit: {New: 25}, norm: {New: 25}})
	}
	return c, crit, norm, now
}

// The onset's drain never sheds a class that what fits leaves alone: with
// a critical port carrying a sixth of the surge, what fits sheds only the
// normal port, and the drain stops at its bound.
func TestOnsetClassCeiling(t *testing.T) {
	c, crit, norm, now := twoClassRig(t)
	// 100 new/s to the critical port, 500 to the normal one, against 191
	// that fit: what fits sheds 0.68 of the node, all of it from the
	// normal port (which can take 0.95 × 5/6 = 0.79).
	d, ok := c.Onset(TraceOrigin.Add(seconds(now+0.1)), 100*time.Millisecond, map[olc.PortKey]PortStats{crit: {New: 10}, norm: {New: 50}})
	if !ok {
		t.Fatal("surge not cut")
	}
	if d.Classes[olc.ClassCritical] != 0 || d.Classes[olc.ClassNormal] < 0.95-1e-9 {
		t.Errorf("drain split %s, want the normal class at its bound and critical untouched", ClassSummary(d.Classes))
	}
}

// A tick inside the drain keeps the surge's class split: the pre-surge
// demand it measures would spread the held p over the critical class.
func TestOnsetHoldKeepsSurgeSplit(t *testing.T) {
	c, crit, norm, now := twoClassRig(t)
	if _, ok := c.Onset(TraceOrigin.Add(seconds(now+0.1)), 100*time.Millisecond, map[olc.PortKey]PortStats{crit: {New: 10}, norm: {New: 50}}); !ok {
		t.Fatal("surge not cut")
	}
	d := c.Step(snap(now+0.4, sig{olc.CgroupCPUUsageOfQuota, 0.9}), map[olc.PortKey]PortStats{crit: {New: 37}, norm: {New: 137, Dropped: 100}})
	if !strings.Contains(d.Reason, "holding while") || d.Classes[olc.ClassCritical] != 0 {
		t.Errorf("tick inside the drain: %s: %s", ClassSummary(d.Classes), d.Reason)
	}
}

// A reload that drops the estimate mid-drain (the port set changed) ends
// the drain at what fits by the estimate it was planned with, not at the
// bound.
func TestOnsetDrainSurvivesLostEstimate(t *testing.T) {
	r := newOnsetRig(t, nil)
	if _, ok := r.window(600); !ok {
		t.Fatal("surge not cut")
	}
	cfg := r.c.Config()
	cfg.Ports = append(cfg.Ports, PortConfig{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 9090}, Class: olc.ClassNormal})
	if err := r.c.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if r.c.capOK {
		t.Fatal("a new port set kept the estimate")
	}
	var last Decision
	for range 6 {
		if d, ok := r.window(600); ok {
			last = d
		}
	}
	if pe := 1 - 200*0.955/600; r.c.onset.active || math.Abs(last.DropProbability-pe) > 0.01 {
		t.Errorf("after the drain: active %v, p %.3f, want what fits %.3f: %s", r.c.onset.active, last.DropProbability, pe, last.Reason)
	}
}

// An estimate that understates the capacity (the service did far less
// work than it predicted) is relearnt at the first tick after the drain,
// which drops p to what the corrected estimate says fits: here everything,
// so the overload ends there instead of after the cooldown and recovery.
func TestOnsetUnderstatedEstimate(t *testing.T) {
	r := newOnsetRig(t, nil)
	if _, ok := r.window(500); !ok {
		t.Fatal("surge not cut")
	}
	for range 5 {
		r.window(500)
	}
	if r.c.onset.active {
		t.Fatal("drain still on")
	}
	// 191 new/s admitted, which the estimate says put the signal at its
	// threshold 0.955; it reads 0.3.
	r.now = r.at
	d := r.tick(0.3, 500, 500-191)
	if !strings.Contains(d.Reason, "understated the capacity") || d.DropProbability != 0 || d.Overloaded {
		t.Errorf("first tick after the drain: p %.3f, overloaded %v: %s", d.DropProbability, d.Overloaded, d.Reason)
	}
	// An estimate that was right: the signal near what it predicts.
	r2 := newOnsetRig(t, nil)
	r2.window(600)
	for range 5 {
		r2.window(600)
	}
	r2.now = r2.at
	if d := r2.tick(0.9, 600, 600-191); strings.Contains(d.Reason, "understated") {
		t.Errorf("a right estimate relearnt: %s", d.Reason)
	}
}

// Windows before a pause of the check (a reload, a failed read) do not
// join the history: the backlog is that of the windows after it.
func TestOnsetHistoryGap(t *testing.T) {
	r := newOnsetRig(t, nil)
	r.window(390) // 39 connections: 2 × what fits, not 5 deviations above it
	if r.c.overloaded {
		t.Fatal("the first window started an overload")
	}
	r.at += 1 // the check paused for a second
	d, ok := r.window(600)
	if !ok || !strings.Contains(d.Reason, "draining a backlog of 40 connections") {
		t.Errorf("after the gap: acted %v: %s", ok, d.Reason)
	}
}
