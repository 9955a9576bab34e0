package adaptive

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/olc"
)

// The queueing plant: the overload harness's service (tests/e2e/overload)
// in miniature. Each admitted connection is one request of 1/queueCapacity
// seconds of CPU, served first come first served by one CPU; nothing leaves
// the queue unserved (the server cannot tell that a client gave up), and
// clients neither retry nor come back (they give up after 1 s, the SYN's
// first retransmit). A request counts as goodput when it is served within
// queueSLO of its arrival. The simulation runs in 10 ms steps; the
// controller ticks every 500 ms on the CPU busy of the tick (plus noise) and
// drops exactly the share p of each step's arrivals (selection: even).
const (
	queueCapacity = 200.0 // requests/s the CPU serves when busy
	queueSLO      = 0.2   // seconds
	queueStep     = 0.01  // seconds
	queueTick     = 0.5   // seconds
)

// queueChunk is work that arrived in one step.
type queueChunk struct {
	at, n float64
}

// queueOpts varies the queueing plant.
type queueOpts struct {
	// capacity is the requests/s the CPU serves at time t when fully busy
	// (queueCapacity when nil).
	capacity func(t float64) float64
	// baseline is a share of the CPU (0..1) busy whatever the load (a
	// sidecar, timers), which the requests cannot use: the estimate learnt
	// at low load then understates what fits at high load.
	baseline float64
	// onset runs the controller's onset check every onset_interval
	// between ticks, as the daemon does.
	onset bool
	// poisson draws each step's arrivals from a Poisson distribution
	// (independent clients) instead of the load's exact share (a
	// constant-rate load generator).
	poisson bool
}

// poissonCount draws a Poisson count of mean lambda (Knuth's method; the
// plant's means per step are small).
func poissonCount(rng *rand.Rand, lambda float64) float64 {
	l, k, p := math.Exp(-lambda), 0.0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// runQueuePlant offers load(t) requests/s for secs seconds to the queueing
// plant under controller c and returns the goodput (requests/s within the
// SLO) of the requests that arrived in [from, to) and every decision.
func runQueuePlant(t *testing.T, c *Controller, seed uint64, load func(float64) float64, opt queueOpts, secs, from, to float64) (goodput float64, ds []Decision) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x9e3))
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 18080}
	var queue []queueChunk
	var p, good, tickNew, tickDropped, tickServed, winNew, winDropped float64
	stepsPerTick := int(math.Round(queueTick / queueStep))
	// The onset check's window: the controller's onset_interval, in whole
	// steps.
	queueOnset := c.cfg.Params.OnsetInterval.Seconds()
	stepsPerOnset := max(1, int(math.Round(queueOnset/queueStep)))
	for k := 1; k <= int(math.Round(secs/queueStep)); k++ {
		now := float64(k) * queueStep
		arrive := load(now) * queueStep
		if opt.poisson {
			arrive = poissonCount(rng, arrive)
		}
		tickNew += arrive
		tickDropped += arrive * p
		winNew += arrive
		winDropped += arrive * p
		queue = append(queue, queueChunk{at: now, n: arrive * (1 - p)})
		capNow := queueCapacity
		if opt.capacity != nil {
			capNow = opt.capacity(now)
		}
		capNow *= 1 - opt.baseline
		budget := capNow * queueStep
		for budget > 1e-12 && len(queue) > 0 {
			q := &queue[0]
			n := math.Min(q.n, budget)
			if now-q.at <= queueSLO && q.at >= from && q.at < to {
				good += n
			}
			q.n -= n
			budget -= n
			tickServed += n / capNow * (1 - opt.baseline)
			if q.n <= 1e-12 {
				queue = queue[1:]
			}
		}
		// The daemon's onset check runs on its own timer, beside the
		// ticks: here every window, before a tick that ends at the
		// same moment.
		if opt.onset && k%stepsPerOnset == 0 {
			d, ok := c.Onset(TraceOrigin.Add(seconds(now)), seconds(queueOnset), map[olc.PortKey]PortStats{key: {
				New:     uint64(math.Round(winNew)),
				Dropped: uint64(math.Round(winDropped)),
			}})
			if ok {
				ds = append(ds, d)
				p = d.DropProbability
			}
		}
		if k%stepsPerOnset == 0 {
			winNew, winDropped = 0, 0
		}
		if k%stepsPerTick != 0 {
			continue
		}
		busy := opt.baseline + tickServed/queueTick
		busy = math.Min(1, math.Max(0, busy+rng.NormFloat64()*0.01))
		s := olc.Snapshot{At: TraceOrigin.Add(seconds(now)), Interval: seconds(queueTick)}
		s.Set(olc.CPUBusy, busy)
		d := c.Step(s, map[olc.PortKey]PortStats{key: {
			New:     uint64(math.Round(tickNew)),
			Dropped: uint64(math.Round(tickDropped)),
		}})
		ds = append(ds, d)
		p = d.DropProbability
		tickNew, tickDropped, tickServed = 0, 0, 0
	}
	return good / (to - from), ds
}

