package overload

import "testing"

// TestResponseAgree: Agree holds issue 15's line from the bucket's middle,
// AgreeBucket the same tolerance from the bucket's edges (9.44–9.96 ms
// around the 9.70 ms middle; 5 % or 0.5 ms), plus above them the clients'
// own noise, the connects' round trip over the fastest (0.15 ms).
func TestResponseAgree(t *testing.T) {
	for _, tc := range []struct {
		name          string
		client, olcd  float64 // p50 = p95, ms
		dial          float64 // the connects' p50 = p95, ms (0: none)
		agree, bucket bool
	}{
		{"the same", 9.70, 9.70, 0, true, true},
		{"0.45 ms above the middle", 10.15, 9.70, 0, true, true},
		{"the fresh run's 0.65 ms above it, 0.39 ms above the bucket", 10.35, 9.70, 0, false, true},
		{"0.6 ms above the bucket", 10.56, 9.70, 0, false, false},
		{"0.6 ms below the bucket", 8.84, 9.70, 0, false, false},
		{"200 ms: within 5 % of the middle", 201.0, 205.52, 0, true, true},
		{"200 ms: 12 % above the middle", 230.0, 205.52, 0, false, false},
		{"0.6 ms above the bucket, connects 0.2 ms over the fastest", 10.56, 9.70, 0.35, false, true},
		{"0.6 ms below the bucket, connects 0.2 ms over the fastest", 8.84, 9.70, 0.35, false, false},
		{"0.9 ms above the bucket, connects 0.2 ms over the fastest", 10.86, 9.70, 0.35, false, false},
		{"connects faster than the fastest read as none", 10.56, 9.70, 0.10, false, false},
		{"a noisy minute in CI: 4.97 against 4.33, connects 1.48 ms over the fastest", 4.97, 4.33, 1.63, false, true},
		{"the same without the connects' noise", 4.97, 4.33, 0, false, false},
	} {
		r := &ResponseResult{ClientP50Ms: tc.client, ClientP95Ms: tc.client, OlcdP50Ms: tc.olcd, OlcdP95Ms: tc.olcd}
		if tc.dial > 0 {
			r.RTTMs, r.DialP50Ms, r.DialP95Ms = 0.15, tc.dial, tc.dial
		}
		if got := r.Agree(); got != tc.agree {
			t.Errorf("%s: Agree %v, want %v", tc.name, got, tc.agree)
		}
		if got := r.AgreeBucket(); got != tc.bucket {
			t.Errorf("%s: AgreeBucket %v, want %v", tc.name, got, tc.bucket)
		}
	}
}
