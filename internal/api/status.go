package api

import (
	"time"
)

// Status is the JSON document of GET /v1/status and `olcd status --json`.
// Rates are per second over the last tick; probabilities and shares are
// fractions 0..1.
type Status struct {
	// Version is the daemon's build version.
	Version string `json:"version"`
	// Mode is the global mode: "off", "observe" or "enforce".
	Mode string `json:"mode"`
	// ConfigSource is the config file path, or "embedded default".
	ConfigSource string `json:"config_source"`
	// Overrides lists the live overrides (PATCH /v1/config, POST /v1/mode)
	// applied since the last load of the config file, oldest first.
	Overrides []Override `json:"overrides"`
	// ReloadRefused describes the last reload of the config file that was
	// refused (the running config stayed); absent once a reload succeeds.
	ReloadRefused *ReloadFailure `json:"reload_refused,omitempty"`
	// RestartPending lists the settings the config in force changed since
	// the start that only a start applies ("datapath", "metrics.address",
	// …): the daemon runs them as it started, and the next start takes the
	// new values (a changed datapath section: that start recreates the
	// pinned maps it resizes and takes the datapath over).
	RestartPending []string `json:"restart_pending,omitempty"`
	// IntervalS is the tick interval in seconds.
	IntervalS float64 `json:"interval_s"`
	// StaleAfterS is heartbeat.stale_after in seconds: a tick older than
	// this and the datapath passes everything.
	StaleAfterS float64 `json:"stale_after_s"`
	// Ticks counts the ticks since start.
	Ticks uint64 `json:"ticks"`
	// UpdatedAt is when the last tick finished.
	UpdatedAt time.Time `json:"updated_at"`
	// StartedAt is when the daemon started.
	StartedAt time.Time `json:"started_at"`
	// Overload is the controller's overload state.
	Overload OverloadStatus `json:"overload"`
	// Signals lists every signal with a threshold, then every other
	// available signal (without threshold and pressure).
	Signals []SignalStatus `json:"signals"`
	// Classes lists the drop probability per priority class.
	Classes []ClassStatus `json:"classes"`
	// Ports lists the protected ports with their counters.
	Ports []PortStatus `json:"ports"`
	// Exceptions lists the exempt ports ("tcp/9100"; a management port
	// not named in the port list as "tcp/22 (management)") and source
	// prefixes ("from 10.0.0.0/8").
	Exceptions []string `json:"exceptions"`
	// ListenersExempt lists, under ports: auto, the listening ports left
	// unprotected because an exception names them (SSH by default), with
	// the reason.
	ListenersExempt []ExemptListener `json:"listeners_exempt,omitempty"`
	// Interfaces lists the datapath attachments.
	Interfaces []InterfaceStatus `json:"interfaces"`
	// InterfacesWaiting lists the interfaces of the configured list that
	// do not exist (deleted while olcd runs): they are attached when they
	// appear.
	InterfacesWaiting []string `json:"interfaces_waiting,omitempty"`
	// ResponseTiming describes the datapath's response timing and its
	// flow table; absent when timing is off (datapath.response_sample: 0).
	ResponseTiming *ResponseTimingStatus `json:"response_timing,omitempty"`
	// Unclassified counts packets the datapath could not parse (passed)
	// since start.
	Unclassified uint64 `json:"unclassified_total"`
	// RejectLimited counts SYNs the reject action dropped instead of
	// answering, over its per-CPU rate limit (action.reject_rate).
	RejectLimited uint64 `json:"reject_limited_total"`
	// SampleErrors lists the sources that could not be read in the last
	// tick, as "source: error".
	SampleErrors []string `json:"sample_errors,omitempty"`
	// LB is what load balancers are told (GET /v1/lb has the details).
	LB *LBStatus `json:"lb,omitempty"`
}

// Override is one live change on top of the config file.
type Override struct {
	// At is when it was applied.
	At time.Time `json:"at"`
	// Kind is "mode" or "patch".
	Kind string `json:"kind"`
	// Value is the new mode or the patch document as sent.
	Value string `json:"value"`
}

