package overload

import "testing"

// The knee is the highest good step: bad steps below saturation are
// hiccups of the machine, not the capacity.
func TestFindKnee(t *testing.T) {
	good := func(rate float64) CalibrationStep {
		return CalibrationStep{RateRPS: rate, P99Ms: 12, GoodputRPS: rate, SuccessRatio: 1, CPUBusy: rate / 210}
	}
	slow := func(rate, p99 float64) CalibrationStep {
		st := good(rate)
		st.P99Ms = p99
		return st
	}
	for _, c := range []struct {
		name  string
		steps []CalibrationStep
		want  float64
	}{
		{"clean", []CalibrationStep{good(60), good(100), good(150), good(200), slow(210, 75), slow(220, 250)}, 200},
		{"hiccup below the knee", []CalibrationStep{good(60), good(100), slow(150, 45), good(160), good(200), slow(210, 75), slow(220, 250)}, 200},
		{"two hiccups in a row", []CalibrationStep{good(60), good(100), slow(150, 80), slow(160, 121), good(170), good(180), slow(190, 104), slow(200, 289)}, 180},
		{"bad last step", []CalibrationStep{good(60), good(100), good(150), slow(160, 80)}, 150},
		{"timeouts count as bad", []CalibrationStep{good(60), good(100), {RateRPS: 150, P99Ms: 12, GoodputRPS: 150, SuccessRatio: 0.9}, slow(160, 90)}, 100},
	} {
		cal := &Calibration{ThresholdFactor: 1, Steps: c.steps}
		if err := cal.findKnee(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cal.CapacityRPS != c.want {
			t.Errorf("%s: C = %.0f, want %.0f", c.name, cal.CapacityRPS, c.want)
		}
		if want := min(c.want/210, MaxThreshold); cal.Threshold != want {
			t.Errorf("%s: threshold %.3f, want %.3f", c.name, cal.Threshold, want)
		}
	}
	cal := &Calibration{Steps: []CalibrationStep{slow(60, 50), slow(100, 80)}}
	cal.Steps[0].P99Ms, cal.Steps[0].SuccessRatio = 12, 0.5
	if err := cal.findKnee(); err == nil {
		t.Errorf("no good step: C = %.0f, want an error", cal.CapacityRPS)
	}
}
