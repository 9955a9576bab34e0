package overload

import (
	"fmt"
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
	// P50Ms, P95Ms and P99Ms are latency percentiles of the successes (200
	// within the timeout), in milliseconds; 0 without successes.
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
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
	// ConnectRefused counts connects that failed at once with
	// ECONNREFUSED (a reset: the reject action), part of Errors.
	ConnectRefused int `json:"connect_refused"`
	// MeanConnectMs is the mean time a work request's client spent in
	// connect(), whatever its outcome, in milliseconds: the time a pool
	// slot or thread is blocked before it has a connection or an error.
	MeanConnectMs float64 `json:"mean_connect_ms"`
	// WouldDropRatio is olcd's would-drop ÷ SYNs seen (observe mode).
	WouldDropRatio float64 `json:"would_drop_ratio"`
	// CappedRatio is what olcd's static caps refused ÷ SYNs seen (part
	// of SYNDropRatio, or WouldDropRatio in observe mode).
	CappedRatio float64 `json:"capped_ratio,omitempty"`
	// Inflight and MaxInflight are the mean and the largest of olcd's
	// count of the work port's requests in flight at the samples (at its
	// last tick; 0 where not timed).
	Inflight    float64 `json:"inflight,omitempty"`
	MaxInflight float64 `json:"max_inflight,omitempty"`
	// MeanP is olcd's mean drop probability over the phase.
	MeanP float64 `json:"mean_drop_probability"`
	// HealthOK and HealthTotal count the health checks of the phase.
	HealthOK    int `json:"health_ok"`
	HealthTotal int `json:"health_total"`
	// LightOfferedRPS and LightGoodputRPS are the light clients' share of
	// OfferedRPS and GoodputRPS (Scenario.Light; 0 without).
	LightOfferedRPS float64 `json:"light_offered_rps,omitempty"`
	LightGoodputRPS float64 `json:"light_goodput_rps,omitempty"`
	// LightConnects and LightConnected count the light clients' connects
	// and those that succeeded (their SYNs admitted); Connects and
	// Connected every work connect's.
	LightConnects  int `json:"light_connects,omitempty"`
	LightConnected int `json:"light_connected,omitempty"`
	Connects       int `json:"connects"`
	Connected      int `json:"connected"`
	// ConnectIdleS and HeavyConnectIdleS are the seconds of the phase in
	// which every client, and the work clients alone, started no connect
	// for longer than CapBurstTime: the refill a static cap's default
	// bucket lost while the load generator stalled (connectIdle).
	ConnectIdleS      float64 `json:"connect_idle_s,omitempty"`
	HeavyConnectIdleS float64 `json:"heavy_connect_idle_s,omitempty"`
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
	// P is the drop probability a first attempt met at olcd (NaN when olcd
	// does not run), Target its response target (seconds; 0: none).
	P      float64 `json:"-"`
	Target float64 `json:"-"`
	// CPU is the backend's CPU as a share of its quota.
	CPU float64 `json:"cpu_busy"`
}