// ReloadFailure is a refused reload of the config file.
type ReloadFailure struct {
	// At is when the reload was refused.
	At time.Time `json:"at"`
	// Trigger is "SIGHUP", "file change" or "admin API".
	Trigger string `json:"trigger"`
	// Error is the refusal in one line.
	Error string `json:"error"`
	// Problems lists every config problem with file:line, when the file
	// was invalid.
	Problems []string `json:"problems,omitempty"`
}

// ExemptListener is a listening port that ports: auto does not protect
// because an exception names it.
type ExemptListener struct {
	// Proto is "tcp".
	Proto string `json:"proto"`
	// Port is the listening port.
	Port uint16 `json:"port"`
	// Reason is the setting that exempts it: "exceptions.ports" or
	// "exceptions.management" (a port through which operators reach the
	// node; list it under ports: to protect it).
	Reason string `json:"reason"`
}

// OverloadStatus is the controller's view of the node.
type OverloadStatus struct {
	// Active is true while the node is shedding (or, in observe mode,
	// would shed).
	Active bool `json:"active"`
	// Since is when the current overload started; zero when not active.
	Since *time.Time `json:"since,omitempty"`
	// Pressure is the node pressure the control law acted on (1 = at the
	// threshold).
	Pressure float64 `json:"pressure"`
	// DropProbability is the node-level share of new work to shed (0..1).
	DropProbability float64 `json:"drop_probability"`
	// Bound is the highest drop probability the controller may write,
	// 1 − controller.min_pass_rate (0..1).
	Bound float64 `json:"drop_probability_bound"`
	// Reason says in words which signal drives the state.
	Reason string `json:"reason,omitempty"`
}

// SignalStatus is one canonical signal in the last tick.
type SignalStatus struct {
	// Name is the canonical signal name, e.g. "cpu_busy".
	Name string `json:"name"`
	// Unit is "fraction", "tasks", "seconds" or "per_second".
	Unit string `json:"unit"`
	// Available is false when the signal could not be read (or was an
	// invalid sample) this tick.
	Available bool `json:"available"`
	// Value is the signal's value in its unit; null when unavailable.
	Value *float64 `json:"value"`
	// Threshold is the configured threshold; null when none is set.
	Threshold *float64 `json:"threshold"`
	// Pressure is value ÷ threshold; null without threshold or value.
	Pressure *float64 `json:"pressure"`
	// Corroborated is false when the signal is over its threshold but the
	// corroboration rule discounted it (e.g. load without CPU pressure).
	Corroborated bool `json:"corroborated"`
	// Reason says why an unavailable signal is unavailable where olcd
	// knows, e.g. "no listener on tcp/8080" for accept_queue_fill; empty
	// otherwise.
	Reason string `json:"reason,omitempty"`
}

// ClassStatus is the drop probability of one priority class.
type ClassStatus struct {
	// Class is "critical", "normal" or "best-effort".
	Class string `json:"class"`
	// DropProbability is the class's drop probability (0..1).
	DropProbability float64 `json:"drop_probability"`
}

