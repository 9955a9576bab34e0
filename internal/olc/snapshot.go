package olc

import "time"

// Snapshot is one tick's view of the node: every canonical signal is either a
// value (Valid[sig] true) or unavailable. A zero never stands in for "could
// not read".
type Snapshot struct {
	// At is when sampling finished; it carries the monotonic clock reading.
	At time.Time
	// Interval is the measured time since the previous sample (monotonic);
	// 0 on the first sample, when no rate or delta can be computed.
	Interval time.Duration
	// Values holds each signal's value in its canonical unit; read it only
	// where Valid is true.
	Values [NumSignals]float64
	// Valid marks the signals that were available this tick.
	Valid [NumSignals]bool
	// AcceptQueueFill is the accept-queue fill (fraction 0..1) per protected
	// TCP port that had at least one listener; ports without a listener are
	// absent.
	AcceptQueueFill map[uint16]float64
	// CgroupQuotaCPUs is what cgroup_cpu_usage_of_quota is a share of: the
	// watched cgroup's CPU quota in CPUs (quota ÷ period), bounded by the
	// CPUs it may run on; 0 when that signal is unavailable. A change
	// between ticks is a change of the cgroup's capacity.
	CgroupQuotaCPUs float64
	// CgroupThrottleGap is the wall time (seconds, 0 up to the CFS period)
	// the watched cgroup's tasks waited for their quota per throttled CFS
	// period over the interval, from cpu.stat (docs/signals.md); 0 when no
	// period was throttled or the counters are unavailable. A request that
	// arrives while the cgroup is throttled waits it out: at its quota a
	// service's response times hold this gap without any queue.
	CgroupThrottleGap float64
	// Errors lists the sources that could not be read this tick. A source
	// that is known to be absent on this node (PSI disabled, no cgroup quota)
	// is not an error: its signals are simply unavailable.
	Errors []SourceError
}

// SourceError is a failure to read one source ("proc_stat", "loadavg",
// "psi_cpu", "cgroup", "netstat", "sock_diag", …) in one tick.
type SourceError struct {
	// Source is a short stable name, used as a metrics label.
	Source string
	// Err is the underlying error, wrapped with the path read.
	Err error
}

// Get returns the signal's value and whether it was available.
func (s *Snapshot) Get(sig Signal) (float64, bool) {
	if sig >= NumSignals || !s.Valid[sig] {
		return 0, false
	}
	return s.Values[sig], true
}

// Set records v as the signal's value and marks it available.
func (s *Snapshot) Set(sig Signal, v float64) {
	if sig >= NumSignals {
		return
	}
	s.Values[sig] = v
	s.Valid[sig] = true
}

// Unset marks the signal unavailable.
func (s *Snapshot) Unset(sig Signal) {
	if sig >= NumSignals {
		return
	}
	s.Values[sig] = 0
	s.Valid[sig] = false
}
