package adaptive

import (
	"math"

	"github.com/olcd/olcd/internal/olc"
)

// Signals → pressure: which samples are usable and which signals need
// corroboration (docs/controller.md §1).

// maxValidFraction is the largest value a fraction signal may take before the
// sample is treated as invalid: accounting jitter pushes honest readings a
// few percent above 1, anything beyond is a broken source.
const maxValidFraction = 1.05

// validSample reports whether v is a usable value of sig: finite, not
// negative, and for fractions not above maxValidFraction.
func validSample(sig olc.Signal, v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return false
	}
	return !sig.IsFraction() || v <= maxValidFraction
}

// confirmed reports whether one of sigs shows at least ratio × its threshold
// (or its confirmThreshold when it has none) in s.
func (c *Controller) confirmed(s *olc.Snapshot, sigs []olc.Signal) bool {
	for _, sig := range sigs {
		v, ok := s.Get(sig)
		if !ok || !validSample(sig, v) {
			continue
		}
		ref := c.cfg.Thresholds[sig]
		if ref <= 0 {
			ref = confirmThreshold(sig)
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
	d.Signals = make([]SignalState, len(c.signals))
	var cpuOK, cgroupOK, cpuDone, cgroupDone bool
	for i, sig := range c.signals {
		st := SignalState{Signal: sig, Threshold: c.cfg.Thresholds[sig]}
		if v, ok := s.Get(sig); ok && !stale {
			st.Value = v
			// A value so large that its pressure overflows (1e308 from a
			// corrupt source) is as invalid as +Inf: an infinite pressure
			// would turn the smoothed pressure into NaN and freeze p.
			if pr := v / st.Threshold; validSample(sig, v) && !math.IsInf(pr, 0) {
				st.Available = true
				st.Pressure = pr
			} else {
				st.Invalid = true
			}
		}
		st.Corroborated = st.Available
		switch {
		case st.Available && needsCPUConfirmation(sig):
			if !cpuDone {
				cpuOK, cpuDone = c.confirmed(s, cpuConfirmers), true
			}
			st.Corroborated = cpuOK
		case st.Available && needsCgroupConfirmation(sig):
			if !cgroupDone {
				cgroupOK, cgroupDone = c.confirmed(s, cgroupConfirmers), true
			}
			st.Corroborated = cgroupOK
		}
		if st.Corroborated && (!d.PressureAvailable || st.Pressure > d.Pressure) {
			d.Pressure, d.Driver, d.PressureAvailable = st.Pressure, sig, true
		}
		d.Signals[i] = st
	}
}
