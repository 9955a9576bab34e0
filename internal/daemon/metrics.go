package daemon

import (
	"net/http"
	"runtime"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/resptime"
	"github.com/olcd/olcd/internal/sampler"
)

// sourceDatapathStats is the sample-error source for a failed read of the
// datapath's counters.
const sourceDatapathStats = "datapath_stats"

// metrics holds the daemon's own counters and the collector that reads the
// datapath's counters from the BPF maps at scrape time (so a scrape always
// sees the kernel's current numbers, not the last tick's copy).
type metrics struct {
	reg            *prometheus.Registry
	ticks          prometheus.Counter
	tickSeconds    prometheus.Histogram
	sampleErrors   *prometheus.CounterVec
	reloads        prometheus.Counter
	reloadFailures prometheus.Counter
	onsetDecisions prometheus.Counter
	// interfaceChanges counts attachments made or dropped while running
	// (links.go), by change: "attached" or "detached".
	interfaceChanges *prometheus.CounterVec
	// metricsRefused counts connections to the metrics listener closed
	// at once because maxMetricsConns were open (listen.go).
	metricsRefused prometheus.Counter
	// decisionsFolded counts decision-log records the rate limit folded
	// (decisionlog.go), by kind.
	decisionsFolded *prometheus.CounterVec
}

// newMetrics makes the daemon's own counters and registers them with the
// build information (version) and the Go runtime's and process's
// collectors; New registers the collectors that read the daemon's state.
func newMetrics(version string) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		ticks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "olcd_ticks_total", Help: "Control ticks run (sample, decide, write maps).",
		}),
		tickSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "olcd_tick_duration_seconds",
			Help:    "Wall time of one control tick in seconds.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25},
		}),
		sampleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "olcd_sample_errors_total", Help: "Sources that could not be read in a tick, by source.",
		}, []string{"source"}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "olcd_config_reloads_total", Help: "Successful config reloads (SIGHUP, file change, admin API).",
		}),
		onsetDecisions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "olcd_onset_decisions_total", Help: "Drop probabilities written between ticks by the onset check: overloads started by a surge of new connections, and the steps of draining what the surge queued.",
		}),
		interfaceChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "olcd_interface_changes_total", Help: "Attachments made (an interface appeared, came up or was created again) or dropped (deleted, re-created, no longer selected) while olcd ran, by change.",
		}, []string{"change"}),
		metricsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "olcd_metrics_connections_refused_total", Help: "Connections to the metrics listener closed at once because its connection cap was reached.",
		}),
		decisionsFolded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "olcd_decision_records_folded_total", Help: "Decision-log records not written because of its rate limit, by kind: counted in the next record written (probability changes: merged into it).",
		}, []string{"kind"}),
		reloadFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "olcd_config_reload_failures_total", Help: "Config reloads refused because the file was unreadable or invalid; the running config stayed.",
		}),
	}
	// Every source is exported from the start, at 0: a counter that
	// appears only on the first error breaks rate() and alerts on absence.
	for _, src := range []string{sampler.SourceProcStat, sampler.SourceLoadavg, sampler.SourcePSICPU,
		sampler.SourcePSIMemory, sampler.SourcePSIIO, sampler.SourceNetstat, sampler.SourceSockDiag,
		sampler.SourceCgroup, sampler.SourceCgroupCPU, sampler.SourceCgroupCpuset, sampler.SourceCgroupPSICPU,
		sampler.SourceCgroupPSIMemory, sampler.SourceCgroupPSIIO, sourceDatapathStats} {
		m.sampleErrors.WithLabelValues(src)
	}
	m.decisionsFolded.WithLabelValues("probability_change")
	m.interfaceChanges.WithLabelValues("attached")
	m.interfaceChanges.WithLabelValues("detached")
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "olcd_build_info", Help: "Build information; always 1.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	m.reg.MustRegister(m.ticks, m.tickSeconds, m.sampleErrors, m.reloads, m.reloadFailures, m.onsetDecisions, m.interfaceChanges, m.metricsRefused, m.decisionsFolded, build,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("olcd: metrics at /metrics\n"))
	})
	return mux
}