// RunResult is one scenario under one variant.
type RunResult struct {
	// Scenario and Variant name the run.
	Scenario string  `json:"-"`
	Variant  Variant `json:"variant"`
	// Backend and Clients are the scenario's.
	Backend Backend `json:"backend"`
	Clients Clients `json:"clients"`
	// CapacityRPS is the calibrated capacity C of the backend.
	CapacityRPS float64 `json:"capacity_rps"`
	// Summary is the overload phase (the highest offered load) in the
	// figures of the matrix.
	Summary *Summary `json:"summary,omitempty"`
	// Phases are the per-phase results.
	Phases []PhaseResult `json:"phases"`
	// Series is the per-second time series.
	Series []SecondPoint `json:"-"`
	// KilledAt is when olcd was killed (0: not killed), since the start.
	KilledAt time.Duration `json:"-"`
	// RestartedAt is when olcd was restarted (0: not restarted), since
	// the start.
	RestartedAt time.Duration `json:"-"`
	// Dials are the work connects, for the fail-open check.
	Dials []DialRecord `json:"-"`
	// Plot, OlcdLog, OlcdConfig and DecisionLog are files of the run;
	// Metrics, olcd's /metrics at the end of the load (RunOptions.OlcdMetrics).
	Plot        string `json:"plot"`
	OlcdLog     string `json:"olcd_log,omitempty"`
	OlcdConfig  string `json:"olcd_config,omitempty"`
	DecisionLog string `json:"decision_log,omitempty"`
	Metrics     string `json:"metrics,omitempty"`
	// StatusLog is olcd's status at every sample, one JSON document a
	// line (olcd variants).
	StatusLog string `json:"status_log,omitempty"`
	// Start is when the load began: the origin of the run's times.
	Start time.Time `json:"-"`
	// Caps are the patches of the work port's caps (ScenarioPhase.Caps).
	Caps []CapsChange `json:"-"`

	rec *records // the run's requests, for CapacityDips and P99Excluding
	// slo is the run's SLO (Options.SLO), for PhaseFrom.
	slo time.Duration
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
	res := &RunResult{Scenario: sc.Name, Variant: v, KilledAt: rec.killedAt, RestartedAt: rec.restartedAt, Backend: sc.backend(), Clients: sc.clients(), CapacityRPS: cal.CapacityRPS,
		Start: rec.start}
	for _, d := range rec.dials {
		res.Dials = append(res.Dials, DialRecord{Start: d.start, Duration: d.dur, Outcome: d.outcome})
	}
	res.Phases = phaseResults(rec, opt.SLO, v, " settled")
	res.Series = series(rec, phasePacer(rec.phases).total(), opt.SLO)
	res.rec, res.slo = rec, opt.SLO
	name := sc.OverloadPhase()
	c := cal.CapacityRPS
	if from, _, ok := res.phaseSpan(name); ok && sc.quotaShareAt(from) < 1 {
		c = cal.HalvedCapacityRPS() // the only change the scenarios make
	}
	res.Summary = res.summarise(name, c)
	return res
}

// Summary is a run's overload phase in the figures of the matrix.
type Summary struct {
	// Phase names the overload phase.
	Phase string `json:"phase"`
	// CapacityRPS is the capacity in force in the phase: C, or C' after
	// capacity-halved's halving.
	CapacityRPS float64 `json:"capacity_rps"`
	// GoodputRPS is answers within the SLO per second over the whole
	// phase, GoodputC the same ÷ C; SettledGoodputC from +SettleTime.
	GoodputRPS      float64 `json:"goodput_rps"`
	GoodputC        float64 `json:"goodput_c"`
	SettledGoodputC float64 `json:"settled_goodput_c"`
	// P95Ms and P99Ms are percentiles of the successes over the whole
	// phase, SettledP95Ms and SettledP99Ms from +SettleTime.
	P95Ms        float64 `json:"p95_ms"`
	P99Ms        float64 `json:"p99_ms"`
	SettledP95Ms float64 `json:"settled_p95_ms"`
	SettledP99Ms float64 `json:"settled_p99_ms"`
	// TargetMs is the mean response target olcd held the work port at
	// over the phase from +SettleTime (0: none, or no olcd).
	TargetMs float64 `json:"target_ms,omitempty"`
	// AfterCut is the fewest connections admitted in the second after a
	// cut (a sample whose drop probability for first attempts rose by 0.1
	// or more, from +1 s of the phase on) over the capacity in connections
	// per second olcd measured at the cut; Cuts counts them (issue 24: a
	// cut must not leave the service idle while its clients wait out a
	// SYN retransmit, ≥ 0.9). Absent without cuts.
	AfterCut *float64 `json:"after_cut,omitempty"`
	Cuts     int      `json:"cuts,omitempty"`
	// AfterServed is the share of the requests of the phase that follows
	// (the step down), started from +AfterSettle, answered within the SLO;
	// absent when no phase follows.
	AfterServed *float64 `json:"after_served,omitempty"`
	// PStdDev is the standard deviation of olcd's drop probability over
	// the 1 s windows of the phase from +SettleTime (NaN without olcd:
	// omitted).
	PStdDev *float64 `json:"p_stddev,omitempty"`
	// WindowsOK is the share of the 1 s windows from +SettleTime whose
	// goodput is at least 0.8 × their mean: 1 without a limit cycle.
	WindowsOK float64 `json:"windows_ok"`
	// MeanConnectMs is the mean time in connect() over the phase.
	MeanConnectMs float64 `json:"mean_connect_ms"`
	// ConnectRefused and Timeouts count the phase's refused connects and
	// timed-out requests.
	ConnectRefused int `json:"connect_refused"`
	Timeouts       int `json:"timeouts"`
	// HealthOK and HealthTotal count the health checks of the whole run.
	HealthOK    int `json:"health_ok"`
	HealthTotal int `json:"health_total"`
}

