package daemon

import (
	"log/slog"
	"math"
	"time"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/resptime"

	"github.com/olcd/olcd/internal/olc"
)

// responseSignals turns the datapath's cumulative histograms into each
// timed port's signals over the tick (resptime.Compute on the delta since
// the previous read) and sets the node-wide signals into snap: per
// quantile the worst port with enough samples (unavailable when none has
// them), and the sums of requests_per_s and inflight_requests. Nothing is
// set when timing is off.
func responseSignals(cur, prev loader.Stats, ports []olc.PortKey, sample uint32, minSamples int,
	interval time.Duration, snap *olc.Snapshot) map[olc.PortKey]resptime.Port {
	if cur.Response == nil {
		return nil
	}
	out := make(map[olc.PortKey]resptime.Port, len(cur.Response))
	var reqs, inflight float64
	var worst [3]float64
	any := false
	delta := make([]uint64, loader.HistBuckets)
	for _, k := range ports {
		r, ok := cur.Response[k]
		if !ok {
			continue
		}
		p := prev.Response[k]
		reset := r.Responses < p.Responses || r.Requests < p.Requests || len(p.Buckets) != len(r.Buckets)
		for b := range delta {
			delta[b] = r.Buckets[b]
			if !reset {
				delta[b] -= p.Buckets[b]
			}
		}
		dreq := r.Requests
		if !reset {
			dreq -= p.Requests
		}
		pr := resptime.Compute(delta, dreq, r.Outstanding(), sample, interval, uint64(minSamples))
		out[k] = pr
		reqs += pr.RequestsPerS
		inflight += pr.Inflight
		if pr.Available {
			any = true
			worst[0], worst[1], worst[2] = max(worst[0], pr.P50), max(worst[1], pr.P95), max(worst[2], pr.P99)
		}
	}
	if any {
		snap.Set(olc.ResponseTimeP50, worst[0])
		snap.Set(olc.ResponseTimeP95, worst[1])
		snap.Set(olc.ResponseTimeP99, worst[2])
	}
	if interval > 0 {
		snap.Set(olc.RequestsPerS, reqs)
	}
	snap.Set(olc.InflightRequests, inflight)
	return out
}

func responseTimeStatus(pr resptime.Port) *api.ResponseTime {
	rt := &api.ResponseTime{Samples: pr.Samples}
	if pr.Available {
		p50, p95, p99 := pr.P50, pr.P95, pr.P99
		rt.P50S, rt.P95S, rt.P99S = &p50, &p95, &p99
	}
	return rt
}

// flowScanEvery bounds how often status scans the flow table (a batched
// read of sets × 128 bytes).
const flowScanEvery = 10 * time.Second

// flowScan is the last scan of the response timer's flow table, kept
// between status builds (a batched read of sets × 128 bytes).
type flowScan struct {
	table loader.FlowTable
	at    time.Time
}

// status reports the response timer and its flow table, scanning the table
// at most every flowScanEvery. nil when timing is off.
func (f *flowScan) status(dp datapath, minSamples int, st loader.Stats, log *slog.Logger) *api.ResponseTimingStatus {
	n := dp.ResponseSample()
	if n == 0 {
		return nil
	}
	if now := time.Now(); f.at.IsZero() || now.Sub(f.at) >= flowScanEvery {
		ft, err := dp.FlowTableOccupancy()
		if err != nil {
			log.Warn("read flow table", "err", err)
		} else {
			f.table, f.at = ft, now
		}
	}
	ft := f.table
	rs := &api.ResponseTimingStatus{
		Sample: n, MinSamples: minSamples,
		FlowTableCapacity: ft.Capacity, FlowsTracked: ft.Used, FlowsOutstanding: ft.Outstanding,
		Inserts: st.Flows.Inserts, Evictions: st.Flows.Evictions, Expired: st.Flows.Expired, Forgotten: st.Flows.Forgotten,
	}
	if ft.Capacity > 0 {
		rs.FlowTableFill = float64(ft.Used) / float64(ft.Capacity)
	}
	return rs
}

// histogramStatus lists the nonempty buckets of a cumulative histogram.
func histogramStatus(buckets []uint64) []api.HistogramBucket {
	var out []api.HistogramBucket
	for b, n := range buckets {
		if n == 0 {
			continue
		}
		lo, hi := resptime.Bounds(b)
		hb := api.HistogramBucket{LoS: lo, Count: n}
		if !math.IsInf(hi, 1) {
			hb.HiS = &hi
		}
		out = append(out, hb)
	}
	return out
}