// harnessController is a controller with the overload harness's settings
// (tests/e2e/overload.DefaultController) on cpu_busy at 0.93.
func harnessController(t *testing.T) *Controller {
	t.Helper()
	cfg := Config{Interval: seconds(queueTick), Params: DefaultParams()}
	cfg.Params.MinPassRate = 0.05
	cfg.Params.ActivationTicks = 1
	cfg.Params.MaxStep = 0.5
	cfg.Params.Cooldown = 2
	cfg.Params.RecoveryStep = 0.1
	cfg.Params.Hysteresis = 0.02
	cfg.Thresholds[olc.CPUBusy] = 0.93
	cfg.Ports = []PortConfig{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 18080}, Class: olc.ClassNormal}}
	return mustNew(t, cfg)
}

// TestQueuePlantDrain is scenario 1 of the overload harness on the queueing
// plant: 0.5 C for 10 s, 3 C for 30 s, 0.5 C again, C here the rate at
// which the CPU is fully busy (the target 0.93 caps the goodput at 0.93 C).
// Every tick the CPU is pinned at 3 C queues work that delays all later
// requests past the SLO until it is served; the drain (shed at the bound
// until the backlog the estimate tracks is gone, then admit what fits)
// keeps the goodput of the whole 3 C phase at 0.8 C or more on every seed
// (0.83 C worst; the controller before the drain: 0.75 C). Once the step's
// backlog is gone, the noise of a steady overload must neither start a
// drain nor disprove the estimate. The same holds with a CPU baseline that
// makes the estimate learnt at 0.5 C understate what fits at 3 C (it is
// corrected inside the overload), and for a second step after a quiet
// spell (nothing of the first overload's state may carry over). The step
// without the 0.5 C phase that teaches the estimate (the law alone, with
// its saturation boost: 0.63 C) is logged for comparison.
func TestQueuePlantDrain(t *testing.T) {
	// steps returns a load of 3 C from each start for 30 s, 0.5 C else.
	steps := func(starts ...float64) func(float64) float64 {
		return func(now float64) float64 {
			for _, at := range starts {
				if now >= at && now < at+30 {
					return 3 * queueCapacity
				}
			}
			return 0.5 * queueCapacity
		}
	}
	cases := []struct {
		name     string
		baseline float64
		second   bool // measure a second step, 20 s after the first ended
	}{
		{"step", 0, false},
		{"cpu baseline 0.1", 0.1, false},
		{"second step", 0, true},
	}
	for _, tc := range cases {
		worst := math.Inf(1)
		for seed := uint64(1); seed <= plantSeeds; seed++ {
			// The step falls at a different point of the tick on every seed.
			at := 10 + float64(seed%10)*0.05
			load, from := steps(at), at
			if tc.second {
				load, from = steps(at, at+50), at+50
			}
			g, ds := runQueuePlant(t, harnessController(t), seed, load, queueOpts{baseline: tc.baseline}, from+40, from, from+30)
			ratio := g / (queueCapacity * (1 - tc.baseline))
			worst = math.Min(worst, ratio)
			var drained bool
			for _, d := range ds {
				tk := d.At.Sub(TraceOrigin).Seconds()
				if tk > from && tk < from+5 && strings.Contains(d.Reason, "draining a backlog") {
					drained = true
				}
				if tk > from+5 && tk < from+30 && (d.DropProbability >= 0.95 || strings.Contains(d.Reason, "draining a backlog")) {
					t.Errorf("%s, seed %d: at %.1f s, %.1f s into the steady overload, p %.3f: %s", tc.name, seed, tk, tk-from, d.DropProbability, d.Reason)
					break
				}
				if strings.Contains(d.Reason, "estimate is forgotten") {
					t.Errorf("%s, seed %d: a correct estimate forgotten at %.1f s: %s", tc.name, seed, tk, d.Reason)
					break
				}
			}
			if ratio < 0.8 || !drained {
				t.Errorf("%s, seed %d: goodput over the 3 C phase %.3f C (drained: %v), want ≥ 0.8 C after a drain", tc.name, seed, ratio, drained)
			}
		}
		t.Logf("%s: goodput over the 3 C phase, worst of %d seeds: %.3f C", tc.name, plantSeeds, worst)
	}
	worstBlind := math.Inf(1)
	for seed := uint64(1); seed <= plantSeeds; seed++ {
		// Without the warm-up the controller has no estimate: the law alone.
		blind := func(now float64) float64 {
			if now < 30 {
				return 3 * queueCapacity
			}
			return 0.5 * queueCapacity
		}
		gb, _ := runQueuePlant(t, harnessController(t), seed, blind, queueOpts{}, 40, 0, 30)
		worstBlind = math.Min(worstBlind, gb/queueCapacity)
	}
	t.Logf("the law alone (no estimate learnt): %.3f C", worstBlind)
	if worstBlind >= 0.8 {
		t.Errorf("the law alone (%.3f C) did as well as the drain: the plant does not show the backlog", worstBlind)
	}
}