var (
	portLabels   = []string{"proto", "port", "class"}
	descMode     = prometheus.NewDesc("olcd_mode", "Global mode: 1 for the mode in force, 0 for the others.", []string{"mode"}, nil)
	descSigPress = prometheus.NewDesc("olcd_signal_pressure_ratio", "Signal value divided by its threshold (1 = at the threshold).", []string{"signal"}, nil)
	descSigAvail = prometheus.NewDesc("olcd_signal_available", "1 when the signal had a valid value in the last tick.", []string{"signal"}, nil)
	descSigCorr  = prometheus.NewDesc("olcd_signal_corroborated", "1 when the signal counted towards node pressure (corroboration rules).", []string{"signal"}, nil)
	descPressure = prometheus.NewDesc("olcd_node_pressure_ratio", "Node pressure the control law acted on (1 = at the target).", nil, nil)
	descOverload = prometheus.NewDesc("olcd_overload_active", "1 while the node is overloaded (shedding, or would shed in observe mode).", nil, nil)
	descNodeP    = prometheus.NewDesc("olcd_drop_probability_ratio", "Node-level share of new work to shed (0..1).", nil, nil)
	descClassP   = prometheus.NewDesc("olcd_class_drop_probability_ratio", "Drop probability of a priority class (0..1).", []string{"class"}, nil)
	descPortP    = prometheus.NewDesc("olcd_port_drop_probability_ratio", "Drop probability written to the datapath for a port (0..1); olcd_port_retransmit_rule says what it applies to.", portLabels, nil)
	descRetxRule = prometheus.NewDesc("olcd_port_retransmit_rule", "What a port's drop probability applies to, one series per rule, 1 for the rule in force: as-first (all new work), shed (first attempts; retransmits of dropped SYNs all shed), last (retransmits; first attempts all pass).", append(slices.Clone(portLabels), "rule"), nil)
	descNew      = prometheus.NewDesc("olcd_port_new_connections_total", "New connections (TCP SYN without ACK) or UDP requests seen by the datapath, SYN retransmits included.", portLabels, nil)
	descRetrans  = prometheus.NewDesc("olcd_port_syn_retransmits_total", "Retransmitted SYNs of SYNs the datapath dropped (also in new_connections).", portLabels, nil)
	descPassed   = prometheus.NewDesc("olcd_port_passed_total", "New connections passed (including exempt, marked, would-drop and stale).", portLabels, nil)
	descDropped  = prometheus.NewDesc("olcd_port_dropped_total", "New connections dropped.", portLabels, nil)
	descMarked   = prometheus.NewDesc("olcd_port_marked_total", "New connections marked (DSCP/fwmark) and passed.", portLabels, nil)
	descWould    = prometheus.NewDesc("olcd_port_would_drop_total", "New connections that would have been dropped (observe mode).", portLabels, nil)
	descCapped   = prometheus.NewDesc("olcd_port_capped_total", "New connections a static cap refused (ports[].caps; also in dropped, or would_drop in observe mode).", portLabels, nil)
	descRejected = prometheus.NewDesc("olcd_port_rejected_total", "Dropped SYNs answered with a TCP RST|ACK (reject action; also in dropped).", portLabels, nil)
	descWouldRej = prometheus.NewDesc("olcd_port_would_reject_total", "Would-drop SYNs the reject action would have answered (observe mode; also in would_drop).", portLabels, nil)
	descRejLimit = prometheus.NewDesc("olcd_reject_limited_total", "SYNs the reject action dropped instead of answering: over the per-CPU rate limit (action.reject_rate).", nil, nil)
	descExempt   = prometheus.NewDesc("olcd_port_exempt_total", "New connections from exception sources, always passed.", portLabels, nil)
	descStale    = prometheus.NewDesc("olcd_port_stale_total", "New connections passed because the daemon's heartbeat was stale (fail-open).", portLabels, nil)
	descOtherNew = prometheus.NewDesc("olcd_unprotected_new_connections_total", "New TCP connections to ports without a policy, exception ports included.", nil, nil)
	descOtherEx  = prometheus.NewDesc("olcd_unprotected_exempt_total", "New TCP connections to exception ports without a policy, all passed (the sum of olcd_exception_port_new_connections_total and those of exception ports beyond the datapath's slots).", nil, nil)
	descExcPort  = prometheus.NewDesc("olcd_exception_port_new_connections_total", "New TCP connections to an exception port (exceptions.ports, management) without a policy, all passed: a health check on its own exempt port counts here. Absent for a port the datapath had no free stats slot for (datapath.max_ports taken by protected ports).", []string{"proto", "port"}, nil)
	descUncl     = prometheus.NewDesc("olcd_unclassified_packets_total", "Frames the datapath could not examine (malformed, truncated, too deep); always passed.", nil, nil)
	descAttach   = prometheus.NewDesc("olcd_attachment_info", "Datapath attachments; always 1.", []string{"interface", "hook", "mode"}, nil)
	descOverride = prometheus.NewDesc("olcd_live_overrides", "Live overrides in force on top of the config file.", nil, nil)
	descLastTick = prometheus.NewDesc("olcd_last_tick_timestamp_seconds", "Unix time of the last control tick.", nil, nil)
	descDPErr    = prometheus.NewDesc("olcd_datapath_stats_up", "1 when the datapath counters could be read at scrape time.", nil, nil)

	// Response timing (bpf/resp.h): sampled flows only; the counts are
	// not scaled by the sample rate, the gauges are.
	descRTHist    = prometheus.NewDesc("olcd_port_response_time_seconds", "Time from a request's first byte reaching the node to its answer's first byte leaving it, sampled flows, since the port was timed (the datapath's log-linear buckets folded at powers of two of 1.024 µs).", portLabels, nil)
	descRTTarget  = prometheus.NewDesc("olcd_port_response_target_seconds", "The p95 response time the law on the measured queue holds the port at (fixed, or auto from the baseline); absent without a target.", portLabels, nil)
	descRTBase    = prometheus.NewDesc("olcd_port_response_baseline_seconds", "The port's learnt baseline p95 (auto target); absent until learnt.", portLabels, nil)
	descQueueP    = prometheus.NewDesc("olcd_port_queue_drop_probability_ratio", "Share of new connections the law on the measured queue asks to shed (0..1); the port's drop probability is the larger of it and its class share.", portLabels, nil)
	descCeiling   = prometheus.NewDesc("olcd_port_inflight_ceiling_requests", "Requests in flight at which the law on the measured queue refuses new connections while it sheds (its share of capacity × target that holds the p95 at the target, or above it a queue draining); absent while it holds none.", portLabels, nil)
	descRTQuant   = prometheus.NewDesc("olcd_port_response_time_percentile_seconds", "Response-time percentile (50, 95, 99) over the last tick, the law's input; absent when the tick had too few samples (never 0). Not a summary: over any other window use histogram_quantile on olcd_port_response_time_seconds.", append(slices.Clone(portLabels), "percentile"), nil)
	descRTReq     = prometheus.NewDesc("olcd_port_requests_timed_total", "Requests timed (sampled flows).", portLabels, nil)
	descRTAband   = prometheus.NewDesc("olcd_port_requests_abandoned_total", "Timed requests forgotten unanswered: reset, closed, evicted or idle (sampled flows).", portLabels, nil)
	descReused    = prometheus.NewDesc("olcd_port_request_starts_reused_total", "Requests that started on a connection already open (keep-alive), with nothing outstanding on it (sampled flows): the request gate's demand.", portLabels, nil)
	descResets    = prometheus.NewDesc("olcd_port_request_resets_total", "Request starts on open connections the request gate shed in enforce mode, the connection reset both ways (sampled flows).", portLabels, nil)
	descWouldRst  = prometheus.NewDesc("olcd_port_request_would_reset_total", "Request starts on open connections the request gate would shed in observe mode (sampled flows).", portLabels, nil)
	descRTInfl    = prometheus.NewDesc("olcd_port_inflight_requests", "Requests waiting for their first answer byte at the end of the last tick, scaled by the sample rate.", portLabels, nil)
	descSampleR   = prometheus.NewDesc("olcd_response_timing_sample_ratio", "Share of flows the response timer times (1/N for datapath.response_sample N): divide rate(olcd_port_requests_timed_total) by it to estimate every flow's requests per second.", nil, nil)
	descCapacity  = prometheus.NewDesc("olcd_port_capacity_requests_per_second", "The port's capacity measured while it was saturated: the most requests per second it answered over the saturated ticks of the last 3 s, or the last such figure; absent until saturated once, and for a port with response_target: off.", portLabels, nil)
	descCapAge    = prometheus.NewDesc("olcd_port_capacity_age_seconds", "How long ago the port was last saturated, the moment of olcd_port_capacity_requests_per_second.", portLabels, nil)
	descFlowCap   = prometheus.NewDesc("olcd_flow_table_capacity", "Flows the response timer's table holds.", nil, nil)
	descFlowUsed  = prometheus.NewDesc("olcd_flow_table_flows", "Flows in the response timer's table not idle (last scan, at most 10 s old).", nil, nil)
	descFlowEvent = prometheus.NewDesc("olcd_flow_table_events_total", "Flow table events: inserted, evicted (a live flow pushed out), expired (an idle flow replaced), closed (FIN/RST).", []string{"event"}, nil)
)

