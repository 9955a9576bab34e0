// Package adaptive turns one tick's measurements into drop probabilities:
// per port, a law on the port's measured capacity and queue; per node, a PI
// law on the resource signals whose pass rate caps every port's. The
// controller is pure and deterministic: Step reads time only from the
// snapshot and keeps no clock, no randomness and no goroutines, so tests,
// `olcd-sim simulate` and the daemon drive the same code. docs/controller.md
// describes the law; docs/config.md the keys.
package adaptive

import (
	"fmt"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/pressure"
)

// PortStats are one port's datapath counts since the previous tick.
type PortStats struct {
	// New counts new connections (TCP SYNs without ACK, or UDP requests)
	// seen this tick, retransmitted SYNs included, dropped ones included.
	New uint64
	// Reused counts the requests started on open connections (the request
	// gate's request starts, scaled by the timing sample rate).
	Reused uint64
	// Resets counts the request starts the request gate shed.
	Resets uint64
	// Retransmits counts the SYNs among New that retransmit a SYN the
	// datapath dropped: a client asking again, not more work.
	Retransmits uint64
	// Dropped counts the SYNs among New the datapath dropped (enforce mode;
	// marked and would-drop SYNs pass), Rejected those among them answered
	// with a reset (the reject action): their clients learn at once.
	Dropped, Rejected uint64
	// Ceiled counts the SYNs among Dropped the port's ceiling on requests
	// in flight refused (PortDecision.InFlightCeiling; observe: would).
	Ceiled uint64
	// Response is the port's measured queue over the tick (response
	// timing); the zero value (unavailable) when the port is not timed.
	Response PortResponse
}

// PortConfig is one protected port as the controller sees it.
type PortConfig struct {
	// Key is the port; keys are unique within a Config.
	Key olc.PortKey
	// Class is the port's priority class.
	Class olc.Class
	// Target is the port's response-time target; the zero value leaves
	// the port to the node's resource law alone.
	Target ResponseTarget
}

// Config is everything the controller needs. Build it with
// rules.Config.ControllerConfig in the daemon, or by hand in tests.
type Config struct {
	// Interval is the nominal tick interval (> 0). Rates use the snapshot's
	// measured Interval, and this when a snapshot has none.
	Interval time.Duration
	// Thresholds holds each signal's target in its canonical unit (pressure
	// 1); 0: the signal does not drive shedding.
	Thresholds [olc.NumSignals]float64
	// Params are the law's parameters; start from DefaultParams.
	Params Params
	// Ports lists the protected ports; keys must be unique.
	Ports []PortConfig
}

// SignalState is one signal with a threshold as a tick evaluated it (internal/pressure).
type SignalState = pressure.Signal

// PortDecision is one protected port's outcome of a tick.
type PortDecision struct {
	// Key is the port.
	Key olc.PortKey
	// Class is the port's priority class.
	Class olc.Class
	// DropProbability is the share of the port's new work (SYNs, request
	// starts with the request gate) to shed, 0..1 − MinPassRate: the larger
	// of QueueP and the class share of the node's resource law. Under
	// RetransmitsLast it is QueueP, 0..1, and applies to retransmits alone:
	// every first attempt passes, so MinPassRate holds.
	DropProbability float64
	// Demand is the port's first attempts per second (new connections
	// without SYN retransmits, plus request starts on open connections):
	// the weight the class split of the node's p used.
	Demand float64
	// ResponseTarget is the response-time target in force (seconds; 0
	// when the port has none): fixed, or auto from Baseline.
	ResponseTarget float64
	// Baseline is the port's learnt no-load p95 (seconds; 0 until learnt
	// or without an auto target).
	Baseline float64
	// QueueP is the drop probability the port's own law asks for (0..1 −
	// MinPassRate; 0..1 under RetransmitsLast).
	QueueP float64
	// Retransmits is what DropProbability applies to, as the datapath treats
	// a SYN retransmitted after a drop: as a first attempt; shed, while first
	// attempts meet the probability; or last, first attempts all passing and
	// retransmits meeting it (docs/controller.md §1).
	Retransmits olc.Retransmits
	// Capacity is the port's capacity μ̂ measured while saturated: the most
	// requests per second it answered over the saturated ticks of the last
	// Params.CapacityWindow, or the last such figure; 0 until saturated once.
	Capacity float64
	// ConnCapacity is Capacity in new work (connections, or request
	// starts) per second: Capacity over the answers per admitted start
	// measured over the same window (0 when unknown).
	ConnCapacity float64
	// CapacityAge is how long ago (seconds) the port was last saturated:
	// Capacity is a figure of that moment. Meaningful when Capacity > 0.
	CapacityAge float64
	// InFlightCeiling is the requests in flight (≥ 1; 0: none) at which the
	// datapath refuses new connections for the port's law while it sheds,
	// and after while the clients it refused are due back
	// (docs/controller.md §1, "The ceiling"): the share of N* that holds the
	// p95 at the target, or above it the standing queue's excess as it drains
	// over a retransmit timeout, rounded up.
	InFlightCeiling int
}

