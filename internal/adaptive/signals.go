package adaptive

import (
	"math"

	"github.com/olcd/olcd/internal/olc"
)

// Signals → pressure: which signals need corroboration, and the node's
// pressure (docs/controller.md §3, docs/signals.md).

// confirmers lists the signals that confirm one that counts only when
// confirmed: a CPU signal the load and the run queue, which grow on an idle
// CPU waiting on I/O; the cgroup's CPU usage or PSI its throttling, which
// bursty threads see while using a small part of their quota.
var confirmers = func() map[olc.Signal][]olc.Signal {
	cpu := []olc.Signal{olc.CPUBusy, olc.PSICPUSomeAvg10, olc.PSICPUSome}
	cgroup := []olc.Signal{olc.CgroupCPUUsageOfQuota, olc.CgroupPSICPUSomeAvg10, olc.CgroupPSICPUSome}
	return map[olc.Signal][]olc.Signal{olc.Load1: cpu, olc.Load1PerCore: cpu, olc.Runnable: cpu, olc.RunqPerCore: cpu,
		olc.CgroupThrottledRatio: cgroup, olc.CgroupThrottledS: cgroup}
}()

// confirmRef is the reference a confirming signal without a threshold of
// its own is compared with (docs/controller.md §3).
var confirmRef = map[olc.Signal]float64{olc.CPUBusy: 0.8, olc.CgroupCPUUsageOfQuota: 0.9,
	olc.PSICPUSomeAvg10: 0.2, olc.PSICPUSome: 0.2, olc.CgroupPSICPUSomeAvg10: 0.2, olc.CgroupPSICPUSome: 0.2}

// confirmed reports whether one of sigs shows at least CorroborationRatio ×
// its threshold (or its confirmRef without one) in s.
func (c *Controller) confirmed(s *olc.Snapshot, sigs []olc.Signal) bool {
	for _, sig := range sigs {
		v, ok := s.Get(sig)
		if !ok || !sig.Usable(v) {
			continue
		}
		ref := c.cfg.Thresholds[sig]
		if ref <= 0 {
			ref = confirmRef[sig]
		}
		if v >= c.cfg.Params.CorroborationRatio*ref {
			return true
		}
	}
	return false
}

// evaluate fills d's signals and node pressure from s: every signal with a
// threshold, its usability, pressure and corroboration, and the driver. A
// stale snapshot makes every signal unavailable.
func (c *Controller) evaluate(s *olc.Snapshot, stale bool, d *Decision) {
	d.Signals = make([]SignalState, 0, olc.NumSignals)
	for i, t := range c.cfg.Thresholds {
		if t <= 0 {
			continue
		}
		sig := olc.Signal(i)
		st := SignalState{Signal: sig, Threshold: t}
		if v, ok := s.Get(sig); ok && !stale {
			st.Value = v
			// A value whose pressure overflows (1e308 from a corrupt
			// source) is as invalid as +Inf.
			if pr := v / t; sig.Usable(v) && !math.IsInf(pr, 0) {
				st.Available, st.Pressure = true, pr
			} else {
				st.Invalid = true
			}
		}
		st.Corroborated = st.Available && (confirmers[sig] == nil || c.confirmed(s, confirmers[sig]))
		if st.Corroborated && (!d.PressureAvailable || st.Pressure > d.Pressure) {
			d.Pressure, d.Driver, d.PressureAvailable = st.Pressure, sig, true
		}
		d.Signals = append(d.Signals, st)
	}
}
