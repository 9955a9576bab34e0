// Package pressure turns one snapshot's signals into the node's pressure:
// each signal with a threshold, whether its sample is usable, whether a
// signal that needs corroboration has it, and the largest pressure of the
// rest (docs/controller.md §3, docs/signals.md). internal/adaptive's
// resource law acts on the result.
package pressure

import (
	"math"

	"github.com/olcd/olcd/internal/olc"
)

// Signal is one signal with a threshold, as evaluated in one tick.
type Signal struct {
	// Signal is the canonical signal.
	Signal olc.Signal
	// Value is the sample in the signal's unit, as delivered: meaningful
	// when Available or Invalid (0 when the sampler had none).
	Value float64
	// Available is false when the sampler had no value or the value was an
	// invalid sample (not olc.Signal.Usable).
	Available bool
	// Invalid is true when a value was delivered but rejected as invalid.
	Invalid bool
	// Threshold is the configured threshold (> 0).
	Threshold float64
	// Pressure is Value ÷ Threshold; 0 when not Available.
	Pressure float64
	// Corroborated is false when a corroboration rule discounted the signal
	// this tick (docs/controller.md §3): then it does not count.
	Corroborated bool
}

// Node is the node's pressure in one tick.
type Node struct {
	// Signals lists every signal that has a threshold, in canonical order.
	Signals []Signal
	// Pressure is the largest pressure of the available, corroborated
	// signals (1 = at the threshold); meaningful only when Available.
	Pressure float64
	// Available is false when no signal with a threshold had a usable,
	// corroborated value.
	Available bool
	// Driver is the signal that set Pressure (when Available).
	Driver olc.Signal
}

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

// Evaluate returns the node's pressure in snapshot s for the thresholds
// (by signal, in each signal's unit; 0: unused): a signal that needs
// corroboration counts only when one of its confirmers shows at least ratio
// (0 < ratio ≤ 1) × its threshold, or its confirmRef without one. A stale
// snapshot makes every signal unavailable.
func Evaluate(s *olc.Snapshot, thresholds *[olc.NumSignals]float64, ratio float64, stale bool) Node {
	n := 0
	for _, t := range thresholds {
		if t > 0 {
			n++
		}
	}
	node := Node{Signals: make([]Signal, 0, n)}
	for i, t := range thresholds {
		if !(t > 0) { // 0: unused; NaN never counts
			continue
		}
		sig := olc.Signal(i)
		st := Signal{Signal: sig, Threshold: t}
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
		st.Corroborated = st.Available && (confirmers[sig] == nil || confirmed(s, thresholds, ratio, confirmers[sig]))
		if st.Corroborated && (!node.Available || st.Pressure > node.Pressure) {
			node.Pressure, node.Driver, node.Available = st.Pressure, sig, true
		}
		node.Signals = append(node.Signals, st)
	}
	return node
}

// confirmed reports whether one of sigs shows at least ratio × its
// threshold (or its confirmRef without one) in s.
func confirmed(s *olc.Snapshot, thresholds *[olc.NumSignals]float64, ratio float64, sigs []olc.Signal) bool {
	for _, sig := range sigs {
		ref := thresholds[sig]
		if ref <= 0 {
			ref = confirmRef[sig]
		}
		if v, ok := s.Get(sig); ok && sig.Usable(v) && v >= ratio*ref {
			return true
		}
	}
	return false
}
