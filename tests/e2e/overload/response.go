package overload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/olcd/olcd/internal/daemon"
)

// ResponseCheck is one run comparing the response times olcd measures in
// the datapath with the ones the clients see.
type ResponseCheck struct {
	// Name labels the run ("sleep-20ms", "work-3x").
	Name string
	// Sleep, when positive, is the handler's wall time (a backend of known
	// time); 0 runs the CPU backend (Options.Work per request).
	Sleep time.Duration
	// Rate is the offered load in requests per second; Load, when
	// positive, sets it as a multiple of the calibrated capacity instead.
	Rate, Load float64
	// Duration is how long the load runs.
	Duration time.Duration
}

// ResponseResult compares the two over one run. The client's latency of a
// request on its own connection is the connect (one round trip), the
// request's way in (half of one), the server's time and the answer's way
// out (half of one): ClientP* are the latencies of the successes minus two
// round trips, the round trip being the median connect time of the run.
type ResponseResult struct {
	Name        string
	RateRPS     float64
	Successes   int
	Timeouts    int
	RTTMs       float64
	ClientP50Ms float64
	ClientP95Ms float64
	OlcdP50Ms   float64
	OlcdP95Ms   float64
	// OlcdSamples is the number of responses olcd timed during the run.
	OlcdSamples uint64
}

// Agree reports whether p50 and p95 agree within 5 % or 0.5 ms, whichever
// is larger.
func (r *ResponseResult) Agree() bool {
	ok := func(client, olcd float64) bool { return math.Abs(client-olcd) <= math.Max(0.05*client, 0.5) }
	return ok(r.ClientP50Ms, r.OlcdP50Ms) && ok(r.ClientP95Ms, r.OlcdP95Ms)
}

// RunResponse runs rc with olcd observing (nothing is shed) and returns
// both sides' quantiles. olcd's come from the difference of the work port's
// cumulative histogram (status response_histogram) before and after the
// load, each bucket read at its middle.
func (h *Harness) RunResponse(ctx context.Context, rc ResponseCheck) (*ResponseResult, error) {
	rate := rc.Rate
	if rc.Load > 0 {
		if h.Calibration == nil {
			return nil, errors.New("response check: a load relative to capacity needs a calibration")
		}
		rate = rc.Load * h.Calibration.CapacityRPS
	}
	dir := filepath.Join(h.opt.OutDir, "response-"+rc.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	h.sleep = rc.Sleep
	defer func() { h.sleep = 0 }()
	if err := h.startBackend(""); err != nil {
		return nil, err
	}
	defer h.stopBackend()
	h.waitIdle(5 * time.Second)
	threshold := 1.0
	if h.Calibration != nil {
		threshold = h.Calibration.Threshold
	}
	od, err := h.startOlcd(ctx, dir, olcdSettings{Mode: "observe", Signals: []string{fmt.Sprintf("cgroup_cpu_usage_of_quota: {threshold: %.3f}", threshold)}})
	if err != nil {
		return nil, err
	}
	defer od.stop()
	before, err := od.status(ctx)
	if err != nil {
		return nil, fmt.Errorf("olcd status: %w", err)
	}
	rec, err := h.attack(ctx, dir, "response/"+rc.Name, ClientsOpenGiveUp, []Phase{{Name: rc.Name, Rate: rate, Duration: rc.Duration}}, nil, od, nil, RunOptions{})
	if err != nil {
		return nil, err
	}
	// One tick more, so the last answers are in the status.
	time.Sleep(2 * h.opt.OlcdInterval)
	after, err := od.status(ctx)
	if err != nil {
		return nil, fmt.Errorf("olcd status: %w", err)
	}
	res := &ResponseResult{Name: rc.Name, RateRPS: rate}
	var dials []float64
	for _, d := range rec.dials {
		if d.outcome == outcomeOK {
			dials = append(dials, d.dur.Seconds()*1e3)
		}
	}
	slices.Sort(dials)
	res.RTTMs = percentile(dials, 0.5)
	var lat []float64
	for _, r := range rec.requests {
		switch {
		case r.health:
		case r.outcome == outcomeOK:
			lat = append(lat, r.latency.Seconds()*1e3-2*res.RTTMs)
		case r.outcome == outcomeTimeout:
			res.Timeouts++
		}
	}
	res.Successes = len(lat)
	slices.Sort(lat)
	res.ClientP50Ms, res.ClientP95Ms = rankQuantile(lat, 0.5), rankQuantile(lat, 0.95)
	b, a := workPort(before), workPort(after)
	if a == nil {
		return nil, errors.New("olcd status has no work port")
	}
	delta := histogramDelta(b, a)
	for _, c := range delta {
		res.OlcdSamples += c.count
	}
	res.OlcdP50Ms, res.OlcdP95Ms = histQuantile(delta, 0.5)*1e3, histQuantile(delta, 0.95)*1e3
	return res, nil
}

func workPort(st *daemon.Status) *daemon.PortStatus {
	for i := range st.Ports {
		if st.Ports[i].Proto == "tcp" && st.Ports[i].Port == WorkPort {
			return &st.Ports[i]
		}
	}
	return nil
}

type histCount struct {
	mid   float64
	count uint64
}

// histogramDelta returns after − before per bucket, ascending, each bucket
// as its middle (the last, unbounded one as its lower bound).
func histogramDelta(before, after *daemon.PortStatus) []histCount {
	prev := map[float64]uint64{}
	if before != nil {
		for _, hb := range before.ResponseHistogram {
			prev[hb.LoS] = hb.Count
		}
	}
	var out []histCount
	for _, hb := range after.ResponseHistogram {
		n := hb.Count - min(prev[hb.LoS], hb.Count)
		if n == 0 {
			continue
		}
		mid := hb.LoS
		if hb.HiS != nil {
			mid = (hb.LoS + *hb.HiS) / 2
		}
		out = append(out, histCount{mid, n})
	}
	return out
}

// histQuantile is the nearest-rank q-quantile of the buckets (seconds).
func histQuantile(h []histCount, q float64) float64 {
	var n uint64
	for _, c := range h {
		n += c.count
	}
	if n == 0 {
		return math.NaN()
	}
	rank := uint64(math.Max(1, math.Ceil(q*float64(n))))
	var seen uint64
	for _, c := range h {
		seen += c.count
		if seen >= rank {
			return c.mid
		}
	}
	return h[len(h)-1].mid
}

// rankQuantile is the nearest-rank q-quantile of sorted values.
func rankQuantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}