// signalDescs are the two families of one signal unit: the value and the
// threshold, each in that unit, so that a family never mixes units.
type signalDescs struct{ value, threshold *prometheus.Desc }

// sigDescs maps each olc.Unit's name (api.SignalStatus.Unit) to its
// families. The suffix is the unit, Prometheus style: ratio for a 0..1
// share, seconds, tasks (load average, run queue), per_second (an event
// rate the controller measured over its tick: the controller's input, not
// a counter's rate, which PromQL would take from node_exporter's
// counter) and requests.
var sigDescs = func() map[string]signalDescs {
	m := map[string]signalDescs{}
	for _, u := range []struct {
		unit   olc.Unit
		suffix string
		what   string
	}{
		{olc.UnitFraction, "ratio", "a share, 0..1"},
		{olc.UnitSeconds, "seconds", "seconds"},
		{olc.UnitTasks, "tasks", "tasks"},
		{olc.UnitPerSecond, "per_second", "events per second over the last tick"},
		{olc.UnitRequests, "requests", "requests"},
	} {
		m[u.unit.String()] = signalDescs{
			value: prometheus.NewDesc("olcd_signal_"+u.suffix,
				"Value of each signal measured in "+u.what+" (docs/signals.md); absent when unavailable.", []string{"signal"}, nil),
			threshold: prometheus.NewDesc("olcd_signal_threshold_"+u.suffix,
				"Configured threshold of each signal measured in "+u.what+".", []string{"signal"}, nil),
		}
	}
	return m
}()

