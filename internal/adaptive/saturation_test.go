package adaptive

import (
	"math"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/olc"
)

// saturationRig is a controller on cgroup_cpu_usage_of_quota at a threshold
// close to the ceiling (0.955, where the pressure of a pinned cgroup is at
// most 1.047) and one port, driven tick by tick.
type saturationRig struct {
	t    *testing.T
	c    *Controller
	port olc.PortKey
	now  float64
}

func newSaturationRig(t *testing.T, edit func(*Params)) *saturationRig {
	cfg := cfgWith(sig{olc.CgroupCPUUsageOfQuota, 0.955})
	cfg.Params.MinPassRate = 0.05
	if edit != nil {
		edit(&cfg.Params)
	}
	r := &saturationRig{t: t, port: olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}}
	cfg.Ports = []PortConfig{{Key: r.port, Class: olc.ClassNormal}}
	r.c = mustNew(t, cfg)
	return r
}

// tick feeds one 500 ms tick: the signal value and the new and dropped SYNs
// per second.
func (r *saturationRig) tick(value, newPerS, droppedPerS float64) Decision {
	r.now += 0.5
	st := PortStats{New: uint64(newPerS / 2), Dropped: uint64(droppedPerS / 2)}
	return r.c.Step(snap(r.now, sig{olc.CgroupCPUUsageOfQuota, value}), map[olc.PortKey]PortStats{r.port: st})
}

// The ceiling caps the pressure of a saturated signal at 1/threshold; with
// a learnt rate of 200 new/s per unit of the signal, 600 new/s against the
// 191/s that fit under 0.955 is a pressure of 3.1. The first shedding tick
// goes straight to the p that admits what fits (beyond MaxStep: the
// estimate sizes the cut, the law's bounded steps do not apply). The signal
// still pinned at 1.0 while only what fits was admitted confirms the
// backlog the first tick's 600/s left: p goes to the bound, then follows
// the drain plan down as the backlog empties, to the p that fits.
func TestSaturationEstimateCutAndDrain(t *testing.T) {
	learnt := newSaturationRig(t, nil)
	for range 6 {
		learnt.tick(0.5, 100, 0) // 100 new/s at 0.5: 200 per unit
	}
	blind := newSaturationRig(t, nil)
	for range 6 {
		blind.tick(0.2, 100, 0) // below capacityMinShare × 0.955: teaches nothing
	}
	var dl, db Decision
	for range 2 { // activation_ticks
		dl = learnt.tick(1.0, 600, 0)
		db = blind.tick(1.0, 600, 0)
	}
	pe := 1 - 200*0.955/600
	if !strings.Contains(dl.Reason, "191/s fit under the threshold") {
		t.Errorf("learnt: reason %q does not give the estimate (191/s fit)", dl.Reason)
	}
	if math.Abs(dl.DropProbability-pe) > 1e-6 {
		t.Errorf("learnt: first cut p = %.3f, want the p that fits %.3f", dl.DropProbability, pe)
	}
	if db.DropProbability > 0.05 || strings.Contains(db.Reason, "fit under") {
		t.Errorf("without an estimate: first cut p = %.3f (%s), want the capped pressure's small step", db.DropProbability, db.Reason)
	}
	// Backlog after the activation tick and the first cut: 2 × (600 −
	// 200 × 1.0) × 0.5 = 400. Each tick: backlog += (admitted − 200) × 0.5;
	// p = 1 − (191 − backlog/0.5)/600.
	bound := 0.95
	steps := []struct {
		want     float64
		draining bool
	}{
		{bound, true},                  // 191 admitted, backlog 395.5
		{bound, true},                  // 30 admitted, backlog 310.5
		{bound, true},                  // 225.5
		{bound, true},                  // 140.5
		{1 - (191-2*55.5)/600.0, true}, // 55.5: the plan falls
		{pe, false},                    // 80 admitted, backlog 0: what fits
	}
	p := dl.DropProbability
	for i, st := range steps {
		d := learnt.tick(1.0, 600, 600*p)
		if math.Abs(d.DropProbability-st.want) > 0.005 || learnt.c.draining != st.draining {
			t.Fatalf("drain tick %d: p = %.3f draining %v (%s), want %.3f draining %v",
				i+1, d.DropProbability, learnt.c.draining, d.Reason, st.want, st.draining)
		}
		if st.draining && !strings.Contains(d.Reason, "draining a backlog") {
			t.Errorf("drain tick %d: reason %q does not name the drain", i+1, d.Reason)
		}
		p = d.DropProbability
	}
}

// drainingRig returns a rig that learnt 200 new/s per unit and then met
// 600 new/s with the signal pinned: activation, the first cut, and the
// backlog confirmed, draining at the bound.
func drainingRig(t *testing.T) *saturationRig {
	t.Helper()
	r := newSaturationRig(t, nil)
	for range 6 {
		r.tick(0.5, 100, 0)
	}
	for range 3 {
		r.tick(1.0, 600, 600*r.c.DropProbability())
	}
	if !r.c.draining || r.c.DropProbability() != 0.95 {
		t.Fatalf("not draining at the bound: p %.3f draining %v", r.c.DropProbability(), r.c.draining)
	}
	return r
}

