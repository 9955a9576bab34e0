package olc

import (
	"fmt"
	"math"
)

// Signal identifies one canonical pressure signal. Names and units are fixed by
// ../shared/cases/README.md and are used unchanged in config keys, metrics
// labels, traces and the status output. String returns the canonical name.
type Signal uint8

// The canonical signals. Fractions are 0..1 (never percent or per-mille),
// durations are seconds, rates are per second.
const (
	// CPUBusy is the share of all CPUs' time not idle or iowait over the
	// interval (fraction 0..1). Steal counts as busy; guest and guest_nice
	// are already inside user and nice and are not added again.
	CPUBusy Signal = iota
	// Load1 is the 1-minute load average from /proc/loadavg (tasks).
	Load1
	// Load1PerCore is Load1 divided by the number of online CPUs (tasks).
	Load1PerCore
	// Runnable is procs_running from /proc/stat (tasks).
	Runnable
	// RunqPerCore is Runnable divided by the number of online CPUs (tasks).
	RunqPerCore

	// PSICPUSomeAvg10 is /proc/pressure/cpu "some avg10" / 100 (fraction 0..1).
	PSICPUSomeAvg10
	// PSICPUFullAvg10 is /proc/pressure/cpu "full avg10" / 100 (fraction 0..1).
	PSICPUFullAvg10
	// PSIMemorySomeAvg10 is /proc/pressure/memory "some avg10" / 100 (fraction 0..1).
	PSIMemorySomeAvg10
	// PSIMemoryFullAvg10 is /proc/pressure/memory "full avg10" / 100 (fraction 0..1).
	PSIMemoryFullAvg10
	// PSIIOSomeAvg10 is /proc/pressure/io "some avg10" / 100 (fraction 0..1).
	PSIIOSomeAvg10
	// PSIIOFullAvg10 is /proc/pressure/io "full avg10" / 100 (fraction 0..1).
	PSIIOFullAvg10

	// PSICPUSome is Δ"some total" (µs) of /proc/pressure/cpu divided by the
	// interval: the share of the interval stalled (fraction 0..1).
	PSICPUSome
	// PSICPUFull is the "full" counterpart of PSICPUSome (fraction 0..1).
	PSICPUFull
	// PSIMemorySome is Δ"some total" of /proc/pressure/memory over the interval (fraction 0..1).
	PSIMemorySome
	// PSIMemoryFull is Δ"full total" of /proc/pressure/memory over the interval (fraction 0..1).
	PSIMemoryFull
	// PSIIOSome is Δ"some total" of /proc/pressure/io over the interval (fraction 0..1).
	PSIIOSome
	// PSIIOFull is Δ"full total" of /proc/pressure/io over the interval (fraction 0..1).
	PSIIOFull

	// CgroupCPUUsageOfQuota is Δusage / (interval × quota CPUs) of the
	// watched cgroup (fraction; may exceed 1 slightly through accounting
	// jitter). Unavailable when the cgroup has no quota.
	CgroupCPUUsageOfQuota
	// CgroupThrottledRatio is Δnr_throttled / Δnr_periods (fraction 0..1).
	// Unavailable when the keys are missing or Δnr_periods is 0.
	CgroupThrottledRatio
	// CgroupThrottledS is the Δ throttled time over the interval (seconds);
	// v1 throttled_time (ns) and v2 throttled_usec (µs) are converted once.
	CgroupThrottledS

	// CgroupPSICPUSomeAvg10 is the watched cgroup's cpu.pressure "some avg10" / 100 (v2 only).
	CgroupPSICPUSomeAvg10
	// CgroupPSICPUFullAvg10 is the watched cgroup's cpu.pressure "full avg10" / 100 (v2 only).
	CgroupPSICPUFullAvg10
	// CgroupPSIMemorySomeAvg10 is the watched cgroup's memory.pressure "some avg10" / 100 (v2 only).
	CgroupPSIMemorySomeAvg10
	// CgroupPSIMemoryFullAvg10 is the watched cgroup's memory.pressure "full avg10" / 100 (v2 only).
	CgroupPSIMemoryFullAvg10
	// CgroupPSIIOSomeAvg10 is the watched cgroup's io.pressure "some avg10" / 100 (v2 only).
	CgroupPSIIOSomeAvg10
	// CgroupPSIIOFullAvg10 is the watched cgroup's io.pressure "full avg10" / 100 (v2 only).
	CgroupPSIIOFullAvg10
	// CgroupPSICPUSome is Δ"some total" of the cgroup's cpu.pressure over the interval (fraction 0..1).
	CgroupPSICPUSome
	// CgroupPSICPUFull is Δ"full total" of the cgroup's cpu.pressure over the interval (fraction 0..1).
	CgroupPSICPUFull
	// CgroupPSIMemorySome is Δ"some total" of the cgroup's memory.pressure over the interval (fraction 0..1).
	CgroupPSIMemorySome
	// CgroupPSIMemoryFull is Δ"full total" of the cgroup's memory.pressure over the interval (fraction 0..1).
	CgroupPSIMemoryFull
	// CgroupPSIIOSome is Δ"some total" of the cgroup's io.pressure over the interval (fraction 0..1).
	CgroupPSIIOSome
	// CgroupPSIIOFull is Δ"full total" of the cgroup's io.pressure over the interval (fraction 0..1).
	CgroupPSIIOFull

	// ListenOverflowsPerS is Δ TcpExt ListenOverflows of /proc/net/netstat
	// per second (1/s): SYNs or final ACKs the kernel refused because an
	// accept queue was full.
	ListenOverflowsPerS
	// AcceptQueueFill is the largest accept-queue fill (current queue ÷
	// backlog) over the listeners of the protected TCP ports (fraction 0..1).
	AcceptQueueFill

	// ResponseTimeP50 is the median response time (seconds) over the tick
	// of the worst protected port with enough samples: the time from a
	// request's first byte reaching the node to the first byte of its
	// answer leaving it, measured in the datapath (bpf/resp.h). Not read by
	// the sampler: the daemon sets it from the datapath's histograms
	// (internal/resptime). Unavailable when no timed port has the minimum
	// of samples (datapath.response_min_samples), never 0.
	ResponseTimeP50
	// ResponseTimeP95 is the 95th percentile, as ResponseTimeP50 (seconds).
	ResponseTimeP95
	// ResponseTimeP99 is the 99th percentile, as ResponseTimeP50 (seconds).
	ResponseTimeP99
	// RequestsPerS is the rate of requests timed on the protected ports,
	// summed, scaled by the sample rate (1/s).
	RequestsPerS
	// InflightRequests is the number of requests outstanding on the
	// protected ports at the end of the tick, summed, scaled by the sample
	// rate (requests).
	InflightRequests

	// NumSignals is the number of canonical signals; it sizes the per-signal
	// arrays of Snapshot and of the controller's thresholds.
	NumSignals
)

