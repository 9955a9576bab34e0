package overload

import (
	"math"
	"slices"
	"time"
)

// PhaseResult is one phase of one run, as results.json carries it.
type PhaseResult struct {
	// Name is the phase's name ("3x").
	Name string `json:"name"`
	// DurationS is the phase's length in seconds.
	DurationS float64 `json:"duration_s"`
	// OfferedRPS is requests started per second.
	OfferedRPS float64 `json:"offered_rps"`
	// GoodputRPS is requests per second answered 200 within the SLO.
	GoodputRPS float64 `json:"goodput_rps"`
	// P50Ms and P99Ms are latency percentiles of the successes (200 within
	// the timeout), in milliseconds; 0 without successes.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// Errors counts failures other than timeouts: HTTP statuses other than
	// 200 (the in-app limiter's 429s), refused and reset connections.
	Errors int `json:"errors"`
	// Timeouts counts requests with no answer within the timeout.
	Timeouts int `json:"timeouts"`
	// SYNDropRatio is SYNs dropped ÷ SYNs seen at the work port (olcd's or
	// nftables' counters; 0 where nothing drops).
	SYNDropRatio float64 `json:"syn_drop_ratio"`
	// CPUBusy is the backend cgroup's CPU use as a share of its quota (0..1).
	CPUBusy float64 `json:"cpu_busy"`

	// Requests and Successes count the phase's work requests.
	Requests  int `json:"requests"`
	Successes int `json:"successes"`
	// Rejected counts HTTP 429 answers (in-app limiter), part of Errors.
	Rejected int `json:"rejected"`
	// ConnectTimeouts counts connects that timed out (dropped SYNs, full
	// accept queues), part of Timeouts.
	ConnectTimeouts int `json:"connect_timeouts"`
	// WouldDropRatio is olcd's would-drop ÷ SYNs seen (observe mode).
	WouldDropRatio float64 `json:"would_drop_ratio"`
	// MeanP is olcd's mean drop probability over the phase.
	MeanP float64 `json:"mean_drop_probability"`
	// HealthOK and HealthTotal count the health checks of the phase.
	HealthOK    int `json:"health_ok"`
	HealthTotal int `json:"health_total"`
	// Settled is the same phase without its first SettleTime, when the
	// phase is at least twice as long: what holds once a protection has
	// reacted to the change that started the phase.
	Settled *PhaseResult `json:"settled,omitempty"`
}

// SettleTime is the start of a phase left out of its Settled figures: the
// reaction time of a protection to a step (olcd: activation, the first
// cuts, draining the work admitted meanwhile; docs/controller.md).
const SettleTime = 5 * time.Second

// SecondPoint is one second of a run's time series.
type SecondPoint struct {
	// T is the second's start since the load began, in seconds.
	T float64 `json:"t_s"`
	// Offered, Admitted (connections established) and Goodput are per
	// second.
	Offered  float64 `json:"offered_rps"`
	Admitted float64 `json:"admitted_rps"`
	Goodput  float64 `json:"goodput_rps"`
	// P is olcd's drop probability (NaN when olcd does not run).
	P float64 `json:"-"`
	// CPU is the backend's CPU as a share of its quota.
	CPU float64 `json:"cpu_busy"`
}

// RunResult is one scenario under one variant.
type RunResult struct {
	// Scenario and Variant name the run.
	Scenario string  `json:"-"`
	Variant  Variant `json:"variant"`
	// Phases are the per-phase results.
	Phases []PhaseResult `json:"phases"`
	// Series is the per-second time series.
	Series []SecondPoint `json:"-"`
	// KilledAt is when olcd was killed (0: not killed), since the start.
	KilledAt time.Duration `json:"-"`
	// Dials are the work connects, for the fail-open check.
	Dials []DialRecord `json:"-"`
	// Plot, OlcdLog and DecisionLog are files of the run.
	Plot        string `json:"plot"`
	OlcdLog     string `json:"olcd_log,omitempty"`
	DecisionLog string `json:"decision_log,omitempty"`
}

// DialRecord is one work connect.
type DialRecord struct {
	// Start is since the load began; Duration how long the connect took.
	Start, Duration time.Duration
	// Outcome is "ok", "timeout" or "error".
	Outcome string
}

// Phase returns the phase named name, or the zero PhaseResult.
func (r *RunResult) Phase(name string) PhaseResult {
	for _, p := range r.Phases {
		if p.Name == name {
			return p
		}
	}
	return PhaseResult{}
}

// analyse turns a run's records into its results.
func analyse(rec *records, sc Scenario, v Variant, opt Options, cal *Calibration) *RunResult {
	res := &RunResult{Scenario: sc.Name, Variant: v, KilledAt: rec.killedAt}
	for _, d := range rec.dials {
		res.Dials = append(res.Dials, DialRecord{Start: d.start, Duration: d.dur, Outcome: d.outcome})
	}
	var from time.Duration
	for _, ph := range rec.phases {
		to := from + ph.Duration
		pr := phaseResult(rec, ph.Name, from, to, opt.SLO, v)
		if ph.Duration >= 2*SettleTime {
			st := phaseResult(rec, ph.Name+" settled", from+SettleTime, to, opt.SLO, v)
			pr.Settled = &st
		}
		res.Phases = append(res.Phases, pr)
		from = to
	}
	res.Series = series(rec, from, opt.SLO)
	return res
}

