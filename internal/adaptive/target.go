package adaptive

import (
	"fmt"
	"math"
)

// ResponseTarget is a port's response-time target: the p95 beyond which the
// port's law starts, and the sojourn its standing queue is held within.
type ResponseTarget struct {
	// Seconds is a fixed target (> 0, at most MaxResponseTarget); 0 with
	// Auto false: no law of its own (the node's resource law alone).
	Seconds float64
	// Auto learns the target: Params.TargetFactor × the port's no-load
	// p95, at least MinAutoTarget; Params.InitialTarget until it is learnt.
	Auto bool
}

// On reports whether the port has a law of its own.
func (t ResponseTarget) On() bool { return t.Auto || t.Seconds > 0 }

// String returns "auto", "50ms" or "off".
func (t ResponseTarget) String() string {
	switch {
	case t.Auto:
		return "auto"
	case t.Seconds > 0:
		return fmt.Sprintf("%gms", t.Seconds*1000)
	}
	return "off"
}

// Limits of the response-time targets (docs/controller.md §7).
const (
	// MinAutoTarget floors an auto target (seconds).
	MinAutoTarget = 0.001
	// MaxResponseTarget bounds any target (seconds).
	MaxResponseTarget = 30.0
)

// baseline is a port's no-load p95, learnt for an auto target from quiet
// ticks whose queue did not grow.
type baseline struct {
	value float64 // seconds
	ok    bool
	quiet int  // consecutive ticks in which no law shed
	shed  bool // a law has shed since the port was added
}

// The baseline's learning (docs/controller.md §2, §7).
const (
	baselineDown   = 0.5
	baselineUp     = 0.05
	baselineQuiet  = 3
	steadySlack    = 0.1
	steadyRequests = 2
)

// steady reports whether the tick's queue did not grow beyond the slack:
// its end's in flight against prev, the previous tick's (−1: none, then
// requests against answers; docs/controller.md §2 says why in flight).
func steady(r PortResponse, prev float64) bool {
	grew := r.Requests - r.Responses
	if prev >= 0 {
		grew = r.Inflight - prev
	}
	return r.Responses > 0 && grew <= steadySlack*r.Responses+steadyRequests
}

// learn updates the baseline from a tick of r, prev the requests in flight
// at the previous tick's end (−1: none); busy is true while any law sheds.
// The first steady quiet tick teaches it whatever its p95 (a service that
// takes 200 ms is slow, not overloaded); later ones within the target move it.
// Quiet: no law shed in the last baselineQuiet ticks, or ever, at a start.
func (b *baseline) learn(r PortResponse, prev float64, busy bool, target float64) {
	if busy {
		b.quiet, b.shed = 0, true
		return
	}
	if b.quiet++; ((b.ok || b.shed) && b.quiet < baselineQuiet) || !r.Available || r.P95 <= 0 || !steady(r, prev) {
		return
	}
	switch m := r.P95; {
	case !b.ok:
		b.value, b.ok = m, true
	case m > target:
	case m < b.value:
		b.value += baselineDown * (m - b.value)
	default:
		b.value += baselineUp * (m - b.value)
	}
}

// targetFor returns the target in force for tgt (seconds; 0: none).
func (b *baseline) targetFor(tgt ResponseTarget, prm *Params) float64 {
	switch {
	case tgt.Seconds > 0:
		return tgt.Seconds
	case !tgt.Auto:
		return 0
	case b.ok:
		return math.Min(MaxResponseTarget, math.Max(MinAutoTarget, prm.TargetFactor*b.value))
	}
	return prm.InitialTarget.Seconds()
}
