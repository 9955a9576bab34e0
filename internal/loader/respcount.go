package loader

import (
	"fmt"
	"slices"

	"github.com/olcd/olcd/internal/olc"
)

// RespCount is a timed port's cumulative response-timing counters, summed
// over CPUs, since the port got its slot: the sampled requests only
// (unscaled; multiply by ResponseSample for all of them).
type RespCount struct {
	// Requests counts timers started (Response.Requests).
	Requests uint64
	// Responses counts timers stopped by an answer (Response.Responses).
	Responses uint64
	// Abandoned counts requests forgotten unanswered (Response.Abandoned).
	Abandoned uint64
	// Reused and Resets count request starts on open connections and
	// those the request gate shed (Response.Reused, Response.Resets).
	Reused, Resets uint64
}

// Inflight is the number of sampled requests started and neither answered
// nor abandoned; never negative (a fold may catch one counter updated
// before the other).
func (r RespCount) Inflight() uint64 {
	if done := r.Responses + r.Abandoned; done < r.Requests {
		return r.Requests - done
	}
	return 0
}

// ResponseCounts writes every timed port's cumulative response counters
// into into (cleared first; reuse it: a call allocates nothing once the
// map has grown). It folds the same per-CPU histograms as Stats, without
// building their buckets: for the onset check twenty times a second.
// With response timing off, into is left empty. Errors: a closed
// datapath or a failed map read.
func (d *Datapath) ResponseCounts(into map[olc.PortKey]RespCount) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("read response counts: %w", err)
	}
	clear(into)
	if d.cfg.ResponseSample == 0 || len(d.rslots) == 0 {
		return nil
	}
	// slotBuf is PortCounters' too: both run under d.mu and rebuild it.
	d.slotBuf = d.slotBuf[:0]
	for _, v := range d.rslots {
		d.slotBuf = append(d.slotBuf, v)
	}
	slices.Sort(d.slotBuf)
	if err := d.resp.fold(d.slotBuf); err != nil {
		return fmt.Errorf("read response counts: %w", err)
	}
	for k, slot := range d.rslots {
		if st := d.resp.slots[slot]; st != nil {
			into[k] = RespCount{Requests: st.total[0], Responses: st.total[1], Abandoned: st.total[2], Reused: st.total[4], Resets: st.total[5]}
		}
	}
	return nil
}
