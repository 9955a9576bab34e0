package overload

import (
	"strings"
	"testing"
)

// TestPrintRepeats: each cell is min / median / max over the runs that
// have it, a figure a run did not measure (nil) left out.
func TestPrintRepeats(t *testing.T) {
	after := func(x float64) *float64 { return &x }
	run := func(g float64, a *float64) *Report {
		return &Report{Scenarios: []ScenarioResult{{Name: "cpu-open-giveup-3x", RunResult: RunResult{Variant: VariantEnforce,
			Summary: &Summary{CapacityRPS: 190, GoodputC: g, AfterServed: a, HealthOK: 10, HealthTotal: 10}}}}}
	}
	var b strings.Builder
	PrintRepeats(&b, []*Report{run(0.97, after(0.99)), run(0.91, nil), run(0.95, after(0.98))})
	out := b.String()
	for _, want := range []string{"cpu-open-giveup-3x", "enforce", " 3 ", "0.91/0.95/0.97", "0.98/0.99/0.99", "30/30"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}