// Unit is the unit a signal's value is expressed in.
type Unit uint8

// The units of the canonical signals.
const (
	// UnitFraction is a dimensionless share, 0..1.
	UnitFraction Unit = iota
	// UnitTasks is a count of tasks (load average, run queue).
	UnitTasks
	// UnitSeconds is a duration in seconds.
	UnitSeconds
	// UnitPerSecond is an event rate in 1/s.
	UnitPerSecond
	// UnitRequests is a count of requests.
	UnitRequests
)

var unitNames = []string{"fraction", "tasks", "seconds", "per_second", "requests"}

// String returns the unit as written in docs, the status document and the
// metrics' unit label: "fraction", "tasks", "seconds", "per_second" or
// "requests" (or "unit(N)").
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("unit(%d)", uint8(u))
}

// MarshalText returns the unit's name; an invalid unit is an error.
func (u Unit) MarshalText() ([]byte, error) {
	if int(u) >= len(unitNames) {
		return nil, invalid("unit", uint8(u))
	}
	return []byte(unitNames[u]), nil
}

// UnmarshalText parses a unit's name. Errors: any other text, named with
// the accepted ones.
func (u *Unit) UnmarshalText(text []byte) error {
	i, err := parseName("unit", string(text), unitNames)
	if err != nil {
		return err
	}
	*u = Unit(i)
	return nil
}