// SYNRetransmitTimeout is the delay of a dropped SYN's first retransmit
// (seconds; docs/controller.md §7).
const SYNRetransmitTimeout = 1.0

// Decision is the outcome of one Step (or Onset).
type Decision struct {
	// At is the snapshot's time.
	At time.Time
	// Signals lists every signal that has a threshold, in canonical order.
	Signals []SignalState
	// Pressure is this tick's node pressure: the largest of the available,
	// corroborated signals (1 = at the target; 0 when not PressureAvailable).
	Pressure float64
	// PressureAvailable is false when no signal with a threshold had a
	// usable, corroborated value this tick; the node's p then decays.
	PressureAvailable bool
	// Driver is the signal that set Pressure (when PressureAvailable).
	Driver olc.Signal
	// Overloaded is true from overload_start to overload_end: while the
	// node's resource law or any port's law sheds.
	Overloaded bool
	// OverloadSince is when the current overload started (zero: not Overloaded).
	OverloadSince time.Time
	// DropProbability is the node's resource law's share of new work to
	// shed, 0..1 − MinPassRate, split over the classes into Classes.
	DropProbability float64
	// Classes holds each class's drop probability (indexed by Class).
	Classes [olc.NumClasses]float64
	// Ports holds one entry per configured port, in configuration order.
	Ports []PortDecision
	// Reason says in words why p is what it is.
	Reason string
	// Events lists what the decision log should record for this tick.
	Events []Event
}

// EventKind is the kind of a decision-log event.
type EventKind uint8

// The event kinds.
const (
	// EventOverloadStart: a law starts shedding.
	EventOverloadStart EventKind = iota + 1
	// EventOverloadContinue: the overload is still on; repeated every
	// Params.ContinueEvery.
	EventOverloadContinue
	// EventOverloadEnd: every law is back at pass rate 1.
	EventOverloadEnd
	// EventProbabilityChange: a port's (or the node's) p moved by more than
	// Params.RecordChange since its last record, or reached 0.
	EventProbabilityChange
)

var eventNames = [...]string{EventOverloadStart: "overload_start", EventOverloadContinue: "overload_continue",
	EventOverloadEnd: "overload_end", EventProbabilityChange: "probability_change"}

// String returns the decision log's stable name, e.g. "overload_start".
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one decision-log record.
type Event struct {
	// Kind says which event this is.
	Kind EventKind
	// At is the tick's time.
	At time.Time
	// Reason says in words what happened and why.
	Reason string
	// Pressure is the node pressure at the time (0 when unavailable).
	Pressure float64
	// DropProbability is the node-level p after this tick.
	DropProbability float64
	// Signals are the signal values of the tick (shared with the
	// Decision; do not modify).
	Signals []SignalState
	// OverloadSince is the start of the overload the event belongs to (zero
	// for a probability change outside an overload).
	OverloadSince time.Time
	// Port is the port of a probability_change; the zero PortKey stands for
	// the node-level p.
	Port olc.PortKey
	// Class is the port's class (probability_change of a port only).
	Class olc.Class
	// From and To are the recorded and the new probability (probability_change only).
	From, To float64
}