// PortStatus is one protected port.
type PortStatus struct {
	// Proto is "tcp" or "udp".
	Proto string `json:"proto"`
	// Port is the destination port.
	Port uint16 `json:"port"`
	// Class is "critical", "normal" or "best-effort".
	Class string `json:"class"`
	// Mode is the port's effective mode: "off", "observe" or "enforce".
	Mode string `json:"mode"`
	// Action is what shedding does on the port: "drop", "mark" or
	// "reject".
	Action string `json:"action"`
	// Source is "config" or "auto" (discovered listener).
	Source string `json:"source"`
	// DropProbability is the probability written to the datapath (0..1).
	DropProbability float64 `json:"drop_probability"`
	// Retransmits is what DropProbability applies to
	// (adaptive.PortDecision.Retransmits): "as-first" (every new
	// connection alike), "shed" (retransmits of dropped SYNs all shed, first
	// attempts at DropProbability) or "last" (first attempts all pass,
	// retransmits at DropProbability).
	Retransmits string `json:"retransmits"`
	// NewPerS is new connections (or UDP requests) per second, retransmitted
	// SYNs included.
	NewPerS float64 `json:"new_per_s"`
	// UniquePerS is new connections per second without SYN retransmits:
	// the demand the controller sees.
	UniquePerS float64 `json:"unique_per_s"`
	// RetransmitsPerS is retransmitted SYNs of dropped SYNs per second.
	RetransmitsPerS float64 `json:"retransmits_per_s"`
	// DropShare is dropped ÷ new over the last tick (0..1).
	DropShare float64 `json:"drop_share"`
	// WouldDropShare is would-drop (observe mode) ÷ new over the last tick.
	WouldDropShare float64 `json:"would_drop_share"`
	// MarkedShare is marked ÷ new over the last tick.
	MarkedShare float64 `json:"marked_share"`
	// CappedPerS is new connections per second a static cap refused
	// (ports[].caps; reason "cap"), of the drop (or would-drop) share: the
	// rest of it is the adaptive law's.
	CappedPerS float64 `json:"capped_per_s"`
	// RejectedPerS is shed SYNs answered with a RST|ACK per second (reject
	// action; they are also in the drop share).
	RejectedPerS float64 `json:"rejected_per_s"`
	// WouldRejectPerS is would-drop SYNs the reject action would have
	// answered, per second (observe mode).
	WouldRejectPerS float64 `json:"would_reject_per_s"`
	// ExemptPerS is exempt packets (exception sources) per second.
	ExemptPerS float64 `json:"exempt_per_s"`
	// StalePerS is packets passed because the heartbeat was stale, per
	// second.
	StalePerS float64 `json:"stale_per_s"`
	// AcceptQueueFill is the port's accept-queue fill (0..1); null when
	// unknown.
	AcceptQueueFill *float64 `json:"accept_queue_fill,omitempty"`
	// Timed is true when the datapath times this port's responses
	// (protected, timing on, within datapath.response_ports).
	Timed bool `json:"timed"`
	// ResponseTime is the port's response time over the last tick; absent
	// when the port is not timed.
	ResponseTime *ResponseTime `json:"response_time,omitempty"`
	// RequestsPerS is the rate of requests timed, scaled by the sample
	// rate (1/s); absent when the port is not timed.
	RequestsPerS *float64 `json:"requests_per_s,omitempty"`
	// InflightRequests is the number of requests waiting for their first
	// answer byte at the end of the tick, scaled by the sample rate;
	// absent when the port is not timed.
	InflightRequests *float64 `json:"inflight_requests,omitempty"`
	// ResponseHistogram is the port's response-time histogram since it was
	// timed (sampled flows, cumulative): its nonempty buckets, ascending.
	ResponseHistogram []HistogramBucket `json:"response_histogram,omitempty"`
	// ResponseTarget is the p95 the law on the measured queue holds the
	// port at (seconds): fixed, or auto from BaselineS; absent when the
	// port has none (response_target: off).
	ResponseTarget *float64 `json:"response_target_s,omitempty"`
	// ResponseTargetMode is "auto", "off" or the fixed target ("50ms").
	ResponseTargetMode string `json:"response_target"`
	// BaselineS is the port's learnt baseline p95 (seconds); absent until
	// learnt or without an auto target.
	BaselineS *float64 `json:"baseline_p95_s,omitempty"`
	// QueueDropProbability is the share the law on the measured queue asks
	// for (0..1); DropProbability is the larger of it and the resource
	// law's class share.
	QueueDropProbability float64 `json:"queue_drop_probability"`
	// InFlightCeiling is the requests in flight at which the law on the
	// measured queue refuses new connections while it sheds, and after
	// while the clients it refused are due back (the share of N* =
	// capacity × target that holds the p95 at the target, or above it a
	// queue draining; the datapath reads the count per arrival);
	// absent when it holds none. A static caps.in_flight
	// refuses at its own ceiling beside it.
	InFlightCeiling *int `json:"in_flight_ceiling,omitempty"`
	// Capacity is the port's capacity measured while it was saturated
	// (adaptive.PortDecision.Capacity): requests/s, connections/s and how
	// long ago (seconds); absent until the timed port was saturated once.
	Capacity *Capacity `json:"capacity,omitempty"`
	// Totals are the datapath counters since the program was loaded.
	Totals PortTotals `json:"totals"`
	// KeepAlive is the port's demand on connections already open over the
	// last tick; absent when the port is not timed.
	KeepAlive *KeepAlive `json:"keepalive,omitempty"`
}

