package daemon

import (
	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
)

// keepAliveTick is what a timed port's open connections did in one tick
// (issue 26): request starts on connections already open (reused), those
// the request gate reset (resets) or would have in observe mode
// (wouldReset), counted on sampled flows; sample is the response sample
// (one flow in sample is timed), by which the counts scale to the port.
type keepAliveTick struct {
	reused, resets, wouldReset uint64
	sample                     uint32
}

// keepAliveDeltas returns each timed port's keepAliveTick between two
// datapath reads: the ports of keys present in cur.Response. A port whose
// counters went back (its slot was reused) counts from zero.
func keepAliveDeltas(cur, prev loader.Stats, keys []olc.PortKey, sample uint32) map[olc.PortKey]keepAliveTick {
	if cur.Response == nil {
		return nil
	}
	sub := func(a, b uint64) uint64 {
		if a < b {
			return a
		}
		return a - b
	}
	out := make(map[olc.PortKey]keepAliveTick, len(cur.Response))
	for _, k := range keys {
		r, ok := cur.Response[k]
		if !ok {
			continue
		}
		p := prev.Response[k]
		out[k] = keepAliveTick{reused: sub(r.Reused, p.Reused), resets: sub(r.Resets, p.Resets),
			wouldReset: sub(r.WouldReset, p.WouldReset), sample: max(sample, 1)}
	}
	return out
}

// keepAliveStatus is a timed port's keep-alive entry in the status: its
// request gate setting, the tick's rates scaled to the port (kt; secs the
// tick's length), newConns the tick's new connections without SYN
// retransmits, and tot the cumulative counters (sampled flows). Nil when
// the port is not timed (ok false).
func keepAliveStatus(gate bool, kt keepAliveTick, ok bool, newConns uint64, tot loader.Response, secs float64) *api.KeepAlive {
	if !ok {
		return nil
	}
	scale := float64(kt.sample)
	ka := &api.KeepAlive{RequestGate: gate,
		Totals: api.KeepAliveTotals{Reused: tot.Reused, Resets: tot.Resets, WouldReset: tot.WouldReset}}
	if secs > 0 {
		ka.ReusedPerS = float64(kt.reused) * scale / secs
		ka.ResetsPerS = float64(kt.resets) * scale / secs
		ka.WouldResetPerS = float64(kt.wouldReset) * scale / secs
	}
	if reused := float64(kt.reused) * scale; reused+float64(newConns) > 0 {
		ka.ReusedShare = reused / (reused + float64(newConns))
	}
	return ka
}

// keepAliveCounts are request starts on open connections (reused) and
// those the request gate reset, scaled to the port: the decision log's
// figures of a change.
type keepAliveCounts struct{ reused, resets uint64 }

func (c *keepAliveCounts) add(o keepAliveCounts) {
	c.reused, c.resets = c.reused+o.reused, c.resets+o.resets
}

// counts is kt scaled by its sample (zero for a port not timed).
func (kt keepAliveTick) counts() keepAliveCounts {
	return keepAliveCounts{reused: kt.reused * uint64(kt.sample), resets: kt.resets * uint64(kt.sample)}
}
