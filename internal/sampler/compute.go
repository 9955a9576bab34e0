package sampler

import (
	"math"
	"math/bits"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// compute turns two readings into a Snapshot. It is pure: the same readings
// and interval give the same snapshot (At is taken from cur). Values that
// need a delta require havePrev and interval > 0; everything else comes from
// cur alone.
func compute(prev, cur *reading, havePrev bool, interval time.Duration) olc.Snapshot {
	snap := olc.Snapshot{At: cur.at}
	if havePrev && interval > 0 {
		snap.Interval = interval
	}
	secs := snap.Interval.Seconds()
	deltas := secs > 0

	// CPU.
	st := &cur.stat
	if deltas && prev.stat.cpuOK && st.cpuOK {
		if v, ok := cpuBusy(&prev.stat.cpu, &st.cpu); ok {
			snap.Set(olc.CPUBusy, v)
		}
	}

	// Load and run queue.
	online := float64(st.online)
	if cur.load1OK {
		snap.Set(olc.Load1, cur.load1)
		if st.online > 0 {
			snap.Set(olc.Load1PerCore, cur.load1/online)
		}
	}
	if st.runningOK {
		snap.Set(olc.Runnable, float64(st.running))
		if st.online > 0 {
			snap.Set(olc.RunqPerCore, float64(st.running)/online)
		}
	}

	// Node PSI.
	for res := range numPSIResources {
		setPSI(&snap, &prev.psi[res], &cur.psi[res], nodePSIAvg10[res], nodePSIShare[res], deltas, secs)
	}

	// Listen pressure.
	if deltas && prev.overflowsOK && cur.overflowsOK && cur.overflows >= prev.overflows {
		snap.Set(olc.ListenOverflowsPerS, float64(cur.overflows-prev.overflows)/secs)
	}
	if cur.diagOK {
		n := 0
		for _, f := range cur.fills {
			if f.found {
				n++
			}
		}
		if n > 0 {
			snap.AcceptQueueFill = make(map[uint16]float64, n)
			max := 0.0
			for _, f := range cur.fills {
				if !f.found {
					continue
				}
				snap.AcceptQueueFill[f.port] = f.fill
				if f.fill > max {
					max = f.fill
				}
			}
			snap.Set(olc.AcceptQueueFill, max)
		}
	}

	// Cgroup.
	computeCgroup(&snap, &prev.cg, &cur.cg, st.online, deltas, secs)

	if len(cur.errs) > 0 {
		snap.Errors = append([]olc.SourceError(nil), cur.errs...)
	}
	return snap
}

// cpuBusy applies the cpu_busy rules to two aggregate cpu lines:
// total = user+nice+system+idle+iowait+irq+softirq+steal (guest and
// guest_nice are already inside user and nice, so adding them would count
// guest time twice); busy = total − idle − iowait, so steal counts as busy;
// a column that went backwards (iowait can on NO_HZ kernels; a counter
// reset) contributes 0; a zero total (no tick elapsed) gives no value, and
// so does a total of deltas beyond 2^64 ticks, which no kernel can count in
// one interval (an lxcfs idle counter that underflowed to near 2^64 does):
// summed with wrap-around it would make an idle CPU read as busy. The result
// is clamped to [0, 1].
func cpuBusy(prev, cur *[cpuMaxFields]uint64) (float64, bool) {
	var d [cpuSteal + 1]uint64
	var total, carry uint64
	for i := range d {
		if cur[i] > prev[i] {
			d[i] = cur[i] - prev[i]
		}
		var c uint64
		total, c = bits.Add64(total, d[i], 0)
		carry |= c
	}
	if total == 0 || carry != 0 {
		return 0, false
	}
	idle := d[cpuIdle] + d[cpuIOWait]
	return clamp01(float64(total-idle) / float64(total)), true
}

// setPSI sets a pressure file's avg10 signals (percent → fraction) and its
// stall shares (Δtotal µs ÷ interval µs), each only where the line exists in
// the reading(s) it needs.
func setPSI(snap *olc.Snapshot, prev, cur *psiReading, avg, share [2]olc.Signal, deltas bool, secs float64) {
	for i, pair := range [2][2]*psiLine{{&prev.some, &cur.some}, {&prev.full, &cur.full}} {
		p, c := pair[0], pair[1]
		if !c.ok {
			continue
		}
		snap.Set(avg[i], clamp01(c.avg10/100))
		if deltas && p.ok && c.total >= p.total {
			snap.Set(share[i], clamp01(float64(c.total-p.total)/(secs*1e6)))
		}
	}
}

// computeCgroup sets the cgroup signals. Deltas need both readings to come
// from the same resolution of the cgroup (a recreated cgroup restarts its
// counters) and counters that did not go backwards; otherwise the value is
// unavailable for this tick rather than a made-up 0.
func computeCgroup(snap *olc.Snapshot, prev, cur *cgroupReading, online int, deltas bool, secs float64) {
	if !cur.present {
		return
	}
	same := deltas && prev.present && prev.gen == cur.gen

	if cur.quotaOK && cur.quotaCPUs > 0 && same && prev.usageOK && cur.usageOK && cur.usageNs >= prev.usageNs {
		capCPUs := cur.quotaCPUs
		// A quota above the CPUs the cgroup may run on cannot be used: the
		// effective cpuset (or, when unknown, the online CPUs) bounds it.
		bound := cur.cpuset
		if bound <= 0 {
			bound = online
		}
		if bound > 0 && float64(bound) < capCPUs {
			capCPUs = float64(bound)
		}
		used := float64(cur.usageNs-prev.usageNs) / 1e9
		v := used / (secs * capCPUs)
		if v < 0 {
			v = 0
		}
		// CFS enforces the quota per period, and a tick is not aligned
		// with the periods: it can hold one period's quota more than its
		// own length allows (and a cpu.max.burst of up to one quota). Such
		// a reading means the cgroup ran at its quota, not a broken
		// source; discarding it would fail open exactly when the cgroup
		// is saturated.
		if v > 1 && cur.periodS > 0 && v <= 2+cur.periodS/secs {
			v = 1
		}
		snap.Set(olc.CgroupCPUUsageOfQuota, v)
		snap.CgroupQuotaCPUs = capCPUs
	}

	ps, cs := &prev.stat, &cur.stat
	if same && ps.periodsOK && ps.throttledOK && cs.periodsOK && cs.throttledOK &&
		cs.nrPeriods > ps.nrPeriods && cs.nrThrottled >= ps.nrThrottled {
		snap.Set(olc.CgroupThrottledRatio, clamp01(float64(cs.nrThrottled-ps.nrThrottled)/float64(cs.nrPeriods-ps.nrPeriods)))
	}
	if same && ps.throttledNsOK && cs.throttledNsOK && cs.throttledNs >= ps.throttledNs {
		snap.Set(olc.CgroupThrottledS, float64(cs.throttledNs-ps.throttledNs)/1e9)
		if cur.quotaOK && cur.periodS > 0 && ps.throttledOK && cs.throttledOK && cs.nrThrottled > ps.nrThrottled {
			perPeriod := float64(cs.throttledNs-ps.throttledNs) / 1e9 / float64(cs.nrThrottled-ps.nrThrottled)
			snap.CgroupThrottleGap = throttleGap(perPeriod, cur.quotaCPUs, cur.periodS)
		}
	}

	for res := range numPSIResources {
		pp := &prev.psi[res]
		if !same {
			pp = &noPSI
		}
		setPSI(snap, pp, &cur.psi[res], cgroupPSIAvg10[res], cgroupPSIShare[res], deltas, secs)
	}
}

// noPSI stands in for a previous reading that cannot be used.
var noPSI psiReading

func clamp01(v float64) float64 {
	switch {
	case v != v:
		return 0
	case v < 0:
		return 0
	case v > 1:
		return 1
	}
	return v
}

// throttleGap returns the wall time (seconds) a cgroup with a quota of q
// CPUs per CFS period of P seconds waited per throttled period, from the
// throttled time per throttled period sum (seconds). The kernel adds the
// throttled time of each CPU's run queue (kernel/sched/fair.c,
// unthrottle_cfs_rq: throttled_time += now − throttled_clock) but counts a
// throttled period once (nr_throttled, do_sched_cfs_period_timer), so sum
// is k × the wall gap for a cgroup throttled on k CPUs. A cgroup that
// spends its quota on k CPUs at once runs q × P ÷ k and waits
// g = P − q × P ÷ k on each (Documentation/scheduler/sched-bwc.rst): then
// sum = k × g = (k − q) × P, so k = (sum + q × P) ÷ P and
// g = sum × P ÷ (sum + q × P). The gap is at most sum (one CPU waited all
// of it: a period whose quota ran out late) and below P.
func throttleGap(sum, q, P float64) float64 {
	if sum <= 0 || q <= 0 || P <= 0 {
		return 0
	}
	return math.Min(sum, sum*P/(sum+q*P))
}