// KeepAlive is what a timed port's open connections did over the last
// tick (issue 26): the requests that started on a connection already open
// with nothing outstanding, the request gate's demand, and what the gate
// did to them. Rates are scaled by the response sample, like
// RequestsPerS; the totals count sampled flows.
type KeepAlive struct {
	// RequestGate is the port's ports[].request_gate.
	RequestGate bool `json:"request_gate"`
	// ReusedPerS is request starts on open connections per second.
	ReusedPerS float64 `json:"reused_per_s"`
	// ResetsPerS is request starts the request gate shed per second (each
	// connection reset both ways; enforce mode).
	ResetsPerS float64 `json:"resets_per_s"`
	// WouldResetPerS is request starts the gate selected in observe mode,
	// per second.
	WouldResetPerS float64 `json:"would_reset_per_s"`
	// ReusedShare is the share (0..1) of the port's demand that arrived on
	// open connections: request starts on them ÷ (those + new connections
	// without SYN retransmits).
	ReusedShare float64 `json:"reused_share"`
	// Totals are the cumulative counters (sampled flows).
	Totals KeepAliveTotals `json:"totals"`
}

// KeepAliveTotals are a port's cumulative keep-alive counters since the
// port was timed, on sampled flows.
type KeepAliveTotals struct {
	Reused     uint64 `json:"reused"`
	Resets     uint64 `json:"resets"`
	WouldReset uint64 `json:"would_reset"`
}

// Capacity is a port's capacity measured live while it was saturated:
// the figure a load test would give.
type Capacity struct {
	// RequestsPerS is the most requests per second answered over the
	// saturated ticks of the last 3 s (or the last such figure).
	RequestsPerS float64 `json:"requests_per_s"`
	// ConnectionsPerS is the same in new connections per second (0 when
	// unknown).
	ConnectionsPerS float64 `json:"connections_per_s"`
	// AgeS is how long ago the port was last saturated (seconds).
	AgeS float64 `json:"age_s"`
}

// HistogramBucket is one nonempty bucket of a response-time histogram:
// Count responses took at least LoS and less than HiS seconds (HiS null:
// no upper bound, the last bucket).
type HistogramBucket struct {
	LoS   float64  `json:"lo_s"`
	HiS   *float64 `json:"hi_s"`
	Count uint64   `json:"count"`
}

// ResponseTime is one port's response time over the last tick: from a
// request's first byte reaching the node to its answer's first byte
// leaving it. The quantiles are null (unavailable, never 0) when the tick
// had fewer samples than datapath.response_min_samples.
type ResponseTime struct {
	P50S *float64 `json:"p50_s"`
	P95S *float64 `json:"p95_s"`
	P99S *float64 `json:"p99_s"`
	// Samples is the number of responses timed in the tick (sampled
	// flows, not scaled).
	Samples uint64 `json:"samples"`
}

