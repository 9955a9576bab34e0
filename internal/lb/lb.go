// Package lb tells load balancers how much of its share of new work the node
// takes, from what olcd's controller decided: the pass rate it admits
// (1 − drop probability) becomes a weight, smoothed and floored, and shedding
// at the bound becomes "drain". It speaks HAProxy's agent-check protocol
// (Agent) and builds the JSON report of GET /v1/lb (Report).
//
// The package computes nothing about the node itself: the daemon hands it
// each tick's decision (Input), so what a load balancer hears is exactly
// what the datapath enforces (docs/config.md, "lb").
package lb

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/ranges"
)

// State is the administrative state an answer asks the load balancer for.
type State string

// The states olcd answers with. It never says "down", "fail", "stopped" or
// "maint": whether the service is alive is the health check's business,
// and only an agent that said "down" could bring the server back up.
const (
	// StateReady: send new connections in proportion to the weight
	// (HAProxy's admin state READY, cancelling a DRAIN).
	StateReady State = "ready"
	// StateDrain: send no new connections but keep the established ones
	// and persistence (HAProxy's DRAIN); olcd is shedding at its bound.
	StateDrain State = "drain"
)

// Params shape the weight. The zero value is not valid; start from
// DefaultParams.
type Params struct {
	// Smoothing is the weight (0 < x ≤ 1) of the newest tick in the
	// exponential average of the pass rate; 1 uses the last tick alone.
	Smoothing float64 `yaml:"smoothing" range:"(0, 1]" hint:"1 uses the last tick alone"`
	// MinWeight is the floor of the weight (0 < x ≤ 1): a node whose own
	// noise made it shed everything for a moment still gets this share of
	// its full weight, and so the traffic that shows it has recovered.
	MinWeight float64 `yaml:"min_weight" range:"(0, 1]" suggest:"percent" hint:"the floor keeps a node its share of traffic to show it recovered; 0.1 is the default"`
}

// DefaultParams returns the defaults (docs/config.md gives the reasons).
func DefaultParams() Params { return Params{Smoothing: 0.5, MinWeight: 0.1} }

// Validate checks every parameter against the range its field's tag
// declares (the declaration internal/rules decodes and reports with
// file:line) and reports every violation, joined with errors.Join.
func (p Params) Validate() error {
	var errs []error
	for _, pr := range ranges.Check(p) {
		errs = append(errs, fmt.Errorf("%s: %s", pr.Key, pr.Msg))
	}
	return errors.Join(errs...)
}

// PortInput is one tick's decision for one protected port, or for the node
// (Key zero).
type PortInput struct {
	// Key is the port; the zero key is the node.
	Key olc.PortKey
	// Mode is the port's effective mode. Only in enforce does the weight
	// follow the pass rate: observe and off never change traffic, so the
	// agent answers full weight.
	Mode olc.Mode
	// DropProbability is the controller's p for the port (0..1).
	DropProbability float64
	// AtBound is true while p sits at its bound (1 − min_pass_rate) in an
	// overload: the node sheds all it may and still is over its target.
	AtBound bool
	// OfferedPerS is the new connections per second over the last tick
	// (SYN retransmits included); AdmittedPerS those not dropped.
	OfferedPerS, AdmittedPerS float64
	// ResponseTime is the port's measured response time, nil while the
	// port's responses are not timed.
	ResponseTime *ResponseTime
	// Capacity is the port's capacity measured while it was saturated,
	// nil until it was (adaptive.PortDecision.Capacity).
	Capacity *Capacity
}

// Capacity is a port's capacity measured live while it was saturated:
// the most requests per second it answered over the saturated ticks of
// the last 3 s (or the last such figure), in new connections per second
// too (0 when unknown), and how long ago (seconds). The JSON names are
// the status's (ports[].capacity).
type Capacity struct {
	RequestsPerS    float64 `json:"requests_per_s"`
	ConnectionsPerS float64 `json:"connections_per_s"`
	AgeS            float64 `json:"age_s"`
}

// ResponseTime is a port's response time over the last tick, in seconds:
// from a request's first byte reaching the node to the answer's first byte
// leaving it. A quantile is nil (never 0) when the tick had too few
// samples. The JSON names are the status's (ports[].response_time).
type ResponseTime struct {
	P50S *float64 `json:"p50_s"`
	P95S *float64 `json:"p95_s"`
	P99S *float64 `json:"p99_s"`
}

// Input is one tick as the daemon saw it.
type Input struct {
	// At is the tick's time.
	At time.Time
	// Mode is the global mode.
	Mode olc.Mode
	// Node is the node-level decision (Key zero).
	Node PortInput
	// Ports are the protected ports, in the daemon's order.
	Ports []PortInput
	// CPUUtilization is the node's cpu_busy (fraction), nil when
	// unavailable.
	CPUUtilization *float64
	// Utilization maps the fraction signals that drive shedding to their
	// values (ORCA's named utilizations).
	Utilization map[string]float64
}

