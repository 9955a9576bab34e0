package resptime

import (
	"math"
	"testing"
	"time"
)

// TestBucketBounds: every bucket's range holds the durations Bucket puts
// in it, the ranges tile 0..68 s, and the middle is within 5 % of every
// value from 50 µs to 30 s.
func TestBucketBounds(t *testing.T) {
	prevHi := 0.0
	for b := 0; b < Buckets; b++ {
		lo, hi := Bounds(b)
		if math.Abs(lo-prevHi) > 1e-12 {
			t.Fatalf("bucket %d starts at %g, previous ended at %g", b, lo, prevHi)
		}
		prevHi = hi
	}
	for d := 50 * time.Microsecond; d <= 30*time.Second; d = d * 101 / 100 {
		b := Bucket(d)
		lo, hi := Bounds(b)
		s := d.Seconds()
		if s < lo-1.1e-6 || s >= hi+1e-9 {
			t.Fatalf("%s in bucket %d [%g, %g)", d, b, lo, hi)
		}
		if e := math.Abs(Value(b)-s) / s; e > 0.05 {
			t.Fatalf("%s reads as %g: %.1f %% off", d, Value(b), 100*e)
		}
	}
	if Bucket(time.Hour) != Buckets-1 || Bucket(-time.Second) != 0 {
		t.Errorf("out of range: %d %d", Bucket(time.Hour), Bucket(-time.Second))
	}
}

func TestQuantile(t *testing.T) {
	c := make([]uint64, Buckets)
	if _, ok := Quantile(c, 0.5); ok {
		t.Fatal("quantile of nothing is available")
	}
	for i := 1; i <= 100; i++ {
		c[Bucket(time.Duration(i)*time.Millisecond)]++
	}
	for _, tt := range []struct{ q, want float64 }{{0.5, 0.050}, {0.95, 0.095}, {0.99, 0.099}, {1, 0.100}} {
		got, _ := Quantile(c, tt.q)
		if math.Abs(got-tt.want)/tt.want > 0.05 {
			t.Errorf("q%.2f = %g, want %g ± 5 %%", tt.q, got, tt.want)
		}
	}
}

func TestFold(t *testing.T) {
	if len(LeBounds) > 30 {
		t.Fatalf("%d le-buckets, want at most 30", len(LeBounds))
	}
	c := make([]uint64, Buckets)
	c[Bucket(10*time.Microsecond)] = 1
	c[Bucket(20*time.Millisecond)] = 2
	c[Bucket(time.Minute)] = 3
	f := Fold(c)
	for i, le := range LeBounds {
		want := uint64(0)
		if le >= 10e-6 {
			want++
		}
		if le >= 20e-3 {
			want += 2
		}
		if f[i] != want {
			t.Errorf("le %g: %d, want %d", le, f[i], want)
		}
	}
}

// TestComputeUnavailable: too few samples is unavailable, never 0.
func TestComputeUnavailable(t *testing.T) {
	c := make([]uint64, Buckets)
	c[Bucket(5*time.Millisecond)] = 3
	p := Compute(c, 3, 2, 4, 500*time.Millisecond, 5)
	if p.Available || p.Samples != 3 {
		t.Errorf("3 samples under a minimum of 5: %+v", p)
	}
	if p.RequestsPerS != 24 || p.Inflight != 8 {
		t.Errorf("rates scaled by 1 in 4: requests/s %g inflight %g, want 24 8", p.RequestsPerS, p.Inflight)
	}
	p = Compute(c, 3, 0, 1, 500*time.Millisecond, 3)
	if !p.Available || math.Abs(p.P50-0.005)/0.005 > 0.05 {
		t.Errorf("3 samples at a minimum of 3: %+v", p)
	}
	if p = Compute(make([]uint64, Buckets), 0, 0, 1, time.Second, 1); p.Available {
		t.Errorf("no samples: %+v", p)
	}
}

// TestQuantileTightCluster: 100 responses all at 200.5 ms (a handler of
// known time) read within 5 % at every quantile, wherever the bucket's
// edges fall.
func TestQuantileTightCluster(t *testing.T) {
	for _, d := range []time.Duration{200500 * time.Microsecond, 50 * time.Microsecond, 20 * time.Millisecond, 29 * time.Second} {
		c := make([]uint64, Buckets)
		c[Bucket(d)] = 100
		for _, q := range []float64{0.5, 0.95, 0.99} {
			v, _ := Quantile(c, q)
			if e := math.Abs(v-d.Seconds()) / d.Seconds(); e > 0.05 {
				t.Errorf("%s q%.2f reads %.6f: %.1f %% off", d, q, v, 100*e)
			}
		}
	}
}

// TestAbove: the share of a histogram slower than t, against the exact
// share of the samples it was built from (within the bucket t falls in).
func TestAbove(t *testing.T) {
	if got := Above(make([]uint64, Buckets), 0.01); got != 0 {
		t.Errorf("empty: %g, want 0", got)
	}
	counts := make([]uint64, Buckets)
	var ds []time.Duration
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * 50 * time.Microsecond // 50 µs .. 50 ms, evenly
		ds = append(ds, d)
		counts[Bucket(d)]++
	}
	for _, tc := range []struct {
		t    float64
		want float64
	}{{0, 1}, {0.001, 0.98}, {0.0125, 0.75}, {0.025, 0.5}, {0.0475, 0.05}, {0.05, 0}, {1, 0}} {
		got := Above(counts, tc.t)
		_, hi := Bounds(Bucket(time.Duration(tc.t * 1e9)))
		lo, _ := Bounds(Bucket(time.Duration(tc.t * 1e9)))
		var inBucket int
		for _, d := range ds {
			if s := d.Seconds(); s >= lo && s < hi {
				inBucket++
			}
		}
		if tol := float64(inBucket)/float64(len(ds)) + 1e-9; math.Abs(got-tc.want) > tol {
			t.Errorf("Above(%g) = %.4f, want %.4f ± %.4f", tc.t, got, tc.want, tol)
		}
	}
}