// ResponseTimingStatus is the response timer's configuration and its flow
// table: occupancy (scanned at most every 10 s) and counters since start.
type ResponseTimingStatus struct {
	// Sample is N of "one flow in N is timed".
	Sample uint32 `json:"sample"`
	// MinSamples is the fewest responses a tick needs per port.
	MinSamples int `json:"min_samples"`
	// FlowTableCapacity is how many flows the table holds.
	FlowTableCapacity int `json:"flow_table_capacity"`
	// FlowsTracked is the flows in the table not idle past 120 s;
	// FlowsOutstanding how many of them wait for an answer.
	FlowsTracked     int `json:"flows_tracked"`
	FlowsOutstanding int `json:"flows_outstanding"`
	// FlowTableFill is FlowsTracked ÷ FlowTableCapacity (0..1).
	FlowTableFill float64 `json:"flow_table_fill"`
	// Inserts, Evictions (live flows pushed out), Expired (idle flows
	// replaced) and Forgotten (FIN/RST) count since start.
	Inserts   uint64 `json:"inserts_total"`
	Evictions uint64 `json:"evictions_total"`
	Expired   uint64 `json:"expired_total"`
	Forgotten uint64 `json:"forgotten_total"`
}

// PortTotals are cumulative datapath counters of one port.
type PortTotals struct {
	NewConns       uint64 `json:"new_conns"`
	Passed         uint64 `json:"passed"`
	Dropped        uint64 `json:"dropped"`
	Marked         uint64 `json:"marked"`
	WouldDrop      uint64 `json:"would_drop"`
	Exempt         uint64 `json:"exempt"`
	Stale          uint64 `json:"stale"`
	SYNRetransmits uint64 `json:"syn_retransmits"`
	Rejected       uint64 `json:"rejected"`
	WouldReject    uint64 `json:"would_reject"`
	// Capped counts new connections a static cap refused (ports[].caps):
	// of Dropped in enforce mode, of WouldDrop in observe mode.
	Capped uint64 `json:"capped"`
}

// InterfaceStatus is one datapath attachment.
type InterfaceStatus struct {
	// Name is the interface name.
	Name string `json:"name"`
	// Hook is "xdp" or "tc".
	Hook string `json:"hook"`
	// Mode is "tcx", "clsact", "native" or "generic".
	Mode string `json:"mode"`
	// Egress is how the TC egress program of response timing is attached
	// ("tcx" or "clsact"); absent when timing is off.
	Egress string `json:"egress,omitempty"`
}

// LBStatus is the status's view of what olcd tells load balancers.
type LBStatus struct {
	// AgentAddress is where the HAProxy agent listens; "" when off.
	AgentAddress string `json:"agent_address"`
	// Weight and State are the node-level answer; AgentReply its line.
	// State is the lb package's state word ("ready", "drain", ...).
	Weight     float64 `json:"weight"`
	State      string  `json:"state"`
	AgentReply string  `json:"agent_reply"`
	// AgentAnswers counts the agent's answers since start, by kind
	// ("node", "port", "unknown", "overflow").
	AgentAnswers map[string]uint64 `json:"agent_answers"`
}

// FirstP returns the drop probability a first attempt meets (0..1): a new
// client's chance of being shed. It is DropProbability but under
// Retransmits "last", where first attempts all pass.
func (p PortStatus) FirstP() float64 {
	if p.Retransmits == "last" {
		return 0
	}
	return p.DropProbability
}

// RunningConfig is the JSON document of GET /v1/config: what the config in
// force is made of, for `olcd config show` to render it rather than the file
// on disk, which a refused reload or an edit not yet reloaded leaves
// different. It holds no more than the file and the overrides the operator
// wrote (olcd's config has no secrets), on the root-only admin socket.
type RunningConfig struct {
	// Source is the config file's path, or "embedded default".
	Source string `json:"source"`
	// File is the config file's content as the daemon loaded it at the
	// start or the last successful reload; "" for the embedded default.
	File string `json:"file"`
	// FileDigest is what File sets (rules.Config.Digest): a file on disk
	// with another digest is not the one in force.
	FileDigest string `json:"file_digest"`
	// Overrides lists the live overrides in force, oldest first, each with
	// the document applied (Doc: "mode: off" for a mode override).
	Overrides []ConfigOverride `json:"overrides"`
	// Digest is what the config in force sets: File with every override
	// applied in order.
	Digest string `json:"digest"`
}

// ConfigOverride is one live override of a RunningConfig.
type ConfigOverride struct {
	Override
	// Doc is the partial config document applied.
	Doc string `json:"doc"`
}