var signalNames = [NumSignals]string{
	CPUBusy:                  "cpu_busy",
	Load1:                    "load1",
	Load1PerCore:             "load1_per_core",
	Runnable:                 "runnable",
	RunqPerCore:              "runq_per_core",
	PSICPUSomeAvg10:          "psi_cpu_some_avg10",
	PSICPUFullAvg10:          "psi_cpu_full_avg10",
	PSIMemorySomeAvg10:       "psi_memory_some_avg10",
	PSIMemoryFullAvg10:       "psi_memory_full_avg10",
	PSIIOSomeAvg10:           "psi_io_some_avg10",
	PSIIOFullAvg10:           "psi_io_full_avg10",
	PSICPUSome:               "psi_cpu_some",
	PSICPUFull:               "psi_cpu_full",
	PSIMemorySome:            "psi_memory_some",
	PSIMemoryFull:            "psi_memory_full",
	PSIIOSome:                "psi_io_some",
	PSIIOFull:                "psi_io_full",
	CgroupCPUUsageOfQuota:    "cgroup_cpu_usage_of_quota",
	CgroupThrottledRatio:     "cgroup_throttled_ratio",
	CgroupThrottledS:         "cgroup_throttled_s",
	CgroupPSICPUSomeAvg10:    "cgroup_psi_cpu_some_avg10",
	CgroupPSICPUFullAvg10:    "cgroup_psi_cpu_full_avg10",
	CgroupPSIMemorySomeAvg10: "cgroup_psi_memory_some_avg10",
	CgroupPSIMemoryFullAvg10: "cgroup_psi_memory_full_avg10",
	CgroupPSIIOSomeAvg10:     "cgroup_psi_io_some_avg10",
	CgroupPSIIOFullAvg10:     "cgroup_psi_io_full_avg10",
	CgroupPSICPUSome:         "cgroup_psi_cpu_some",
	CgroupPSICPUFull:         "cgroup_psi_cpu_full",
	CgroupPSIMemorySome:      "cgroup_psi_memory_some",
	CgroupPSIMemoryFull:      "cgroup_psi_memory_full",
	CgroupPSIIOSome:          "cgroup_psi_io_some",
	CgroupPSIIOFull:          "cgroup_psi_io_full",
	ListenOverflowsPerS:      "listen_overflows_per_s",
	AcceptQueueFill:          "accept_queue_fill",
	ResponseTimeP50:          "response_time_p50",
	ResponseTimeP95:          "response_time_p95",
	ResponseTimeP99:          "response_time_p99",
	RequestsPerS:             "requests_per_s",
	InflightRequests:         "inflight_requests",
}

var signalByName = func() map[string]Signal {
	m := make(map[string]Signal, NumSignals)
	for s, n := range signalNames {
		m[n] = Signal(s)
	}
	return m
}()

// String returns the canonical name, e.g. "psi_cpu_some_avg10".
func (s Signal) String() string {
	if s < NumSignals {
		return signalNames[s]
	}
	return fmt.Sprintf("signal(%d)", uint8(s))
}

// ParseSignal returns the signal with the canonical name. Errors: no
// signal has that name (the error lists the canonical names).
func ParseSignal(name string) (Signal, error) {
	if s, ok := signalByName[name]; ok {
		return s, nil
	}
	_, err := parseName("signal", name, signalNames[:])
	return 0, err
}

// MarshalText returns the canonical name; an invalid signal is an error.
func (s Signal) MarshalText() ([]byte, error) {
	if s >= NumSignals {
		return nil, invalid("signal", uint8(s))
	}
	return []byte(signalNames[s]), nil
}

// UnmarshalText parses a canonical name as ParseSignal does.
func (s *Signal) UnmarshalText(text []byte) error {
	v, err := ParseSignal(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Signals returns every canonical signal in declaration order.
func Signals() []Signal {
	out := make([]Signal, NumSignals)
	for i := range out {
		out[i] = Signal(i)
	}
	return out
}

// Unit returns the unit of the signal's values.
func (s Signal) Unit() Unit {
	switch s {
	case Load1, Load1PerCore, Runnable, RunqPerCore:
		return UnitTasks
	case CgroupThrottledS, ResponseTimeP50, ResponseTimeP95, ResponseTimeP99:
		return UnitSeconds
	case ListenOverflowsPerS, RequestsPerS:
		return UnitPerSecond
	case InflightRequests:
		return UnitRequests
	}
	return UnitFraction
}

// IsFraction reports whether the signal is a share in 0..1, so that a
// threshold above 1 is a unit mistake (percent or per-mille).
func (s Signal) IsFraction() bool { return s.Unit() == UnitFraction }

// MaxUsableFraction is the largest value a usable sample of a fraction
// takes: accounting jitter pushes an honest fraction a little over 1
// (docs/controller.md §7).
const MaxUsableFraction = 1.05

// Usable reports whether v is a sample of s the controller uses: finite,
// not negative, and for a fraction not above MaxUsableFraction.
func (s Signal) Usable(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 && (!s.IsFraction() || v <= MaxUsableFraction)
}

// IsCgroup reports whether the signal describes the watched cgroup rather
// than the whole node.
func (s Signal) IsCgroup() bool { return s >= CgroupCPUUsageOfQuota && s <= CgroupPSIIOFull }
