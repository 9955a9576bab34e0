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

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/resptime"
	"github.com/olcd/olcd/internal/testutil"
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

// ResponseResult compares the two over one run. The clients keep their
// connections alive, so a latency is the request's way in (half a round
// trip), the server's time and the answer's way out (the other half):
// ClientP* are the latencies of the successes minus one round trip, the
// fastest connect of the run, the health checks' included: with keep-alive
// the work's few connects (two at 50/s) come in a burst at the start and
// read 0.2–0.4 ms, where the health checks' spread over the run find the
// veths' own 0.05 ms.
type ResponseResult struct {
	Name      string
	RateRPS   float64
	Successes int
	Timeouts  int
	RTTMs     float64
	// Dials is the number of connects the clients and the health checks
	// made (RTTMs is their fastest).
	Dials int
	// DialP50Ms and DialP95Ms are those connects' round trips at p50 and
	// p95, in ms. The kernel answers a SYN, so what they add to RTTMs is
	// the clients' and the veths' own timing noise in this run, which a
	// request's latency carries and the datapath's timing cannot see.
	DialP50Ms, DialP95Ms float64
	ClientP50Ms          float64
	ClientP95Ms          float64
	OlcdP50Ms            float64
	OlcdP95Ms            float64
	// OlcdSamples is the number of responses olcd timed during the run.
	OlcdSamples uint64
	// GoodputRPS is the successes within Options.SLO per second of the
	// run.
	GoodputRPS float64
	// NewConns, Dropped and WouldDrop are the work port's SYN counters
	// over the run (olcd observes: it drops none and counts what it
	// would have dropped).
	NewConns, Dropped, WouldDrop uint64
}

// WouldDropRatio is WouldDrop ÷ NewConns (0 without new connections).
func (r *ResponseResult) WouldDropRatio() float64 {
	if r.NewConns == 0 {
		return 0
	}
	return float64(r.WouldDrop) / float64(r.NewConns)
}

// Agree reports whether p50 and p95 agree within 5 % or 0.5 ms, whichever
// is larger (issue 15's line), olcd's quantile read as its bucket's middle.
func (r *ResponseResult) Agree() bool {
	ok := func(client, olcd float64) bool { return math.Abs(client-olcd) <= agreeTolerance(client) }
	return ok(r.ClientP50Ms, r.OlcdP50Ms) && ok(r.ClientP95Ms, r.OlcdP95Ms)
}

// AgreeBucket reports whether the clients' p50 and p95 lie within 5 % or
// 0.5 ms of the histogram bucket olcd's quantile falls in, counted from the
// bucket's edges: what a bucket (3.2 % either side of its middle at 10 ms)
// can say at all. Above the bucket it also allows the clients' own timing
// noise at the same quantile, the connects' round trip less the fastest
// (DialP50Ms, DialP95Ms): a noisy minute on the clients' side (a p95
// connect 1.5 ms over the fastest where 0.2 is usual) lengthens what they
// see and not what the datapath times.
func (r *ResponseResult) AgreeBucket() bool {
	ok := func(client, olcd, dial float64) bool {
		lo, hi := resptime.Bounds(resptime.Bucket(time.Duration(olcd * 1e6)))
		tol := agreeTolerance(client)
		noise := max(0, dial-r.RTTMs) // 0 without connects
		return client >= lo*1e3-tol && client <= hi*1e3+tol+noise
	}
	return ok(r.ClientP50Ms, r.OlcdP50Ms, r.DialP50Ms) && ok(r.ClientP95Ms, r.OlcdP95Ms, r.DialP95Ms)
}

