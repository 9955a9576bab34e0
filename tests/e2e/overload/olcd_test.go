package overload

import (
	"slices"
	"testing"
)

// TestOlcdSettingsFor: what each variant changes in olcd's config, with
// and without the law on the measured queue.
func TestOlcdSettingsFor(t *testing.T) {
	cal := &Calibration{Threshold: 0.9, ResponseThreshold: 0.012}
	cpu := "cgroup_cpu_usage_of_quota: {threshold: 0.900}"
	rt := "response_time_p95: {threshold: 0.0120}"
	for _, tc := range []struct {
		name      string
		targetLaw bool
		target    string
		v         Variant
		want      olcdSettings
	}{
		{"enforce, threshold law", false, "", VariantEnforce, olcdSettings{Mode: "enforce", Signals: []string{rt, cpu}}},
		{"observe, threshold law", false, "", VariantObserve, olcdSettings{Mode: "observe", Signals: []string{rt, cpu}}},
		{"reject, threshold law", false, "", VariantEnforceReject, olcdSettings{Mode: "enforce", Signals: []string{rt, cpu}, Action: "reject"}},
		{"cpu only, threshold law", false, "", VariantEnforceCPU, olcdSettings{Mode: "enforce", Signals: []string{cpu}}},
		{"enforce, target law, default target", true, "", VariantEnforce, olcdSettings{Mode: "enforce"}},
		{"enforce, target law, knee target", true, "knee", VariantEnforce, olcdSettings{Mode: "enforce", Controller: []string{"response_target: 0.0120"}}},
		{"reject, target law", true, "", VariantEnforceReject, olcdSettings{Mode: "enforce", Action: "reject"}},
		{"cpu only, target law", true, "knee", VariantEnforceCPU, olcdSettings{Mode: "enforce", Signals: []string{cpu}, Controller: []string{"response_target: off"}}},
	} {
		h := &Harness{targetLaw: tc.targetLaw, opt: Options{ResponseTarget: tc.target}}
		got := h.olcdSettingsFor(tc.v, cal)
		if got.Mode != tc.want.Mode || got.Action != tc.want.Action || !slices.Equal(got.Signals, tc.want.Signals) || !slices.Equal(got.Controller, tc.want.Controller) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
