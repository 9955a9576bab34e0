package overload

import (
	"strings"
	"testing"
)

// TestPrintTables: a phase without a single success shows its latencies as
// "-", not as 0 ms (which would read as perfect latency); one with
// successes shows them.
func TestPrintTables(t *testing.T) {
	r := &Report{CapacityRPS: 200, SLOMs: 200, Scenarios: []ScenarioResult{
		{Name: "overload-3x", RunResult: RunResult{Variant: VariantNone, Phases: []PhaseResult{
			{Name: "3x", OfferedRPS: 600, Requests: 600, Timeouts: 600},
		}}},
		{Name: "overload-3x", RunResult: RunResult{Variant: VariantEnforce, Phases: []PhaseResult{
			{Name: "3x", OfferedRPS: 600, GoodputRPS: 180, Requests: 600, Successes: 180, P50Ms: 6.5, P99Ms: 14.25},
		}}},
	}}
	var b strings.Builder
	r.PrintTables(&b)
	var none, enforce string
	for _, line := range strings.Split(b.String(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "none":
			none = line
		case len(f) > 1 && f[0] == "enforce":
			enforce = line
		}
	}
	if f := strings.Fields(none); len(f) < 7 || f[5] != "-" || f[6] != "-" {
		t.Errorf("no successes: row %q, want p50 and p99 as -", none)
	}
	if f := strings.Fields(enforce); len(f) < 7 || f[5] != "6.5" || f[6] != "14.2" {
		t.Errorf("with successes: row %q, want p50 6.5 and p99 14.2", enforce)
	}
	if !strings.Contains(b.String(), "timeouts count shed connections too") {
		t.Errorf("the header does not say what timeouts count:\n%s", b.String())
	}
}