// TestQueuePlantStaleEstimate learns the estimate at full capacity, then
// halves the capacity under a load that fitted before (0.75 C, 1.5 × the
// new capacity). The estimate now says everything fits: after the law has
// drained the queue, p jumps to it, the CPU pins again, and without a check
// this repeats every few seconds for as long as the load lasts. The jump
// that pins the signal again disproves the estimate, which is forgotten:
// at most one repeat, then the law holds the new capacity.
func TestQueuePlantStaleEstimate(t *testing.T) {
	load := func(now float64) float64 {
		if now < 10 {
			return 0.5 * queueCapacity
		}
		return 0.75 * queueCapacity
	}
	capacity := func(now float64) float64 {
		if now < 30 {
			return queueCapacity
		}
		return queueCapacity / 2
	}
	for seed := uint64(1); seed <= plantSeeds; seed++ {
		g, ds := runQueuePlant(t, harnessController(t), seed, load, queueOpts{capacity: capacity}, 90, 50, 90)
		var jumps, forgotten int
		for _, d := range ds {
			tk := d.At.Sub(TraceOrigin).Seconds()
			if tk > 30 && strings.Contains(d.Reason, "to the saturation estimate") {
				jumps++
			}
			if strings.Contains(d.Reason, "estimate is forgotten") {
				forgotten++
			}
			if tk > 50 && d.DropProbability >= 0.9 {
				t.Errorf("seed %d: p %.3f at %.1f s, 20 s after the capacity fell: %s", seed, d.DropProbability, tk, d.Reason)
				break
			}
		}
		if jumps > 2 || forgotten != 1 {
			t.Errorf("seed %d: %d jumps to the stale estimate after the capacity fell, forgotten %d times; want at most 2 and once", seed, jumps, forgotten)
		}
		// The new capacity is 100/s; the target 0.93 admits 93/s.
		if ratio := g / (queueCapacity / 2); ratio < 0.85 {
			t.Errorf("seed %d: goodput %.3f × the new capacity from 20 s after the drop, want ≥ 0.85", seed, ratio)
		}
	}
}

