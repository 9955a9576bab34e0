package adaptive

import (
	"fmt"
	"math"

	"github.com/olcd/olcd/internal/olc"
)

// The saturation estimate and what is built on it (the first cut sized by
// the offered rate, the disproof, the quota rescale; the fluid backlog and
// its drain are backlog.go's): the resource law's inference of the queue
// from a CPU signal. It runs only while no protected port's queue is measured
// (docs/controller.md §3).

// capacityMinShare is the share of its threshold the driving signal must
// show for a tick to teach the saturation estimate: near idle, a baseline
// that does not scale with new connections dominates the ratio.
const capacityMinShare = 0.3

// capacitySteady is how much the admitted rate may change from one tick to
// the next for the tick to teach the saturation estimate.
const capacitySteady = 0.2

// capacitySmoothing is the weight of the newest tick in the saturation
// estimate.
const capacitySmoothing = 0.5

// learnSteadyP is how much p may have moved since the previous tick for a
// tick inside an overload to teach the saturation estimate.
const learnSteadyP = 0.02

// learnNearTarget is the share of its threshold the driver must show for a
// tick inside an overload to teach the saturation estimate.
const learnNearTarget = 0.8

// estimateTicks is how many over ticks at the start of an overload use the
// saturation estimate even with the driver below its ceiling.
const estimateTicks = 2

// estimateGap is how far p must lie above the saturation estimate's p
// before a recovering tick falls straight to it.
const estimateGap = 0.1

// jumpCheckTicks is how many ticks after a recovery jump to the estimate a
// disproof of it returns p to where it was before the jump.
const jumpCheckTicks = 4

// checkEstimate forgets the saturation estimate when the signal disproves
// it, and reports whether it did: the driver pinned on two over ticks in a
// row while no more than drainAdmitted × what the estimate says fits was
// admitted and no backlog (by the estimate's own model) explains it. The
// estimate then overstates the capacity, which has fallen since it was
// learnt; jumping to it would pin the service again and again.
func (c *Controller) checkEstimate(d *Decision, over bool) bool {
	if c.sinceJump > 0 {
		if c.sinceJump++; c.sinceJump > jumpCheckTicks {
			c.sinceJump, c.pBeforeJump = 0, 0
		}
	}
	// The first tick after an onset drain also served the surge's
	// backlog: pinned, but not by what fits.
	first := c.afterOnset
	c.afterOnset = false
	rate, ok := c.fitRate(d)
	if ok && over && !first && !c.draining && c.saturatedDriver(d) &&
		c.admitted <= drainAdmitted*rate && c.backlog <= drainStart*rate*c.dt {
		c.pinnedAtFit++
	} else {
		c.pinnedAtFit = 0
	}
	if c.pinnedAtFit < 2 {
		return false
	}
	c.forgetEstimate()
	return true
}

// forgetEstimate drops the saturation estimate and everything built on it.
func (c *Controller) forgetEstimate() {
	c.capOK, c.draining, c.backlog = false, false, 0
	c.sinceJump, c.pinnedAtFit = 0, 0
}

// onsetUnderstated is the share of the work the saturation estimate
// predicts for what was admitted below which the first tick after an onset
// drain says the estimate understated the capacity.
const onsetUnderstated = 0.8

// estimateUnderstated reports whether the tick disproves the estimate the
// other way from checkEstimate, and relearns it then: the driver (the
// estimate's signal) reads below onsetUnderstated × what the estimate
// predicts for the admitted rate (admitted ÷ capRate), with at least
// capacityMinShare of what fits admitted. Only the first tick after an
// onset drain asks: there the estimate alone started the overload, and
// an understated one would otherwise shed a load that fits through the
// whole cooldown and recovery.
func (c *Controller) estimateUnderstated(d *Decision) bool {
	st := driverState(d)
	if st == nil || !c.capOK || st.Signal != c.capSignal || !c.ratesOK || st.Value <= 0 || c.capRate <= 0 {
		return false
	}
	if c.admitted < capacityMinShare*c.capRate*st.Threshold || st.Value >= onsetUnderstated*c.admitted/c.capRate {
		return false
	}
	c.capRate = c.admitted / st.Value
	return true
}