// Target is what the report and the agent say of the node or one port.
type Target struct {
	// Proto and Port name the port; both empty for the node.
	Proto string `json:"proto,omitempty"`
	Port  uint16 `json:"port,omitempty"`
	// Mode is the effective mode ("off", "observe", "enforce").
	Mode string `json:"mode"`
	// State is "ready" or "drain".
	State State `json:"state"`
	// Weight is the share of its full weight (0..1) the load balancer is
	// told to give the node; HAProxy hears it as a percentage.
	Weight float64 `json:"weight"`
	// PassRate is the share of new connections the controller admits,
	// 1 − drop_probability (in observe mode: would admit).
	PassRate float64 `json:"pass_rate"`
	// DropProbability is the controller's p.
	DropProbability float64 `json:"drop_probability"`
	// AtBound is true while p is at its bound in an overload.
	AtBound bool `json:"at_bound"`
	// OfferedPerS and AdmittedPerS are new connections per second over
	// the last tick, offered (SYN retransmits included) and not dropped.
	OfferedPerS  float64 `json:"offered_per_s"`
	AdmittedPerS float64 `json:"admitted_per_s"`
	// ResponseTime is the measured response time; null while the port's
	// responses are not timed.
	ResponseTime *ResponseTime `json:"response_time"`
	// Capacity is the port's capacity measured while saturated; absent
	// until it was (and for the node).
	Capacity *Capacity `json:"capacity,omitempty"`
	// AgentReply is the HAProxy agent-check line for this target, without
	// its newline.
	AgentReply string `json:"agent_reply"`
}

// ORCA is the node's load in the fields of the xDS ORCA load report
// (envoyproxy's xds/data/orca/v3 OrcaLoadReport), for balancers that weigh
// by it (Envoy's client-side weighted round robin, gRPC).
type ORCA struct {
	// CPUUtilization is cpu_busy (fraction 0..1); absent when unavailable.
	CPUUtilization *float64 `json:"cpu_utilization,omitempty"`
	// RPSFractional is the new connections per second admitted over all
	// protected ports (each request opens one when clients do not keep
	// connections alive; otherwise it counts connections, not requests).
	RPSFractional float64 `json:"rps_fractional"`
	// Utilization maps each fraction signal that drives shedding to its
	// value (ORCA's named "utilization" map).
	Utilization map[string]float64 `json:"utilization,omitempty"`
}

// Report is the document of GET /v1/lb and what the agent answers from.
// A Report is never modified once built.
type Report struct {
	// UpdatedAt is the tick it was built from.
	UpdatedAt time.Time `json:"updated_at"`
	// Mode is the global mode.
	Mode string `json:"mode"`
	// Node is the node-level answer: what the agent says when agent-send
	// names no protected port.
	Node Target `json:"node"`
	// Ports lists every protected port.
	Ports []Target `json:"ports"`
	// ORCA is the node's load as an ORCA load report.
	ORCA ORCA `json:"orca"`
}

// FullWeight is the report before the first tick: nothing known, nothing
// shed, full weight.
func FullWeight() *Report {
	t := Target{Mode: "off", State: StateReady, Weight: 1, PassRate: 1}
	t.AgentReply = Reply(t.State, t.Weight)
	return &Report{Node: t, Ports: []Target{}}
}

// Reply renders one agent-check answer without its newline: "up ready 75%".
// "up" restores an operating state a previous agent may have set down (it
// cannot override a failing health check); the state word sets the admin
// state; the weight is a percentage of the server's configured weight, at
// least 1 % (HAProxy shows 0 % as DRAIN). HAProxy truncates
// configured × percent ÷ 100, so servers need `weight 100` for 1 %
// steps (with the default weight 1, anything below 100 % is 0).
func Reply(s State, weight float64) string {
	pct := int(math.Round(100 * weight))
	pct = min(max(pct, 1), 100)
	return "up " + string(s) + " " + strconv.Itoa(pct) + "%"
}

// Weigher turns each tick's decisions into a Report. It keeps one smoothed
// weight per port and one for the node; ports that disappear are
// forgotten. Not safe for concurrent use: the daemon's tick loop owns it.
type Weigher struct {
	p     Params
	node  smoothed
	ports map[olc.PortKey]*smoothed
}

type smoothed struct {
	w  float64
	ok bool
}

// NewWeigher returns a Weigher. Errors: Params out of range.
func NewWeigher(p Params) (*Weigher, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Weigher{p: p, ports: map[olc.PortKey]*smoothed{}}, nil
}

// SetParams changes the parameters (a reload); the smoothed weights stay.
// Errors: Params out of range (nothing changes).
func (w *Weigher) SetParams(p Params) error {
	if err := p.Validate(); err != nil {
		return err
	}
	w.p = p
	return nil
}