// phaseResult computes one phase over requests started in [from, to).
func phaseResult(rec *records, name string, from, to, slo time.Duration, v Variant) PhaseResult {
	pr := PhaseResult{Name: name}
	var lat []float64
	var good int
	for _, r := range rec.requests {
		if r.start < from || r.start >= to {
			continue
		}
		if r.health {
			pr.HealthTotal++
			if r.outcome == outcomeOK {
				pr.HealthOK++
			}
			continue
		}
		pr.Requests++
		switch {
		case r.outcome == outcomeOK:
			pr.Successes++
			lat = append(lat, float64(r.latency)/float64(time.Millisecond))
			if r.latency <= slo {
				good++
			}
		case r.outcome == outcomeTimeout:
			pr.Timeouts++
		default:
			pr.Errors++
			if r.outcome == "http429" {
				pr.Rejected++
			}
		}
	}
	for _, d := range rec.dials {
		if d.start >= from && d.start < to && d.outcome == outcomeTimeout {
			pr.ConnectTimeouts++
		}
	}
	secs := (to - from).Seconds()
	pr.DurationS = secs
	pr.OfferedRPS = float64(pr.Requests) / secs
	pr.GoodputRPS = float64(good) / secs
	slices.Sort(lat)
	pr.P50Ms, pr.P99Ms = percentile(lat, 0.50), percentile(lat, 0.99)

	a, b := sampleAt(rec.samples, from), sampleAt(rec.samples, to)
	switch v {
	case VariantObserve, VariantEnforce:
		if a.olcd && b.olcd && b.newConns > a.newConns {
			n := float64(b.newConns - a.newConns)
			pr.SYNDropRatio = float64(b.dropped-a.dropped) / n
			pr.WouldDropRatio = float64(b.would-a.would) / n
		}
	case VariantStatic:
		if b.nftSeen > a.nftSeen {
			pr.SYNDropRatio = float64(b.nftDrop-a.nftDrop) / float64(b.nftSeen-a.nftSeen)
		}
	}
	var busy, pSum float64
	var nBusy, nP int
	for i := 1; i < len(rec.samples); i++ {
		s0, s1 := rec.samples[i-1], rec.samples[i]
		mid := (s0.t + s1.t) / 2
		if mid < from || mid >= to {
			continue
		}
		if b, ok := busyBetween(s0, s1); ok {
			busy += b
			nBusy++
		}
		if s1.olcd {
			pSum += s1.p
			nP++
		}
	}
	if nBusy > 0 {
		pr.CPUBusy = busy / float64(nBusy)
	}
	if nP > 0 {
		pr.MeanP = pSum / float64(nP)
	}
	return pr
}

// busyBetween is the backend's CPU between two samples as a share of the
// quota in force at the later one; false for samples too close to tell.
func busyBetween(s0, s1 sample) (float64, bool) {
	dt := (s1.t - s0.t).Seconds()
	if dt <= 0.1 || s1.quota <= 0 {
		return 0, false
	}
	return (s1.usage - s0.usage).Seconds() / dt / s1.quota, true
}

// sampleAt returns the sample nearest to t.
func sampleAt(s []sample, t time.Duration) sample {
	if len(s) == 0 {
		return sample{}
	}
	best := s[0]
	for _, x := range s[1:] {
		if absDur(x.t-t) < absDur(best.t-t) {
			best = x
		}
	}
	return best
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// percentile returns the q-quantile of sorted xs (nearest rank), 0 if empty.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// series bins the run per second of [0, total).
func series(rec *records, total, slo time.Duration) []SecondPoint {
	n := int(math.Ceil(total.Seconds()))
	pts := make([]SecondPoint, n)
	for i := range pts {
		pts[i] = SecondPoint{T: float64(i), P: math.NaN(), CPU: math.NaN()}
	}
	bin := func(t time.Duration) int {
		if t < 0 {
			return -1
		}
		if i := int(t / time.Second); i < n {
			return i
		}
		return -1
	}
	for _, r := range rec.requests {
		i := bin(r.start)
		if r.health || i < 0 {
			continue
		}
		pts[i].Offered++
		if r.outcome == outcomeOK && r.latency <= slo {
			pts[i].Goodput++
		}
	}
	for _, d := range rec.dials {
		if i := bin(d.start + d.dur); i >= 0 && d.outcome == outcomeOK {
			pts[i].Admitted++
		}
	}
	cpuSum, cpuN := make([]float64, n), make([]int, n)
	pSum, pN := make([]float64, n), make([]int, n)
	for i := 1; i < len(rec.samples); i++ {
		s0, s1 := rec.samples[i-1], rec.samples[i]
		j := bin((s0.t + s1.t) / 2)
		if j < 0 {
			continue
		}
		if b, ok := busyBetween(s0, s1); ok {
			cpuSum[j] += b
			cpuN[j]++
		}
		if s1.olcd {
			pSum[j] += s1.p
			pN[j]++
		}
	}
	for i := range pts {
		if cpuN[i] > 0 {
			pts[i].CPU = cpuSum[i] / float64(cpuN[i])
		}
		if pN[i] > 0 {
			pts[i].P = pSum[i] / float64(pN[i])
		}
	}
	return pts
}

// FailOpen checks the fail-open claim of a run in which olcd was killed:
// connects that started before the kill timed out (SYNs were being
// dropped), and none that started from within after the kill on did.
// It returns the connect timeouts before (in the 3 s before the kill) and
// after (from KilledAt+within to KilledAt+within+3 s), and the latest start
// of a timed-out connect after the kill.
func (r *RunResult) FailOpen(within time.Duration) (before, after int, lastTimeout time.Duration) {
	k := r.KilledAt
	for _, d := range r.Dials {
		if d.Outcome != outcomeTimeout {
			continue
		}
		switch {
		case d.Start >= k-3*time.Second && d.Start < k:
			before++
		case d.Start >= k+within && d.Start < k+within+3*time.Second:
			after++
		}
		if d.Start >= k && d.Start > lastTimeout {
			lastTimeout = d.Start
		}
	}
	return before, after, lastTimeout
}
