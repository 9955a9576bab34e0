package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/olcd/olcd/tests/e2e/overload"
)

// TestOverloadResponseTime: the response times olcd measures in the
// datapath (first request byte in, first answer byte out, per protected
// port) against the clients' (vegeta latencies of the successes minus one
// round trip, the run's fastest connect: the clients keep their
// connections alive): backends whose
// handler takes 1, 20 and 200 ms, and the 5 ms CPU backend at 0.5 C and at
// 3 C without protection (olcd observing; the run TestOverload3x reads as
// its unprotected one, made once for both). Issue 15's line: p50 and p95
// agree within 5 % or 0.5 ms, whichever is larger (a miss is logged); the
// test fails when the clients' figure lies farther than that outside the
// histogram bucket olcd read (fresh machine: client p50 10.35 ms against
// the bucket 9.44–9.96 ms at 0.5 C, 0.65 ms from its middle), or above it
// by more than that plus the clients' own noise, their connects' round
// trip over the fastest at the same quantile (a CI minute read a p95 of
// 4.97 ms against olcd's 4.33 with its connects 1.48 ms over). The table
// goes to the log and to response-time.json in the suite's output
// directory.
func TestOverloadResponseTime(t *testing.T) {
	h := overloadHarness(t)
	checks := []overload.ResponseCheck{
		{Name: "sleep-1ms", Sleep: time.Millisecond, Rate: 50, Duration: 10 * time.Second},
		{Name: "sleep-20ms", Sleep: 20 * time.Millisecond, Rate: 50, Duration: 10 * time.Second},
		{Name: "sleep-200ms", Sleep: 200 * time.Millisecond, Rate: 20, Duration: 10 * time.Second},
		{Name: "work-0.5x", Load: 0.5, Duration: 10 * time.Second},
		unprotected3x,
	}
	var results []*overload.ResponseResult
	// failed repeats each failure at the end, where a CI log's tail shows it.
	var failed []string
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		failed = append(failed, msg)
		t.Error(msg)
	}
	defer func() {
		for _, f := range failed {
			t.Logf("FAILED: %s", f)
		}
	}()
	for _, rc := range checks {
		r := responseOnce(t, h, rc)
		results = append(results, r)
		t.Logf("%-20s %5.0f/s  ok %5d timeouts %5d  rtt %.3f ms (fastest of %d connects; p50 %.3f p95 %.3f)  client p50 %8.2f p95 %8.2f ms  olcd p50 %8.2f p95 %8.2f ms (%d samples)",
			r.Name, r.RateRPS, r.Successes, r.Timeouts, r.RTTMs, r.Dials, r.DialP50Ms, r.DialP95Ms, r.ClientP50Ms, r.ClientP95Ms, r.OlcdP50Ms, r.OlcdP95Ms, r.OlcdSamples)
		if r.Successes < 50 || r.OlcdSamples < 50 {
			fail("%s: %d successes, %d timed by olcd: too few to compare", r.Name, r.Successes, r.OlcdSamples)
		}
		switch {
		case !r.AgreeBucket():
			fail("%s: client p50 %.2f p95 %.2f ms, olcd p50 %.2f p95 %.2f ms: more than 5 %% or 0.5 ms outside olcd's bucket (above it, beyond the connects' noise too)",
				r.Name, r.ClientP50Ms, r.ClientP95Ms, r.OlcdP50Ms, r.OlcdP95Ms)
		case !r.Agree():
			t.Logf("GOAL MISSED: %s: client p50 %.2f p95 %.2f ms, olcd p50 %.2f p95 %.2f ms (bucket middles): more than 5 %% or 0.5 ms apart, within that of the bucket",
				r.Name, r.ClientP50Ms, r.ClientP95Ms, r.OlcdP50Ms, r.OlcdP95Ms)
		}
	}
	if b, err := json.MarshalIndent(results, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(ov.out, "response-time.json"), b, 0o644)
	}
}

// unprotected3x is the response check at 3 C without protection (olcd
// observing), which TestOverload3x reads as the unprotected run of its
// scenario.
var unprotected3x = overload.ResponseCheck{Name: "work-3x-unprotected", Load: 3, Duration: 10 * time.Second}