// windowOKShare is the goodput line of a steady state: a window is fine
// at this share of the mean goodput or more.
const windowOKShare = 0.8

// summarise computes the Summary of phase name.
func (r *RunResult) summarise(name string, c float64) *Summary {
	from, to, ok := r.phaseSpan(name)
	if !ok || c <= 0 {
		return nil
	}
	p := r.Phase(name)
	s := &Summary{Phase: name, CapacityRPS: c, GoodputRPS: p.GoodputRPS, GoodputC: p.GoodputRPS / c, P95Ms: p.P95Ms, P99Ms: p.P99Ms,
		MeanConnectMs: p.MeanConnectMs, ConnectRefused: p.ConnectRefused, Timeouts: p.Timeouts, SettledGoodputC: p.GoodputRPS / c,
		SettledP95Ms: p.P95Ms, SettledP99Ms: p.P99Ms}
	if p.Settled != nil {
		s.SettledGoodputC, s.SettledP95Ms, s.SettledP99Ms = p.Settled.GoodputRPS/c, p.Settled.P95Ms, p.Settled.P99Ms
	}
	s.AfterServed = r.afterServed(to)
	s.Cuts, s.AfterCut = r.afterCuts(from+time.Second, to-time.Second)
	for _, ph := range r.Phases {
		s.HealthOK += ph.HealthOK
		s.HealthTotal += ph.HealthTotal
	}
	first, last := int((from+SettleTime)/time.Second), int((to-1)/time.Second)
	var good, ps, tgt []float64
	for i := first; i <= last && i < len(r.Series); i++ {
		good = append(good, r.Series[i].Goodput)
		if !math.IsNaN(r.Series[i].P) {
			ps = append(ps, r.Series[i].P)
		}
		if x := r.Series[i].Target; x > 0 {
			tgt = append(tgt, x)
		}
	}
	if len(tgt) > 0 {
		s.TargetMs = 1000 * mean(tgt)
	}
	s.WindowsOK = steadyShare(good, windowOKShare)
	if len(ps) > 1 && olcdVariant(r.Variant) {
		sd := stddev(ps)
		s.PStdDev = &sd
	}
	return s
}

// AfterSettle is how long after a step down the phase that follows is
// held to serve what it is offered (issue 24: ≥ 0.98 from +2 s): the
// clients shed in the overload's last second are still in their SYN
// retransmit for the first.
const AfterSettle = 2 * time.Second

// afterServed returns the share of the requests of the phase that starts
// at from, started from +AfterSettle, answered within the SLO (nil when no
// phase starts there or none was started).
func (r *RunResult) afterServed(from time.Duration) *float64 {
	for _, p := range r.Phases {
		f, to, _ := r.phaseSpan(p.Name)
		if f != from || to-from <= AfterSettle {
			continue
		}
		var offered, good float64
		for i := int((from + AfterSettle) / time.Second); i < int(to/time.Second) && i < len(r.Series); i++ {
			offered += r.Series[i].Offered
			good += r.Series[i].Goodput
		}
		if offered == 0 {
			return nil
		}
		share := good / offered
		return &share
	}
	return nil
}

// afterCuts returns the cuts in [from, to) and the fewest connections
// admitted in the second after one over the capacity olcd measured then
// (Summary.AfterCut).
func (r *RunResult) afterCuts(from, to time.Duration) (int, *float64) {
	if r.rec == nil {
		return 0, nil
	}
	n, worst := 0, math.Inf(1)
	ss := r.rec.samples
	for i := 1; i < len(ss); i++ {
		s0, s1 := ss[i-1], ss[i]
		if !s0.olcd || !s1.olcd || s1.t < from || s1.t >= to || s1.connCap <= 0 || s1.p-s0.p < 0.1 {
			continue
		}
		var admitted float64
		for _, d := range r.rec.dials {
			if end := d.start + d.dur; d.outcome == outcomeOK && end > s1.t && end <= s1.t+time.Second {
				admitted++
			}
		}
		n++
		worst = math.Min(worst, admitted/s1.connCap)
	}
	if n == 0 {
		return 0, nil
	}
	return n, &worst
}