// A drain ends as soon as the signal falls below its threshold (the queue
// is empty): p goes to what fits and the next tick holds.
func TestDrainEndsOnSignal(t *testing.T) {
	r := drainingRig(t)
	d := r.tick(0.6, 600, 600*0.95)
	pe := 1 - 200*0.955/600
	if math.Abs(d.DropProbability-pe) > 1e-6 || !strings.Contains(d.Reason, "backlog drained") {
		t.Fatalf("signal below the threshold while draining: p %.3f (%s), want %.3f", d.DropProbability, d.Reason, pe)
	}
	if d2 := r.tick(0.6, 600, 600*pe); d2.DropProbability != pe {
		t.Errorf("the tick after the drain moved p %.3f → %.3f, want it held", pe, d2.DropProbability)
	}
}

// A drain never reaches a class the p that fits leaves alone.
func TestClassCeiling(t *testing.T) {
	w := [olc.NumClasses]float64{}
	w[olc.ClassBestEffort], w[olc.ClassNormal], w[olc.ClassCritical] = 1, 1, 2
	for _, c := range []struct{ p, want float64 }{
		{0, 0.2375}, {0.1, 0.2375}, {0.2375, 0.2375}, {0.3, 0.475}, {0.5, 0.95}, {0.95, 0.95},
	} {
		if got := classCeiling(c.p, 0.95, w); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("classCeiling(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	w[olc.ClassNormal] = 0 // a class without demand is skipped
	if got := classCeiling(0.4, 0.95, w); math.Abs(got-0.95) > 1e-9 {
		t.Errorf("classCeiling(0.4) without normal demand = %v, want 0.95", got)
	}
	if got := classCeiling(0.3, 0.95, [olc.NumClasses]float64{}); got != 0.95 {
		t.Errorf("classCeiling without weights = %v, want the bound", got)
	}
}

// Admitted work, not offered, teaches the estimate: 400 new/s of which 200
// dropped at a signal of 0.5 is 400 per unit, not 800.
func TestSaturationEstimateLearnsAdmitted(t *testing.T) {
	r := newSaturationRig(t, nil)
	for range 4 {
		r.tick(0.5, 400, 200)
	}
	if math.Abs(r.c.capRate-400) > 1 {
		t.Errorf("capRate %.1f per unit, want 400 (admitted 200/s at 0.5)", r.c.capRate)
	}
	// Saturated ticks do not teach: their value no longer grows with the
	// admitted work.
	r.tick(1.0, 2000, 0)
	if math.Abs(r.c.capRate-400) > 1 {
		t.Errorf("a saturated tick moved capRate to %.1f", r.c.capRate)
	}
}

// After shedding at the bound to drain a backlog, a recovering tick far
// above the estimate falls straight to it instead of by RecoveryStep.
func TestRecoveryToSaturationEstimate(t *testing.T) {
	r := newSaturationRig(t, nil)
	for range 6 {
		r.tick(0.5, 100, 0)
	}
	var d Decision
	// Saturated by a surge so large that even the bound admits more than
	// fits (6000 new/s, 300 admitted at the bound against 191 that fit):
	// the signal pinned is the surge's, which does not disprove the
	// estimate.
	for range 12 {
		d = r.tick(1.0, 6000, 6000*r.c.DropProbability())
	}
	bound := 1 - 0.05
	if d.DropProbability != bound {
		t.Fatalf("p = %.3f after 12 saturated ticks, want the bound %.2f", d.DropProbability, bound)
	}
	// The backlog has drained: the signal drops far below the target.
	// After the cooldown, one tick takes p to the estimate: 1 − 191/600.
	want := 1 - 200*0.955/600
	prev := d.DropProbability
	for i := range DefaultParams().Cooldown {
		d = r.tick(0.1, 600, 600*prev)
		if d.DropProbability != prev {
			t.Fatalf("tick %d of the cooldown: p moved %.3f → %.3f", i+1, prev, d.DropProbability)
		}
	}
	d = r.tick(0.1, 600, 600*prev)
	// The drain ticks taught nothing (the node was overloaded): the
	// estimate is the one learnt before, 191 of 600 new/s.
	if math.Abs(d.DropProbability-want) > 0.01 {
		t.Errorf("after the cooldown p = %.3f (%s), want the estimate %.3f", d.DropProbability, d.Reason, want)
	}
	if !strings.Contains(d.Reason, "to the saturation estimate") {
		t.Errorf("reason %q does not name the estimate", d.Reason)
	}
	// The signal shows the jump a tick later: the next tick holds even
	// though its reading (of the old p) is still far below the target.
	p := d.DropProbability
	if d = r.tick(0.1, 600, 600*p); d.DropProbability != p {
		t.Errorf("the tick after the jump moved p %.3f → %.3f, want it held", p, d.DropProbability)
	}
	// Near the estimate the law decides again: no jumps on noise.
	d = r.tick(0.85, 600, 600*p)
	if p-d.DropProbability > DefaultParams().RecoveryStep+1e-9 {
		t.Errorf("near the estimate p fell %.3f → %.3f, more than RecoveryStep", p, d.DropProbability)
	}
}

// A ramp teaches nothing: while the admitted rate climbs, the signal lags
// the work admitted (a queue builds) and the ratio would overstate what
// fits. The first steady tick after it does.
func TestSaturationEstimateIgnoresRamps(t *testing.T) {
	r := newSaturationRig(t, nil)
	r.tick(0.3, 100, 0) // no previous tick to compare with
	r.tick(0.6, 400, 0) // ×4 in one tick
	if r.c.capOK {
		t.Fatalf("learnt %.0f per unit from a ramp", r.c.capRate)
	}
	r.tick(0.8, 420, 0) // within 20 % of the previous tick
	if !r.c.capOK || math.Abs(r.c.capRate-525) > 1 {
		t.Errorf("capRate %.1f (ok %v) after a steady tick, want 420/0.8 = 525", r.c.capRate, r.c.capOK)
	}
}

// A tick without a usable reading of the estimate's signal (a stale
// snapshot, a missing value) holds the backlog: a starved sampler is
// likeliest when the CPU is pinned, and dropping the backlog then would end
// the drain with the queue still full.
func TestDrainHoldsBacklogOnMissingSamples(t *testing.T) {
	r := drainingRig(t)
	before := r.c.backlog
	// Same timestamp as the previous tick: stale.
	r.c.Step(snap(r.now, sig{olc.CgroupCPUUsageOfQuota, 1.0}), map[olc.PortKey]PortStats{r.port: {New: 300, Dropped: 285}})
	if r.c.backlog != before || !r.c.draining {
		t.Errorf("stale tick: backlog %.0f → %.0f, draining %v; want it held", before, r.c.backlog, r.c.draining)
	}
	// A tick without the signal at all.
	r.now += 0.5
	r.c.Step(snap(r.now), map[olc.PortKey]PortStats{r.port: {New: 300, Dropped: 285}})
	if r.c.backlog != before {
		t.Errorf("tick without the signal: backlog %.0f → %.0f, want it held", before, r.c.backlog)
	}
	d := r.tick(1.0, 600, 600*0.95)
	if !strings.Contains(d.Reason, "draining a backlog") {
		t.Errorf("pinned tick after the gap: %s, want the drain to go on", d.Reason)
	}
}

// The estimate learnt on cgroup_cpu_usage_of_quota follows the cgroup's
// quota: after the quota halves, the same 150 new/s that fitted twice over
// are 1.6 × what fits, and the first shedding tick cuts straight to the p
// that admits the 95.5/s that fit under 0.955 of the new quota. Without the
// rescale the estimate says 191/s fit, and p would creep up by the law's
// steps until two pinned ticks disprove it.
func TestSaturationEstimateFollowsQuota(t *testing.T) {
	r := newSaturationRig(t, nil)
	tick := func(quota, value, newPerS float64) Decision {
		r.now += 0.5
		s := snap(r.now, sig{olc.CgroupCPUUsageOfQuota, value})
		s.CgroupQuotaCPUs = quota
		st := PortStats{New: uint64(newPerS / 2), Dropped: uint64(newPerS / 2 * r.c.DropProbability())}
		return r.c.Step(s, map[olc.PortKey]PortStats{r.port: st})
	}
	for range 6 {
		tick(1, 0.75, 150) // 200 new/s per unit of a 1-CPU quota
	}
	d := tick(0.5, 1.0, 150)
	if !strings.Contains(d.Reason, "quota went from 1 to 0.5 CPUs") || math.Abs(r.c.capRate-100) > 1e-9 {
		t.Fatalf("after the quota halved: capRate %.1f, want 100: %s", r.c.capRate, d.Reason)
	}
	d = tick(0.5, 1.0, 150)
	if want := 1 - 95.5/150; d.DropProbability < want-0.01 || !strings.Contains(d.Reason, "96/s fit under the threshold") {
		t.Errorf("first shedding tick at the half quota: p %.3f, want ≥ %.3f: %s", d.DropProbability, want, d.Reason)
	}
	// Another quota's estimate is not the cgroup's: a cpu_busy estimate
	// ignores the quota.
	c := mustNew(t, cfgWith(sig{olc.CPUBusy, 0.8}))
	c.cfg.Ports = []PortConfig{{Key: r.port, Class: olc.ClassNormal}}
	if note := c.rescaleEstimate(&olc.Snapshot{CgroupQuotaCPUs: 0.5}); note != "" {
		t.Errorf("rescale without a quota estimate: %q", note)
	}
}
