// Package resptime turns the datapath's response-time histograms into
// signals: the geometry of its log-linear buckets (bpf/olcd.h, enum
// olcd_resp_geometry), quantiles of a tick's delta, and the fold into the
// few le-buckets of a Prometheus histogram. Pure: no kernel, any OS.
//
// A bucket is read as its middle, which is within 3.2 % of every value in
// it from 16 units (16.4 µs) up, so p50/p95/p99 are within 5 % of the
// truth (counting the 1.024 µs unit) from 50 µs to 68 s. Above that
// everything is in the last bucket, reported as its lower bound.
package resptime

import (
	"math"
	"slices"
	"time"
)

// Geometry, the same numbers as enum olcd_resp_geometry (the loader's
// tests check that they agree).
const (
	// UnitShift: values are timed in units of 2^UnitShift ns (1.024 µs).
	UnitShift = 10
	// SubBits: each power of two is cut in 2^SubBits buckets.
	SubBits = 4
	// MaxLog2: values up to 2^MaxLog2 units (68.7 s) are resolved.
	MaxLog2 = 26
	// Buckets is the number of buckets.
	Buckets = (MaxLog2 - SubBits + 1) << SubBits
)

const sub = 1 << SubBits

// Bucket returns the bucket of a duration, as the datapath computes it.
func Bucket(d time.Duration) int {
	if d < 0 {
		d = 0
	}
	v := uint64(d) >> UnitShift
	if v < sub {
		return int(v)
	}
	if v >= 1<<MaxLog2 {
		return Buckets - 1
	}
	e := 63 - leadingZeros(v)
	return (e-SubBits+1)<<SubBits + int(v>>(e-SubBits))&(sub-1)
}

func leadingZeros(v uint64) int {
	n := 0
	for i := 63; i >= 0 && v>>uint(i)&1 == 0; i-- {
		n++
	}
	return n
}

// Bounds returns the range [lo, hi) of bucket b in seconds; the last
// bucket's hi is +Inf.
func Bounds(b int) (lo, hi float64) {
	unit := float64(uint64(1)<<UnitShift) / 1e9
	if b < sub {
		return float64(b) * unit, float64(b+1) * unit
	}
	e := b>>SubBits + SubBits - 1
	m := b & (sub - 1)
	w := float64(uint64(1) << uint(e-SubBits))
	lo = float64(uint64(sub+m)<<uint(e-SubBits)) * unit
	if b == Buckets-1 {
		return lo, math.Inf(1)
	}
	return lo, lo + w*unit
}

// Value is what bucket b reads as, in seconds: its middle (the last
// bucket: its lower bound).
func Value(b int) float64 {
	lo, hi := Bounds(b)
	if math.IsInf(hi, 1) {
		return lo
	}
	return (lo + hi) / 2
}

// Quantile returns the q-quantile (0 < q ≤ 1) of the histogram counts in
// seconds, and false when counts is empty. The rank is ceil(q × n): the
// nearest-rank definition, so that p99 of 100 samples is the 99th. The
// value is that sample's bucket read at its middle (Value), which keeps the
// error within 3.2 % of the bucket's values wherever they lie in it;
// interpolating within the bucket, as Prometheus' histogram_quantile does,
// reads a tight cluster near an edge up to a whole bucket (6.25 %) off.
func Quantile(counts []uint64, q float64) (float64, bool) {
	var n uint64
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen uint64
	for b, c := range counts {
		seen += c
		if seen >= rank {
			return Value(b), true
		}
	}
	return Value(len(counts) - 1), true
}

// Above returns the share (0..1) of the histogram counts slower than t
// seconds, the bucket holding t counted in proportion to its part above t
// (0 when counts is empty): the share of answers past a target, which a p95
// at the target puts at 0.05.
func Above(counts []uint64, t float64) float64 {
	var n, above float64
	for b, c := range counts {
		if c == 0 {
			continue
		}
		n += float64(c)
		switch lo, hi := Bounds(b); {
		case lo >= t:
			above += float64(c)
		case hi > t && !math.IsInf(hi, 1):
			above += float64(c) * (hi - t) / (hi - lo)
		}
	}
	if n == 0 {
		return 0
	}
	return above / n
}

// Sum returns the estimated sum of the values in counts (seconds), each
// bucket counted at Value.
func Sum(counts []uint64) float64 {
	var s float64
	for b, c := range counts {
		if c != 0 {
			s += float64(c) * Value(b)
		}
	}
	return s
}

// LeBounds are the upper bounds (seconds) of the Prometheus histogram's
// buckets: every power of two of the unit from 2^5 (32.8 µs) to 2^25
// (34.4 s), 21 of them plus +Inf. Each is a bucket boundary of the
// datapath's, so the fold is exact.
var LeBounds = func() []float64 {
	var out []float64
	for e := 5; e <= 25; e++ {
		out = append(out, float64(uint64(1)<<uint(e+UnitShift))/1e9)
	}
	return out
}()

// Fold returns the cumulative counts of counts at each of LeBounds
// (len(LeBounds) values; +Inf is the total).
func Fold(counts []uint64) []uint64 {
	out := make([]uint64, len(LeBounds))
	var cum uint64
	i := 0
	for b, c := range counts {
		_, hi := Bounds(b)
		for i < len(LeBounds) && hi > LeBounds[i]*(1+1e-9) {
			out[i] = cum
			i++
		}
		cum += c
	}
	for ; i < len(LeBounds); i++ {
		out[i] = cum
	}
	return out
}

// Port is one port's response time over one tick.
type Port struct {
	// Samples is the number of timed responses in the tick (sampled flows
	// only, not scaled).
	Samples uint64
	// Available is false when Samples is below the minimum: P50, P95 and
	// P99 are then meaningless and reported as unavailable, never 0.
	Available bool
	// P50, P95, P99 are the quantiles in seconds.
	P50, P95, P99 float64
	// RequestsPerS is the rate of timed requests, scaled by the sample
	// rate (1/s).
	RequestsPerS float64
	// Inflight is the number of requests outstanding at the end of the
	// tick, scaled by the sample rate (requests).
	Inflight float64
	// Hist is the tick's histogram (Buckets counts, sampled flows only;
	// nil when not Available).
	Hist []uint64
}

// Compute returns a port's signals from the tick's histogram delta, its
// request delta, the requests outstanding (sampled), the sample rate (1 in
// sample), the tick's length and the minimum number of samples.
func Compute(delta []uint64, requests uint64, outstanding int64, sample uint32, interval time.Duration, minSamples uint64) Port {
	var p Port
	for _, c := range delta {
		p.Samples += c
	}
	scale := float64(max(sample, 1))
	if interval > 0 {
		p.RequestsPerS = float64(requests) * scale / interval.Seconds()
	}
	p.Inflight = float64(max(outstanding, 0)) * scale
	if p.Samples == 0 || p.Samples < minSamples {
		return p
	}
	p.Available, p.Hist = true, slices.Clone(delta)
	p.P50, _ = Quantile(delta, 0.50)
	p.P95, _ = Quantile(delta, 0.95)
	p.P99, _ = Quantile(delta, 0.99)
	return p
}