// stateCollector exports the last published status (fresh) and the
// datapath's counters, read from the BPF maps (dp) at scrape time.
type stateCollector struct {
	fresh func() *published
	dp    func() datapath
}

// Describe sends every descriptor the collector may emit.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range sigDescs {
		ch <- d.value
		ch <- d.threshold
	}
	for _, d := range []*prometheus.Desc{descMode, descSigPress, descSigAvail,
		descSigCorr, descPressure, descOverload, descNodeP, descClassP, descPortP, descRetxRule, descNew, descRetrans,
		descPassed, descDropped, descCapped, descMarked, descWould, descRejected, descWouldRej, descRejLimit, descExempt, descStale, descOtherNew, descOtherEx, descExcPort,
		descUncl, descAttach, descOverride, descLastTick, descDPErr, descRTHist, descRTQuant, descRTTarget, descRTBase, descQueueP, descCeiling, descRTReq,
		descRTAband, descReused, descResets, descWouldRst, descRTInfl, descSampleR, descCapacity, descCapAge, descFlowCap, descFlowUsed, descFlowEvent} {
		ch <- d
	}
}

// Collect reads the status and the BPF maps.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	pub := c.fresh()
	if pub == nil {
		return
	}
	st := pub.st
	gauge, counter := emit(ch).gauge, emit(ch).counter
	for _, m := range olc.ModeNames() {
		gauge(descMode, b2f(st.Mode == m), m)
	}
	for _, s := range st.Signals {
		d, ok := sigDescs[s.Unit]
		if !ok {
			continue // a unit without a family: none today (TestSignalFamilies)
		}
		if s.Value != nil {
			gauge(d.value, *s.Value, s.Name)
		}
		if s.Threshold == nil {
			continue
		}
		gauge(d.threshold, *s.Threshold, s.Name)
		gauge(descSigAvail, b2f(s.Available), s.Name)
		gauge(descSigCorr, b2f(s.Corroborated), s.Name)
		if s.Pressure != nil {
			gauge(descSigPress, *s.Pressure, s.Name)
		}
	}
	gauge(descPressure, st.Overload.Pressure)
	gauge(descOverload, b2f(st.Overload.Active))
	gauge(descNodeP, st.Overload.DropProbability)
	for _, cl := range st.Classes {
		gauge(descClassP, cl.DropProbability, cl.Class)
	}
	gauge(descOverride, float64(len(st.Overrides)))
	if !st.UpdatedAt.IsZero() {
		gauge(descLastTick, float64(st.UpdatedAt.UnixNano())/1e9)
	}
	for _, a := range st.Interfaces {
		gauge(descAttach, 1, a.Name, a.Hook, a.Mode)
	}

	dp := c.dp()
	stats, err := dp.Stats()
	gauge(descDPErr, b2f(err == nil))
	if err != nil {
		return
	}
	defer dp.ReleaseStats(stats) // everything below copies what it reads
	for i, p := range st.Ports {
		collectPort(ch, p, stats, pub.keys[i])
	}
	if rt := st.ResponseTiming; rt != nil {
		gauge(descSampleR, 1/float64(max(rt.Sample, 1)))
		gauge(descFlowCap, float64(rt.FlowTableCapacity))
		gauge(descFlowUsed, float64(rt.FlowsTracked))
		counter(descFlowEvent, stats.Flows.Inserts, "inserted")
		counter(descFlowEvent, stats.Flows.Evictions, "evicted")
		counter(descFlowEvent, stats.Flows.Expired, "expired")
		counter(descFlowEvent, stats.Flows.Forgotten, "closed")
	}
	// Exception ports with a slot of their own left "other" in the
	// datapath; the node-wide families keep counting them.
	otherNew, otherEx := stats.Other.NewConns, stats.Other.Exempt
	for k, cn := range stats.ExemptPorts {
		counter(descExcPort, cn.NewConns, k.Proto.String(), strconv.Itoa(int(k.Port)))
		otherNew += cn.NewConns
		otherEx += cn.Exempt
	}
	counter(descOtherNew, otherNew)
	counter(descOtherEx, otherEx)
	counter(descUncl, stats.Unclassified)
	counter(descRejLimit, stats.RejectLimited)
}