// agreeTolerance is 5 % of ms or 0.5 ms, whichever is larger, in ms.
func agreeTolerance(ms float64) float64 { return math.Max(0.05*ms, 0.5) }

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
	h.sleep, h.keepAlive = rc.Sleep, true
	defer func() { h.sleep, h.keepAlive = 0, false }()
	if err := h.startBackend(""); err != nil {
		return nil, err
	}
	defer h.stopBackend()
	h.waitIdle(5 * time.Second)
	od, err := h.startOlcd(ctx, dir, olcdSettings{Mode: "observe"})
	if err != nil {
		return nil, err
	}
	defer od.stop()
	before, err := od.status(ctx)
	if err != nil {
		return nil, fmt.Errorf("olcd status: %w", err)
	}
	rec, err := h.attack(ctx, dir, "response/"+rc.Name, ClientsOpenGiveUp, []Phase{{Name: rc.Name, Rate: rate, Duration: rc.Duration}}, nil, od, nil, RunOptions{KeepAlive: true, Realtime: true})
	if err != nil {
		return nil, err
	}
	// A whole tick after the attack, so the last answers are in the status.
	end, err := od.status(ctx)
	if err != nil {
		return nil, fmt.Errorf("olcd status: %w", err)
	}
	var after *api.Status
	if err := testutil.WaitFor(10*h.opt.OlcdInterval, h.opt.OlcdInterval/4, func() (bool, error) {
		st, err := od.status(ctx)
		after = st
		return err == nil && st.Ticks >= end.Ticks+2, err
	}); err != nil {
		return nil, fmt.Errorf("olcd status two ticks after the attack: %w", err)
	}
	res := &ResponseResult{Name: rc.Name, RateRPS: rate}
	var dials []float64
	for _, d := range slices.Concat(rec.dials, rec.healthDials) {
		if d.outcome == outcomeOK {
			dials = append(dials, d.dur.Seconds()*1e3)
		}
	}
	res.Dials = len(dials)
	slices.Sort(dials)
	if len(dials) > 0 {
		res.RTTMs = dials[0]
		res.DialP50Ms, res.DialP95Ms = rankQuantile(dials, 0.5), rankQuantile(dials, 0.95)
	}
	var lat []float64
	for _, r := range rec.requests {
		switch {
		case r.health:
		case r.outcome == outcomeOK:
			lat = append(lat, r.latency.Seconds()*1e3-res.RTTMs)
			if r.latency <= h.opt.SLO {
				res.GoodputRPS++
			}
		case r.outcome == outcomeTimeout:
			res.Timeouts++
		}
	}
	res.Successes = len(lat)
	res.GoodputRPS /= rc.Duration.Seconds()
	slices.Sort(lat)
	res.ClientP50Ms, res.ClientP95Ms = rankQuantile(lat, 0.5), rankQuantile(lat, 0.95)
	b, a := workPort(before), workPort(after)
	if a == nil {
		return nil, errors.New("olcd status has no work port")
	}
	var t0 api.PortTotals // the port's counters before the load (none: it was not listed yet)
	if b != nil {
		t0 = b.Totals
	}
	res.NewConns, res.Dropped, res.WouldDrop = a.Totals.NewConns-t0.NewConns, a.Totals.Dropped-t0.Dropped, a.Totals.WouldDrop-t0.WouldDrop
	var p50, p95 float64
	res.OlcdSamples, p50, p95 = HistogramQuantiles(b, a)
	res.OlcdP50Ms, res.OlcdP95Ms = p50*1e3, p95*1e3
	return res, nil
}

// HistogramQuantiles returns the responses a port's status histogram
// gained from before (nil: since it was timed) to after, and their p50 and
// p95 in seconds (NaN without responses), read as the daemon reads them
// (resptime.Quantile).
func HistogramQuantiles(before, after *api.PortStatus) (n uint64, p50, p95 float64) {
	counts := make([]uint64, resptime.Buckets)
	for _, hb := range after.ResponseHistogram {
		counts[bucketOf(hb.LoS)] += hb.Count
	}
	if before != nil {
		for _, hb := range before.ResponseHistogram {
			b := bucketOf(hb.LoS)
			counts[b] -= min(counts[b], hb.Count)
		}
	}
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return 0, math.NaN(), math.NaN()
	}
	p50, _ = resptime.Quantile(counts, 0.5)
	p95, _ = resptime.Quantile(counts, 0.95)
	return n, p50, p95
}

// bucketOf is the bucket whose lower bound is lo seconds (a whole number
// of 1.024 µs units, so the round trip through nanoseconds is exact).
func bucketOf(lo float64) int {
	return resptime.Bucket(time.Duration(math.Round(lo * 1e9)))
}

// rankQuantile is the nearest-rank q-quantile of sorted values.
func rankQuantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func workPort(st *api.Status) *api.PortStatus {
	for i := range st.Ports {
		if st.Ports[i].Proto == "tcp" && st.Ports[i].Port == WorkPort {
			return &st.Ports[i]
		}
	}
	return nil
}