// Update folds one tick into the weights and returns the new report.
func (w *Weigher) Update(in Input) *Report {
	r := &Report{UpdatedAt: in.At, Mode: in.Mode.String(), Ports: make([]Target, 0, len(in.Ports))}
	r.Node = w.target(&w.node, in.Node)
	seen := make(map[olc.PortKey]bool, len(in.Ports))
	for _, pi := range in.Ports {
		s := w.ports[pi.Key]
		if s == nil {
			s = &smoothed{}
			w.ports[pi.Key] = s
		}
		seen[pi.Key] = true
		t := w.target(s, pi)
		t.Proto, t.Port = pi.Key.Proto.String(), pi.Key.Port
		r.Ports = append(r.Ports, t)
		r.ORCA.RPSFractional += pi.AdmittedPerS
	}
	for k := range w.ports {
		if !seen[k] {
			delete(w.ports, k)
		}
	}
	r.ORCA.CPUUtilization = in.CPUUtilization
	if len(in.Utilization) > 0 {
		r.ORCA.Utilization = make(map[string]float64, len(in.Utilization))
		for k, v := range in.Utilization {
			r.ORCA.Utilization[k] = v
		}
	}
	return r
}

// target advances one smoothed weight by a tick.
func (w *Weigher) target(s *smoothed, in PortInput) Target {
	pass := clamp01(1 - in.DropProbability)
	raw := 1.0
	enforcing := in.Mode == olc.ModeEnforce
	if enforcing {
		// The pass rate itself. Its square would leave the short node
		// shedding less at the fixed point with an ideal controller
		// (TestTwoNodesFixedPoint), but with the real one, HAProxy's
		// agent-inter and the smoothing in the loop it doubled the loop
		// gain and the weights swung (docs/tuning.md §6, run 7).
		raw = pass
	}
	if !s.ok {
		s.w, s.ok = raw, true
	} else {
		s.w += w.p.Smoothing * (raw - s.w)
	}
	s.w = max(s.w, w.p.MinWeight)
	t := Target{
		Mode: in.Mode.String(), State: StateReady, Weight: s.w, PassRate: pass,
		DropProbability: in.DropProbability, AtBound: in.AtBound,
		OfferedPerS: in.OfferedPerS, AdmittedPerS: in.AdmittedPerS, ResponseTime: in.ResponseTime, Capacity: in.Capacity,
	}
	if enforcing && in.AtBound {
		t.State = StateDrain
	}
	t.AgentReply = Reply(t.State, t.Weight)
	return t
}

func clamp01(x float64) float64 {
	if math.IsNaN(x) {
		return 1
	}
	return min(max(x, 0), 1)
}

// Lookup returns the target an agent-send request names: "tcp/8080",
// "udp/53" or a bare "8080" (TCP), in any letter case, surrounded by
// blanks or not. found is false when the request names nothing or a port
// that is not protected; the node's target is returned then.
func (r *Report) Lookup(req string) (t Target, found bool) {
	key, ok := ParseRequest(req)
	if !ok {
		return r.Node, false
	}
	for _, p := range r.Ports {
		if p.Port == key.Port && p.Proto == key.Proto.String() {
			return p, true
		}
	}
	return r.Node, false
}

// ParseRequest parses an agent-send request naming a port: "tcp/8080",
// "udp/53" or "8080" (TCP). ok is false for anything else.
func ParseRequest(req string) (olc.PortKey, bool) {
	s := strings.ToLower(strings.TrimSpace(req))
	proto := olc.ProtoTCP
	if ps, num, ok := strings.Cut(s, "/"); ok {
		p, err := olc.ParseProto(ps)
		if err != nil {
			return olc.PortKey{}, false
		}
		proto, s = p, num
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return olc.PortKey{}, false
	}
	return olc.PortKey{Proto: proto, Port: uint16(n)}, true
}

// CheckAddress validates an agent listen address: host:port with a literal
// IP address and a port 1..65535. An unspecified address (0.0.0.0, ::, or
// no host) would answer anyone who can reach the node on any interface, so
// it is refused unless allowAny.
func CheckAddress(addr string, allowAny bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("%q: port %q must be 1..65535", addr, port)
	}
	if host == "" {
		if !allowAny {
			return fmt.Errorf("%q listens on every address: name one (the address the load balancer reaches), or set allow_any: true", addr)
		}
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%q: host %q must be an IP address, not a name", addr, host)
	}
	if ip.Zone() != "" && !ip.Is6() {
		return fmt.Errorf("%q: a zone needs an IPv6 address", addr)
	}
	if ip.IsUnspecified() && !allowAny {
		return fmt.Errorf("%q listens on every address: name one (the address the load balancer reaches), or set allow_any: true", addr)
	}
	return nil
}