// collectPort sends the metrics of one protected port p (key k): its drop
// probability from the status, its counters and response timing from
// stats, read at scrape time.
func collectPort(ch chan<- prometheus.Metric, p api.PortStatus, stats loader.Stats, k olc.PortKey) {
	gauge, counter := emit(ch).gauge, emit(ch).counter
	labels := []string{p.Proto, strconv.Itoa(int(p.Port)), p.Class}
	gauge(descPortP, p.DropProbability, labels...)
	for _, r := range []olc.Retransmits{olc.RetransmitsAsFirst, olc.RetransmitsShed, olc.RetransmitsLast} {
		in := 0.0
		if r.String() == p.Retransmits {
			in = 1
		}
		gauge(descRetxRule, in, append(slices.Clone(labels), r.String())...)
	}
	cn, ok := stats.Ports[k]
	if !ok {
		return
	}
	counter(descNew, cn.NewConns, labels...)
	counter(descRetrans, cn.SYNRetransmits, labels...)
	counter(descPassed, cn.Passed, labels...)
	counter(descDropped, cn.Dropped, labels...)
	counter(descMarked, cn.Marked, labels...)
	counter(descWould, cn.WouldDrop, labels...)
	counter(descRejected, cn.Rejected, labels...)
	counter(descCapped, cn.Capped, labels...)
	counter(descWouldRej, cn.WouldReject, labels...)
	counter(descExempt, cn.Exempt, labels...)
	counter(descStale, cn.Stale, labels...)
	r, ok := stats.Response[k]
	if !ok {
		return
	}
	le := map[float64]uint64{}
	for i, n := range resptime.Fold(r.Buckets) {
		le[resptime.LeBounds[i]] = n
	}
	ch <- prometheus.MustNewConstHistogram(descRTHist, r.Responses, resptime.Sum(r.Buckets), le, labels...)
	counter(descRTReq, r.Requests, labels...)
	counter(descRTAband, r.Abandoned, labels...)
	counter(descReused, r.Reused, labels...)
	counter(descResets, r.Resets, labels...)
	counter(descWouldRst, r.WouldReset, labels...)
	if p.ResponseTarget != nil {
		gauge(descRTTarget, *p.ResponseTarget, labels...)
	}
	if p.BaselineS != nil {
		gauge(descRTBase, *p.BaselineS, labels...)
	}
	gauge(descQueueP, p.QueueDropProbability, labels...)
	if p.InFlightCeiling != nil {
		gauge(descCeiling, float64(*p.InFlightCeiling), labels...)
	}
	if p.Capacity != nil {
		gauge(descCapacity, p.Capacity.RequestsPerS, labels...)
		gauge(descCapAge, p.Capacity.AgeS, labels...)
	}
	if p.InflightRequests != nil {
		gauge(descRTInfl, *p.InflightRequests, labels...)
	}
	if rt := p.ResponseTime; rt != nil {
		for _, q := range []struct {
			v *float64
			q string
		}{{rt.P50S, "50"}, {rt.P95S, "95"}, {rt.P99S, "99"}} {
			if q.v != nil {
				gauge(descRTQuant, *q.v, append(slices.Clone(labels), q.q)...)
			}
		}
	}
}

// emit sends constant metrics, read at scrape time, to a collector's
// channel.
type emit chan<- prometheus.Metric

func (e emit) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func (e emit) counter(d *prometheus.Desc, v uint64, labels ...string) {
	e <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