// mean is the mean of xs (NaN when empty).
func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// steadyShare is the share of xs at least frac × their mean (1 when empty
// or the mean is 0).
func steadyShare(xs []float64, frac float64) float64 {
	if len(xs) == 0 {
		return 1
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	if mean <= 0 {
		return 1
	}
	n := 0
	for _, x := range xs {
		if x >= frac*mean {
			n++
		}
	}
	return float64(n) / float64(len(xs))
}

// stddev is the population standard deviation of xs.
func stddev(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	return math.Sqrt(sq / float64(len(xs)))
}

// Capacity dips: this VM's backend now and then serves a third less for a
// second or so while its cgroup stays at the quota (seen in about one run
// of five; the exempt health checks, served by another process, are
// unaffected). No controller can keep that second's latency: the work it
// admitted was what fitted a moment before.
const (
	// dipCPU is the backend's CPU, as a share of its quota, from which a
	// second counts as pinned.
	dipCPU = 0.98
	// dipAdmitted is how far above the phase's median admitted rate a
	// pinned second may be and still count as a dip: more admitted is
	// the controller's doing.
	dipAdmitted = 1.05
	// dipP is how far below the phase's median p a pinned second's p may
	// be and still count as a dip: a lower p (a recovery probe) is the
	// controller's doing.
	dipP = 0.02
	// MaxDipSeconds bounds what CapacityDips may report: a phase pinned
	// for longer is not dipping, it is overloaded.
	MaxDipSeconds = 3
)

// phaseSpan returns the start and end of the phase named name since the
// load began, and false when there is no such phase.
func (r *RunResult) phaseSpan(name string) (from, to time.Duration, ok bool) {
	for _, p := range r.Phases {
		d := time.Duration(p.DurationS * float64(time.Second))
		if p.Name == name {
			return from, from + d, true
		}
		from += d
	}
	return 0, 0, false
}

// CapacityDips returns the whole seconds (since the load began) of phase
// name in which the backend's CPU was pinned (≥ dipCPU of its quota) while
// olcd admitted no more than dipAdmitted × the phase's median admitted rate
// and its p stood no lower than dipP under the phase's median: the backend
// ran out of capacity while the protection did what it did in the rest of
// the phase. The first second of the phase (the reaction to its step) is
// never a dip; more than MaxDipSeconds dips are no dips at all (nil).
func (r *RunResult) CapacityDips(name string) []int {
	from, to, ok := r.phaseSpan(name)
	if !ok {
		return nil
	}
	first, last := int(from/time.Second)+1, int((to-1)/time.Second)
	var adm, ps []float64
	for i := first; i <= last && i < len(r.Series); i++ {
		pt := r.Series[i]
		adm = append(adm, pt.Admitted)
		if !math.IsNaN(pt.P) {
			ps = append(ps, pt.P)
		}
	}
	if len(adm) == 0 {
		return nil
	}
	slices.Sort(adm)
	slices.Sort(ps)
	medAdm := adm[len(adm)/2]
	var dips []int
	for i := first; i <= last && i < len(r.Series); i++ {
		pt := r.Series[i]
		if math.IsNaN(pt.CPU) || pt.CPU < dipCPU || pt.Admitted > dipAdmitted*medAdm {
			continue
		}
		if len(ps) > 0 && (math.IsNaN(pt.P) || pt.P < ps[len(ps)/2]-dipP) {
			continue
		}
		dips = append(dips, i)
	}
	if len(dips) > MaxDipSeconds {
		return nil
	}
	return dips
}

// P99Excluding is the p99 (ms) of the successful work requests that
// started in phase name outside the seconds listed and the second after
// each (the queue a dip leaves drains then).
func (r *RunResult) P99Excluding(name string, seconds []int) float64 {
	from, to, ok := r.phaseSpan(name)
	if !ok || r.rec == nil {
		return 0
	}
	skip := map[int]bool{}
	for _, s := range seconds {
		skip[s], skip[s+1] = true, true
	}
	var lat []float64
	for _, q := range r.rec.requests {
		if q.health || q.start < from || q.start >= to || q.outcome != outcomeOK || skip[int(q.start/time.Second)] {
			continue
		}
		lat = append(lat, float64(q.latency)/float64(time.Millisecond))
	}
	slices.Sort(lat)
	return percentile(lat, 0.99)
}

// phaseResults summarises each of rec's phases (phaseResult under v) and,
// where a phase lasts 2 × SettleTime or more, the same from +SettleTime as
// its Settled, named the phase's name and settled (" settled" in the
// overload matrix, "-settled" in the load-balancer test's tables).
func phaseResults(rec *records, slo time.Duration, v Variant, settled string) []PhaseResult {
	var out []PhaseResult
	var from time.Duration
	for _, ph := range rec.phases {
		to := from + ph.Duration
		pr := phaseResult(rec, ph.Name, from, to, slo, v)
		if ph.Duration >= 2*SettleTime {
			st := phaseResult(rec, ph.Name+settled, from+SettleTime, to, slo, v)
			pr.Settled = &st
		}
		out = append(out, pr)
		from = to
	}
	return out
}

// CapBurstTime is the time a static cap's bucket of the default burst (a
// tenth of a second's worth, rules.PortCaps.Burst) takes to fill.
const CapBurstTime = 100 * time.Millisecond

// connectIdle returns the seconds of [from, to) more than CapBurstTime
// after the last of starts (or from): a client that offers more than a
// cap's rate keeps its bucket empty, so a gap g in its connects (the load
// generator not scheduled) loses g − CapBurstTime of the cap's admissions.
func connectIdle(starts []time.Duration, from, to time.Duration) float64 {
	slices.Sort(starts)
	var idle time.Duration
	prev := from
	for _, s := range append(starts, to) {
		idle += max(0, s-prev-CapBurstTime)
		prev = s
	}
	return idle.Seconds()
}

// phaseResult computes one phase over requests started in [from, to).
func phaseResult(rec *records, name string, from, to, slo time.Duration, v Variant) PhaseResult {
	pr := PhaseResult{Name: name}
	var lat []float64
	var good, light, lightGood int
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
		if r.light {
			light++
		}
		switch {
		case r.outcome == outcomeOK:
			pr.Successes++
			lat = append(lat, float64(r.latency)/float64(time.Millisecond))
			if r.latency <= slo {
				good++
				if r.light {
					lightGood++
				}
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
	var connSum time.Duration
	var starts, heavy []time.Duration
	for _, d := range rec.dials {
		if d.start < from || d.start >= to {
			continue
		}
		connSum += d.dur
		pr.Connects++
		starts = append(starts, d.start)
		if d.light {
			pr.LightConnects++
		} else {
			heavy = append(heavy, d.start)
		}
		switch d.outcome {
		case outcomeOK:
			pr.Connected++
			if d.light {
				pr.LightConnected++
			}
		case outcomeTimeout:
			pr.ConnectTimeouts++
		case outcomeRefused:
			pr.ConnectRefused++
		}
	}
	pr.ConnectIdleS, pr.HeavyConnectIdleS = connectIdle(starts, from, to), connectIdle(heavy, from, to)
	if pr.Connects > 0 {
		pr.MeanConnectMs = connSum.Seconds() * 1e3 / float64(pr.Connects)
	}
	secs := (to - from).Seconds()
	pr.DurationS = secs
	pr.OfferedRPS = float64(pr.Requests) / secs
	pr.GoodputRPS = float64(good) / secs
	pr.LightOfferedRPS, pr.LightGoodputRPS = float64(light)/secs, float64(lightGood)/secs
	slices.Sort(lat)
	pr.P50Ms, pr.P95Ms, pr.P99Ms = percentile(lat, 0.50), percentile(lat, 0.95), percentile(lat, 0.99)

	a, b := sampleAt(rec.samples, from), sampleAt(rec.samples, to)
	switch {
	case olcdVariant(v):
		if a.olcd && b.olcd && b.newConns > a.newConns {
			n := float64(b.newConns - a.newConns)
			pr.SYNDropRatio = float64(b.dropped-a.dropped) / n
			pr.WouldDropRatio = float64(b.would-a.would) / n
			pr.CappedRatio = float64(b.capped-a.capped) / n
		}
	case v == VariantStatic || v == VariantStaticReject:
		if b.nftSeen > a.nftSeen {
			pr.SYNDropRatio = float64(b.nftDrop-a.nftDrop) / float64(b.nftSeen-a.nftSeen)
		}
	}
	var busy, pSum, inSum float64
	var nBusy, nP, nIn int
	for i := 1; i < len(rec.samples); i++ {
		s0, s1 := rec.samples[i-1], rec.samples[i]
		// The CPU is the interval's, p the moment's: a cut made just
		// after a phase began belongs to that phase, not to the one
		// the interval's midpoint falls in.
		if s1.olcd && s1.t >= from && s1.t < to {
			pSum += s1.p
			nP++
			if !math.IsNaN(s1.inflight) {
				inSum += s1.inflight
				nIn++
				pr.MaxInflight = max(pr.MaxInflight, s1.inflight)
			}
		}
		mid := (s0.t + s1.t) / 2
		if mid < from || mid >= to {
			continue
		}
		if b, ok := busyBetween(s0, s1); ok {
			busy += b
			nBusy++
		}
	}
	if nBusy > 0 {
		pr.CPUBusy = busy / float64(nBusy)
	}
	if nP > 0 {
		pr.MeanP = pSum / float64(nP)
	}
	if nIn > 0 {
		pr.Inflight = inSum / float64(nIn)
	}
	return pr
}

// PhaseFrom is phase name's result without its first skip (the reaction
// to what started it), or the zero PhaseResult without such a phase.
func (r *RunResult) PhaseFrom(name string, skip time.Duration) PhaseResult {
	from, to, ok := r.phaseSpan(name)
	if !ok || r.rec == nil || from+skip >= to {
		return PhaseResult{}
	}
	return phaseResult(r.rec, name, from+skip, to, r.slo, r.Variant)
}

// ClientInflight is the work requests in flight as the clients saw them,
// over phase name without its first skip: at every millisecond, the
// answered requests started and not yet answered (a request's connect
// included); the mean and the 99th percentile of those counts. Requests
// not answered within the clients' timeout are not in it
// (PhaseResult.Timeouts less ConnectTimeouts counts those admitted).
func (r *RunResult) ClientInflight(name string, skip time.Duration) (mean, p99 float64) {
	from, to, ok := r.phaseSpan(name)
	from += skip
	if !ok || r.rec == nil || from >= to {
		return 0, 0
	}
	n := int((to - from) / time.Millisecond)
	delta := make([]int, n+1) // requests starting (+1) and ending (-1) at each millisecond
	for _, q := range r.rec.requests {
		if q.health || q.outcome != outcomeOK {
			continue
		}
		a, b := int((q.start-from)/time.Millisecond), int((q.start+q.latency-from)/time.Millisecond)
		if b < 0 || a >= n {
			continue
		}
		delta[max(a, 0)]++
		delta[min(b, n)]--
	}
	counts := make([]float64, n)
	cur, sum := 0, 0
	for i := range n {
		cur += delta[i]
		counts[i] = float64(cur)
		sum += cur
	}
	slices.Sort(counts)
	return float64(sum) / float64(n), percentile(counts, 0.99)
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
		if k := bin(s1.t); k >= 0 && s1.olcd {
			pSum[k] += s1.p
			pN[k]++
			pts[k].Target = s1.target
		}
		j := bin((s0.t + s1.t) / 2)
		if j < 0 {
			continue
		}
		if b, ok := busyBetween(s0, s1); ok {
			cpuSum[j] += b
			cpuN[j]++
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

// MaxSlowdown bounds how much more CPU per request than at the knee of the
// calibration the backend may need in a run for CapacityAtRun to scale C
// down: beyond it the VM has changed too much since the calibration for
// the run to say anything about the protection.
const MaxSlowdown = 0.15

// CapacityAtRun is the backend's capacity during phase name, for goodput
// lines: C scaled by the backend's CPU per completed request at the knee of
// the calibration (cal) over its CPU per completed request in the phase.
// The backend's own CPU accounting tells whether this VM ran slower than
// during the calibration minutes before (it does, by up to a tenth, for
// minutes at a time); olcd's decisions do not enter it: in the same runs the
// static limit needs as much CPU per request. slowdown is the phase's cost
// over the knee's, less 1. A faster run keeps C (rps = C); ok is false when
// the run was more than MaxSlowdown slower, or nothing was measured.
func (r *RunResult) CapacityAtRun(name string, cal *Calibration) (rps, slowdown float64, ok bool) {
	p := r.Phase(name)
	var perS float64
	if p.DurationS > 0 {
		perS = float64(p.Successes) / p.DurationS
	}
	return cal.capacityAt(p.CPUBusy, perS)
}

// capacityAt is C scaled by the backend's CPU per request at the knee over
// its CPU per request in a phase that kept it cpuBusy (share of the quota)
// serving perS requests a second: RunResult.CapacityAtRun's figures, for
// one backend or one load-balancer node (LBHarness.CapacityAtRun).
func (c *Calibration) capacityAt(cpuBusy, perS float64) (rps, slowdown float64, ok bool) {
	var knee *CalibrationStep
	for i := range c.Steps {
		if c.Steps[i].Knee {
			knee = &c.Steps[i]
		}
	}
	if knee == nil || knee.GoodputRPS <= 0 || knee.CPUBusy <= 0 || perS <= 0 || cpuBusy <= 0 {
		return c.CapacityRPS, 0, false
	}
	atKnee := knee.CPUBusy / knee.GoodputRPS
	inRun := cpuBusy / perS
	slowdown = inRun/atKnee - 1
	if slowdown > MaxSlowdown {
		return c.CapacityRPS, slowdown, false
	}
	if slowdown <= 0 {
		return c.CapacityRPS, slowdown, true
	}
	return c.CapacityRPS / (1 + slowdown), slowdown, true
}

// AroundRestart returns the goodput (answers within the SLO per second)
// over the span seconds before RestartedAt and the span seconds from it;
// ok is false without a restart or a series that short.
func (r *RunResult) AroundRestart(span int) (before, after float64, ok bool) {
	if r.RestartedAt == 0 {
		return 0, 0, false
	}
	at := int(r.RestartedAt / time.Second)
	if at < span || at+span > len(r.Series) {
		return 0, 0, false
	}
	for i := at - span; i < at; i++ {
		before += r.Series[i].Goodput
	}
	for i := at; i < at+span; i++ {
		after += r.Series[i].Goodput
	}
	return before / float64(span), after / float64(span), true
}

// DropViolations checks the run's olcd drop counters (the work port's, at
// every sample): the drop reasons shown must be those of its action (a
// shed SYN; a SYN answered with RST|ACK only under the reject action), and
// no drop may be counted while olcd was not shedding — across three
// samples in a row of the same olcd with p = 0, the counters did not move
// between the last two (the first pair lets a SYN drawn under the previous
// p be counted), unless olcd's decision log shows p above 0 within those
// samples (an onset episode between two samples). It returns one line per violation (tests/e2e's drop guard
// is the same check for the e2e daemons).
func (r *RunResult) DropViolations() []string {
	if r.rec == nil {
		return nil
	}
	var out []string
	var chain []sample
	for _, s := range r.rec.samples {
		if !s.olcd {
			chain = nil
			continue
		}
		if n := len(chain); n > 0 && s.dropped < chain[n-1].dropped {
			chain = nil // a new olcd's counters
		}
		chain = append(chain, s)
		// A static cap refuses whatever p is: its drops are counted
		// apart (capped), and only the rest is the law's.
		if n := len(chain); n >= 3 && chain[n-3].p == 0 && chain[n-2].p == 0 && s.p == 0 && s.dropped-s.capped > chain[n-2].dropped-chain[n-2].capped &&
			!shedDuring(r.rec.shed, chain[n-3].t, s.t) {
			out = append(out, fmt.Sprintf("%d drops (none of them a cap's) from %.1f s to %.1f s while olcd's p was 0",
				s.dropped-s.capped-(chain[n-2].dropped-chain[n-2].capped), chain[n-2].t.Seconds(), s.t.Seconds()))
		}
		if len(chain) > 3 {
			chain = chain[1:]
		}
		if s.rejected > 0 && r.Variant != VariantEnforceReject {
			out = append(out, fmt.Sprintf("%d SYNs answered with RST|ACK at %.1f s under the %s variant (drop action)", s.rejected, s.t.Seconds(), r.Variant))
			break
		}
	}
	return out
}
