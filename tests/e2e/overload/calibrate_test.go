package overload

import (
	"testing"
	"time"
)

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

// The step load stops at the first step that answered under half its rate
// within the SLO, once its answers are in, and never at its last step.
func TestStopPastCapacity(t *testing.T) {
	h := &Harness{opt: Options{SLO: 200 * time.Millisecond}}
	steps := []Phase{{"a", 100, 2 * time.Second}, {"b", 200, 2 * time.Second}, {"c", 300, 2 * time.Second}, {"d", 400, 2 * time.Second}}
	// good of every step's requests (rate × 2 s) answered within the SLO,
	// the rest late.
	records := func(good ...float64) *records {
		rec := &records{}
		var from time.Duration
		for i, st := range steps {
			n := int(st.Rate * st.Duration.Seconds())
			for k := range n {
				lat := 10 * time.Millisecond
				if i < len(good) && float64(k) >= good[i]*float64(n) {
					lat = 900 * time.Millisecond
				}
				rec.requests = append(rec.requests, request{start: from + time.Duration(k)*st.Duration/time.Duration(n), latency: lat, outcome: outcomeOK})
			}
			from += st.Duration
		}
		return rec
	}
	for _, c := range []struct {
		name string
		good []float64
		at   []time.Duration // the samples' times
		want int             // the step past capacity (-1: none), after the last sample
		stop time.Duration   // when the rule says stop (0: never)
	}{
		{"past at b", []float64{1, 0.4, 0, 0}, []time.Duration{2500 * time.Millisecond, 4500 * time.Millisecond, 5 * time.Second, 6 * time.Second}, 1, 5 * time.Second},
		{"half is not past", []float64{1, 0.5, 0.6, 0.2}, []time.Duration{3 * time.Second, 5 * time.Second, 7 * time.Second, 9 * time.Second}, -1, 0},
		{"never at the last step", []float64{1, 1, 1, 0}, []time.Duration{9 * time.Second, 10 * time.Second}, -1, 0},
	} {
		past := -1
		stop := h.stopPastCapacity(steps, time.Second, &past)
		rec := records(c.good...)
		var stopped time.Duration
		for _, el := range c.at {
			if stop(rec, el) {
				stopped = el
				break
			}
		}
		if past != c.want || stopped != c.stop {
			t.Errorf("%s: past %d, stopped at %v; want %d at %v", c.name, past, stopped, c.want, c.stop)
		}
	}
}
