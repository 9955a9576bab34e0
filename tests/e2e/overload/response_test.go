package overload

import "testing"

// TestResponseAgree: Agree holds issue 15's line from the bucket's middle,
// AgreeBucket the same tolerance from the bucket's edges (9.44–9.96 ms
// around the 9.70 ms middle; 5 % or 0.5 ms).
func TestResponseAgree(t *testing.T) {
	for _, tc := range []struct {
		name          string
		client, olcd  float64 // p50 = p95, ms
		agree, bucket bool
	}{
		{"the same", 9.70, 9.70, true, true},
		{"0.45 ms above the middle", 10.15, 9.70, true, true},
		{"the fresh run's 0.65 ms above it, 0.39 ms above the bucket", 10.35, 9.70, false, true},
		{"0.6 ms above the bucket", 10.56, 9.70, false, false},
		{"0.6 ms below the bucket", 8.84, 9.70, false, false},
		{"200 ms: within 5 % of the middle", 201.0, 205.52, true, true},
		{"200 ms: 12 % above the middle", 230.0, 205.52, false, false},
	} {
		r := &ResponseResult{ClientP50Ms: tc.client, ClientP95Ms: tc.client, OlcdP50Ms: tc.olcd, OlcdP95Ms: tc.olcd}
		if got := r.Agree(); got != tc.agree {
			t.Errorf("%s: Agree %v, want %v", tc.name, got, tc.agree)
		}
		if got := r.AgreeBucket(); got != tc.bucket {
			t.Errorf("%s: AgreeBucket %v, want %v", tc.name, got, tc.bucket)
		}
	}
}