// TestQueuePlantOnset is TestQueuePlantDrain's step with the onset check
// between ticks, as the daemon runs it: the surge is cut within 200 ms
// (within one 50 ms window of the default onset_interval when it arrives
// early in it) and the little it queued is drained in the next windows,
// so the whole 3 C phase keeps 0.9 C or more on every seed (goal of the
// overload suite) where the ticks alone lose about two seconds. A surge
// must start the overload through the onset check, and the steady
// overload after it must not drain again.
func TestQueuePlantOnset(t *testing.T) {
	cases := []struct {
		name     string
		baseline float64
		poisson  bool
	}{
		{"step", 0, false},
		{"cpu baseline 0.1", 0.1, false},
		// Independent clients: the thinned stream queues behind its own
		// bursts and the steady state is noisier (goal logged, 0.85 C
		// held).
		{"poisson arrivals", 0, true},
	}
	for _, tc := range cases {
		worst, worstTicks := math.Inf(1), math.Inf(1)
		forgotten := 0
		for seed := uint64(1); seed <= plantSeeds; seed++ {
			at := 10 + float64(seed%10)*0.05
			load := func(now float64) float64 {
				if now >= at && now < at+30 {
					return 3 * queueCapacity
				}
				return 0.5 * queueCapacity
			}
			opt := queueOpts{baseline: tc.baseline, onset: true, poisson: tc.poisson}
			g, ds := runQueuePlant(t, harnessController(t), seed, load, opt, at+40, at, at+30)
			ratio := g / (queueCapacity * (1 - tc.baseline))
			worst = math.Min(worst, ratio)
			opt.onset = false
			gt, _ := runQueuePlant(t, harnessController(t), seed, load, opt, at+40, at, at+30)
			worstTicks = math.Min(worstTicks, gt/(queueCapacity*(1-tc.baseline)))
			var surge bool
			for _, d := range ds {
				tk := d.At.Sub(TraceOrigin).Seconds()
				for _, ev := range d.Events {
					if ev.Kind == EventOverloadStart && tk > at && tk <= at+0.2+1e-9 && strings.HasPrefix(ev.Reason, "surge") {
						surge = true
					}
				}
				if tk > at+5 && tk < at+30 && (d.DropProbability >= 0.95 || strings.Contains(d.Reason, "drain")) {
					t.Errorf("%s, seed %d: at %.1f s, %.1f s into the steady overload, p %.3f: %s", tc.name, seed, tk, tk-at, d.DropProbability, d.Reason)
					break
				}
				// An estimate learnt from noisy readings at 0.5 C can be a
				// few percent high: two readings just over 0.95 then
				// disprove it (docs/controller.md §3), which costs only
				// its relearning, within the goodput line below.
				if strings.Contains(d.Reason, "estimate is forgotten") {
					forgotten++
				}
			}
			want := 0.9
			if tc.poisson {
				want = 0.85
			}
			if ratio < want || !surge {
				t.Errorf("%s, seed %d: goodput over the 3 C phase %.3f C (started by the onset check within a window: %v), want ≥ %.2f C", tc.name, seed, ratio, surge, want)
			}
		}
		t.Logf("%s: goodput over the 3 C phase, worst of %d seeds: %.3f C with the onset check, %.3f C with the ticks alone; estimate disproved %d times", tc.name, plantSeeds, worst, worstTicks, forgotten)
	}
}

// TestQueuePlantOnsetQuiet: loads up to what fits, from independent
// clients (Poisson arrivals, whose 100 ms windows scatter by ±20 %), never
// start an overload through the onset check. A load 1.3 × what fits is an
// overload the law follows; a noisy window may start it through the onset
// check, with a cut sized by that window, and the goodput must not suffer
// for it (at least 0.97 × the ticks' alone).
func TestQueuePlantOnsetQuiet(t *testing.T) {
	for _, share := range []float64{0.8, 0.93, 0.93 * 1.3} {
		var with, without float64
		for seed := uint64(1); seed <= plantSeeds; seed++ {
			load := func(now float64) float64 {
				if now < 10 {
					return 0.5 * queueCapacity
				}
				return share * queueCapacity
			}
			g, ds := runQueuePlant(t, harnessController(t), seed, load, queueOpts{onset: true, poisson: true}, 70, 10, 70)
			g0, _ := runQueuePlant(t, harnessController(t), seed, load, queueOpts{poisson: true}, 70, 10, 70)
			with, without = with+g, without+g0
			if share > 0.93 {
				continue
			}
			for _, d := range ds {
				for _, ev := range d.Events {
					if ev.Kind == EventOverloadStart && strings.HasPrefix(ev.Reason, "surge") {
						t.Errorf("load %.2f C, seed %d: the onset check started an overload at %.1f s: %s", share, seed, d.At.Sub(TraceOrigin).Seconds(), ev.Reason)
					}
				}
			}
		}
		t.Logf("load %.2f C: mean goodput %.3f C with the onset check, %.3f C without", share, with/plantSeeds/queueCapacity, without/plantSeeds/queueCapacity)
		if with < 0.97*without {
			t.Errorf("load %.2f C: the onset check costs goodput: %.3f C against %.3f C", share, with/plantSeeds/queueCapacity, without/plantSeeds/queueCapacity)
		}
	}
}