// learnCapacity updates the saturation estimate from a tick whose driver
// is a fraction between capacityMinShare of its threshold and its ceiling,
// at an admitted rate within capacitySteady of the previous tick's. Inside
// an overload the signal also carries what was admitted before the
// shedding took hold, so such a tick teaches only from a steady state: no
// drain, no backlog, no jump under check, p below the bound and unchanged
// since the previous tick, the driver near its target and steady, below
// its ceiling on both ticks (docs/controller.md §3). Learning
// inside an overload is what corrects an estimate learnt at low load, where
// each request costs more CPU (idle wake-ups, no batching), and one learnt
// before the capacity changed.
func (c *Controller) learnCapacity(d *Decision) {
	st := driverState(d)
	if st == nil || !st.Signal.IsFraction() || !c.ratesOK || c.admitted <= 0 {
		return
	}
	// Only a steady admitted rate: while it ramps up the signal lags the
	// work admitted (a queue is building), and the ratio overstates what
	// fits.
	if c.prevAdm <= 0 || math.Abs(c.admitted-c.prevAdm) > capacitySteady*math.Max(c.admitted, c.prevAdm) {
		return
	}
	if st.Value < capacityMinShare*st.Threshold || st.Value >= saturationLevel {
		return
	}
	if c.overloaded {
		// The signal steady too, and below its ceiling on the previous
		// tick as well: while a queue drains (even at the bound, with p
		// steady) the signal falls tick by tick and says nothing about
		// the admitted work.
		steady := !c.draining && c.sinceJump == 0 && math.Abs(c.p-c.prevP) <= learnSteadyP &&
			c.p < c.cfg.Params.Bound() && st.Value >= learnNearTarget*st.Threshold &&
			c.prevValue >= 0 && c.prevValue < saturationLevel &&
			math.Abs(st.Value-c.prevValue) <= capacitySteady*math.Max(st.Value, c.prevValue)
		if c.capOK && c.capSignal == st.Signal {
			steady = steady && c.backlog <= drainMin*c.capRate*st.Threshold*c.dt
		}
		if !steady {
			return
		}
	}
	r := c.admitted / st.Value
	if c.capOK && c.capSignal == st.Signal {
		c.capRate += capacitySmoothing * (r - c.capRate)
	} else {
		c.capRate, c.capSignal, c.capOK = r, st.Signal, true
		c.capQuota = 0
		if st.Signal == olc.CgroupCPUUsageOfQuota {
			c.capQuota = c.lastQuota
		}
	}
}

// rescaleEstimate follows a change of the watched cgroup's CPU quota with
// an estimate learnt on cgroup_cpu_usage_of_quota: that signal is a share
// of the quota, so the admitted work per unit of it scales with the quota
// (halving the quota halves what fits under the same threshold). Without
// it the estimate would say twice what fits until two pinned ticks disprove
// it, and the first cut after the change would be the law's. It returns a
// note for the reason ("" when nothing changed).
func (c *Controller) rescaleEstimate(s *olc.Snapshot) string {
	q := s.CgroupQuotaCPUs
	if q <= 0 {
		return ""
	}
	c.lastQuota = q
	if !c.capOK || c.capSignal != olc.CgroupCPUUsageOfQuota || c.capQuota <= 0 || q == c.capQuota {
		if c.capOK && c.capSignal == olc.CgroupCPUUsageOfQuota && c.capQuota <= 0 {
			c.capQuota = q
		}
		return ""
	}
	prev, k := c.capQuota, q/c.capQuota
	c.capRate *= k
	if c.onset.active {
		c.onset.capRate *= k
		c.onset.fit *= k
	}
	c.capQuota = q
	return fmt.Sprintf("; the cgroup's quota went from %.3g to %.3g CPUs: the saturation estimate scaled with it (%.0f new/s per unit of %s)",
		prev, q, c.capRate, olc.CgroupCPUUsageOfQuota)
}

// fitRate is the rate (new connections/s) that the saturation estimate
// says fits under the driver's threshold, and false without an estimate for
// the driver or without rates this tick.
func (c *Controller) fitRate(d *Decision) (float64, bool) {
	st := driverState(d)
	if st == nil || !c.capOK || c.capSignal != st.Signal || !c.ratesOK {
		return 0, false
	}
	rate := c.capRate * st.Threshold
	return rate, rate > 0
}

// saturationPressure estimates the pressure of a driver pinned at its
// ceiling as this tick's admitted rate over fitRate.
func (c *Controller) saturationPressure(d *Decision) (pressure, rate float64, ok bool) {
	rate, ok = c.fitRate(d)
	if !ok {
		return 0, 0, false
	}
	return c.admitted / rate, rate, true
}

// sustainableP returns the node-level p that admits fitRate of this tick's
// offered rate.
func (c *Controller) sustainableP(d *Decision) (p, rate float64, ok bool) {
	rate, ok = c.fitRate(d)
	if !ok || c.offered <= 0 {
		return 0, 0, false
	}
	return math.Max(0, 1-rate/c.offered), rate, true
}

// measuredHold is how many ticks a port's measured queue keeps the
// estimate off after its last measurement: a few ticks without enough
// responses (a drain, a pause) do not bring the estimate back mid-overload.
const measuredHold = 10

// queueMeasured reports whether a protected port with a response target
// had its queue measured this tick or in the last measuredHold ticks.
// With the queue measured the estimate lowered goodput on the plant
// (docs/tuning.md §4a), so it runs only where the queue is not measured.
func (c *Controller) queueMeasured(stats map[olc.PortKey]PortStats, stale bool) bool {
	if c.measuredFor > 0 {
		c.measuredFor--
	}
	if !stale {
		for i := range c.ports {
			if st, ok := stats[c.ports[i].cfg.Key]; ok && c.ports[i].cfg.Target.On() && st.Response.Available {
				c.measuredFor = measuredHold
				break
			}
		}
	}
	return c.measuredFor > 0
}
