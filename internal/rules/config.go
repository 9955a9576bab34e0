package rules

// deploy/olcd.yaml spells out defaults() by the schema (TestDeployConfigGenerated).
//go:generate go test -run TestDeployConfigGenerated -update .

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/lb"
	"github.com/olcd/olcd/internal/loader/dpconfig"
	"github.com/olcd/olcd/internal/olc"
	sy "github.com/olcd/olcd/internal/strictyaml"
)

// Config is one complete, validated configuration, decoded straight from
// the YAML: each field's yaml tag is its key (a dotted tag nests it, an
// `inline` struct lends its keys), its range tag (internal/ranges) or enum
// its bounds. The consumers' own structs (adaptive.Params, lb.Params,
// dpconfig's) are embedded as they are. docs/config.md documents every key.
// Build a Config with Default, Load, Parse or Patch; it is never modified
// after it is returned, so the daemon can swap it in between two ticks.
type Config struct {
	// Source is the file the config was read from; "" for the embedded
	// default.
	Source string `yaml:"-"`
	// Mode is the global mode (default observe).
	Mode olc.Mode `yaml:"mode"`
	// Interfaces lists the interfaces to attach to; empty means every
	// non-loopback Ethernet interface that is up, each packet once.
	Interfaces []string `yaml:"interfaces"`
	// Attach is the attach mode (default auto).
	Attach olc.AttachMode `yaml:"attach"`
	// Interval is the tick interval (100 ms … 60 s, default 500 ms).
	Interval time.Duration `yaml:"interval"`
	// Thresholds holds each signal's threshold in its canonical unit; 0 means
	// the signal does not drive shedding.
	Thresholds Thresholds `yaml:"signals"`
	// Cgroup is the watched cgroup: a path under /sys/fs/cgroup, or a path
	// inside the hierarchy without the leading slash; "" watches none.
	Cgroup string `yaml:"cgroup"`
	// Controller holds the control-law parameters.
	Controller adaptive.Params `yaml:"controller"`
	// ResponseTarget is every port's response-time target unless the port
	// sets its own (default auto).
	ResponseTarget adaptive.ResponseTarget `yaml:"controller.response_target"`
	// Ports lists the protected ports when PortsAuto is false.
	Ports []Port `yaml:"ports" auto:"PortsAuto"`
	// PortsAuto is true for `ports: auto`: every TCP port with a listener on
	// a non-loopback address, as class normal.
	PortsAuto bool `yaml:"-"`
	// Exceptions are never shed.
	Exceptions Exceptions `yaml:"exceptions"`
	// Action is what shedding does to a packet.
	Action ActionConfig `yaml:"action"`
	// StaleAfter is the heartbeat age after which the datapath passes
	// everything, so a dead daemon never keeps shedding (default 5 s).
	StaleAfter time.Duration `yaml:"heartbeat.stale_after"`
	// MetricsAddress is the Prometheus listen address; "" turns metrics off.
	MetricsAddress string `yaml:"metrics.address"`
	// AdminSocket is the admin API's unix socket path (absolute).
	AdminSocket string `yaml:"admin.socket"`
	// DecisionLog is the decision log's path (absolute); "" or "-" is off.
	DecisionLog string `yaml:"decision_log"`
	// Datapath sizes the BPF maps.
	Datapath DatapathConfig `yaml:"datapath"`
	// LB is what olcd tells load balancers.
	LB LBConfig `yaml:"lb"`

	// doc is the effective document (defaults not included) the config was
	// decoded from, each node with its file; Patch merges onto it.
	doc *sy.Node
	// file is the config file's document, beneath every live patch: a null
	// in a patch puts its value back (nil for the embedded default).
	file *sy.Node
}

// Thresholds holds a threshold per signal, in its canonical unit; 0 is
// unused. In YAML: `signals: {<name>: {threshold: x}}`, or `<name>: off`.
type Thresholds [olc.NumSignals]float64

// Port is one protected port: `{port: 443, proto: tcp, …}` or just 443. Its
// datapath settings are the loader's own dpconfig.PortPolicy (port, proto,
// class, mode, action, request_gate), which the daemon hands on as it is;
// Mode there is the port's own, observe or enforce, and olc.ModeOff (the
// zero value) means none: the port follows the global mode (EffectiveMode).
type Port struct {
	dpconfig.PortPolicy `yaml:",inline"`
	// HasAction is set when the entry gives its own action; else
	// action.kind applies (EffectiveAction).
	HasAction bool `yaml:"-"`
	// Target is the port's own response-time target when HasTarget (off
	// included); else controller.response_target.
	Target    adaptive.ResponseTarget `yaml:"response_target" has:"HasTarget"`
	HasTarget bool                    `yaml:"-"`
	// StaticCaps are the port's static caps (ports[].caps; caps.go): the
	// rate and in-flight ceilings go to the loader with the port's policy
	// (dpconfig.PortPolicy.Caps), the source caps apart.
	StaticCaps PortCaps `yaml:"caps"`
}

// EffectiveAction returns the port's action: its own if set, else global.
func (p Port) EffectiveAction(global olc.Action) olc.Action {
	if p.HasAction {
		return p.Action
	}
	return global
}

// Policy returns the port's datapath policy under the global mode and
// action (no drop probability yet): its own settings, each override
// resolved.
func (p Port) Policy(global olc.Mode, action olc.Action) dpconfig.PortPolicy {
	pol := p.PortPolicy
	pol.Mode, pol.Action = p.EffectiveMode(global), p.EffectiveAction(action)
	return pol
}

// EffectiveMode returns the mode the port runs in under global: off when
// global is off (the kill switch wins), else the override if set, else
// global.
func (p Port) EffectiveMode(global olc.Mode) olc.Mode {
	if global == olc.ModeOff || p.Mode == olc.ModeOff {
		return global
	}
	return p.Mode
}

// Exceptions are ports and source prefixes whose new connections are never
// shed (counted as exempt).
type Exceptions struct {
	// Ports are exempt destination ports (each once, none also protected).
	Ports []olc.PortKey `yaml:"ports"`
	// Sources are exempt client prefixes, masked; a bare address is a /32
	// or /128.
	Sources []netip.Prefix `yaml:"sources"`
	// Management are the ports operators reach the node through (default
	// tcp/22): exempt unless the port list names them (Config.ExemptPorts).
	Management []olc.PortKey `yaml:"management"`
}

// ActionConfig is the shedding action.
type ActionConfig struct {
	// Kind is drop (default), mark or reject.
	Kind olc.Action `yaml:"kind"`
	// DSCP is the DSCP a mark sets, when SetDSCP.
	DSCP    uint8 `yaml:"dscp" range:"[0, 63]" has:"SetDSCP"`
	SetDSCP bool  `yaml:"-"`
	// Fwmark is the firewall mark a mark sets; 0 sets none.
	Fwmark uint32 `yaml:"fwmark"`
	// Reject is the reject action's rate limit (reject_rate, reject_burst).
	dpconfig.Reject `yaml:",inline"`
}

// DatapathConfig sizes the BPF maps (the loader's dpconfig.Datapath) and
// sets how many responses make a port's response-time signals available.
type DatapathConfig struct {
	dpconfig.Datapath `yaml:",inline"`
	// ResponseMinSamples is the fewest responses a port needs in a tick for
	// its response-time signals (1..1000000, default 5).
	ResponseMinSamples int `yaml:"response_min_samples" range:"[1, 1000000]"`
}

// LBConfig is what olcd tells load balancers: the weight follows the
// controller's decision.
type LBConfig struct {
	// Agent is the HAProxy agent-check listener.
	Agent LBAgentConfig `yaml:"agent"`
	// Weight smooths the pass rate into a weight, with a floor.
	Weight lb.Params `yaml:",inline"`
}

// LBAgentConfig is the HAProxy agent-check listener.
type LBAgentConfig struct {
	// Address is host:port with a literal IP; "" (the default) is off. An
	// unspecified address is refused unless AllowAny.
	Address  string `yaml:"address"`
	AllowAny bool   `yaml:"allow_any"`
	// SendWait is how long a connection may take to send its agent-send
	// line (0 … MaxSendWait, default lb.DefaultSendWait; 0 never waits).
	SendWait time.Duration `yaml:"send_wait" range:"[0, 1s]" hint:"5ms is the default; 0 never waits (node answers only)"`
}

// MaxSendWait bounds lb.agent.send_wait: HAProxy's agent check times out
// after agent-inter (1 s in the README's wiring).
const MaxSendWait = time.Second

// The defaults that are not the consumers' own; docs/config.md gives the
// reason for each.
const (
	DefaultInterval       = 500 * time.Millisecond
	MinInterval           = 100 * time.Millisecond
	DefaultMetricsAddress = "127.0.0.1:9477"
	DefaultAdminSocket    = "/run/olcd/olcd.sock"
	DefaultDecisionLog    = "/var/log/olcd/decisions.jsonl"
)

// DefaultThresholds returns the signals that drive shedding when a config
// has no `signals` section (docs/config.md).
func DefaultThresholds() [olc.NumSignals]float64 {
	var t [olc.NumSignals]float64
	t[olc.PSIMemoryFull], t[olc.AcceptQueueFill] = 0.1, 0.9
	return t
}

// defaults returns the values every document is decoded onto.
func defaults() *Config {
	return &Config{Mode: olc.ModeObserve, Attach: olc.AttachAuto, Interval: DefaultInterval, Thresholds: DefaultThresholds(),
		Controller: adaptive.DefaultParams(), ResponseTarget: adaptive.ResponseTarget{Auto: true}, PortsAuto: true,
		Exceptions: Exceptions{Management: []olc.PortKey{{Proto: olc.ProtoTCP, Port: 22}}},
		Action:     ActionConfig{Kind: olc.ActionDrop, Reject: dpconfig.DefaultReject()}, StaleAfter: olc.DefaultStaleAfter,
		MetricsAddress: DefaultMetricsAddress, AdminSocket: DefaultAdminSocket, DecisionLog: DefaultDecisionLog,
		Datapath: DatapathConfig{Datapath: dpconfig.Default(), ResponseMinSamples: 5},
		LB:       LBConfig{Agent: LBAgentConfig{SendWait: lb.DefaultSendWait}, Weight: lb.DefaultParams()}}
}

// Default returns the embedded default configuration: observe mode, every
// non-loopback Ethernet interface, ports: auto, the default signals and
// controller parameters. It is what `olcd run` uses without --config.
func Default() *Config {
	c, _, err := Parse(nil, "")
	if err != nil {
		panic("rules: built-in defaults invalid: " + err.Error()) // TestDefault keeps them valid
	}
	return c
}

// PortConfigs returns the configured ports as the controller sees them (nil
// under ports: auto).
func (c *Config) PortConfigs() []adaptive.PortConfig {
	if c.PortsAuto {
		return nil
	}
	out := make([]adaptive.PortConfig, len(c.Ports))
	for i, p := range c.Ports {
		out[i] = adaptive.PortConfig{Key: p.Key, Class: p.Class}
	}
	return c.ControllerConfig(out).Ports
}

// ControllerConfig returns the controller's config for the resolved port
// list: the configured ports, or under ports: auto the discovered listeners
// (the daemon resolves them), each with its target (its own, else the
// global one). A nil ports uses c.PortConfigs().
func (c *Config) ControllerConfig(ports []adaptive.PortConfig) adaptive.Config {
	if ports == nil {
		ports = c.PortConfigs()
	}
	ports = slices.Clone(ports)
	for i := range ports {
		ports[i].Target = c.ResponseTarget
		if j := slices.IndexFunc(c.Ports, func(p Port) bool { return p.Key == ports[i].Key }); j >= 0 && c.Ports[j].HasTarget {
			ports[i].Target = c.Ports[j].Target
		}
	}
	return adaptive.Config{Interval: c.Interval, Thresholds: c.Thresholds, Params: c.Controller, Ports: ports}
}

// ExemptPorts returns the ports whose new connections are never shed, each
// once: exceptions.ports, then the management ports the port list does not
// name (under ports: auto, every management port).
func (c *Config) ExemptPorts() []olc.PortKey {
	out := slices.Clone(c.Exceptions.Ports)
	for _, k := range c.Exceptions.Management {
		if !slices.Contains(out, k) && !c.listed(k) {
			out = append(out, k)
		}
	}
	return out
}

// ExemptPort reports whether k is one of ExemptPorts.
func (c *Config) ExemptPort(k olc.PortKey) bool { return c.ExemptReason(k) != "" }

// ExemptReason returns the list that exempts k ("exceptions.ports" or
// "exceptions.management"), or "" when k is not exempt.
func (c *Config) ExemptReason(k olc.PortKey) string {
	switch {
	case slices.Contains(c.Exceptions.Ports, k):
		return "exceptions.ports"
	case slices.Contains(c.Exceptions.Management, k) && !c.listed(k):
		return "exceptions.management"
	}
	return ""
}

// listed reports whether the port list (not ports: auto) names k.
func (c *Config) listed(k olc.PortKey) bool {
	return !c.PortsAuto && slices.ContainsFunc(c.Ports, func(p Port) bool { return p.Key == k })
}

// WithMode returns a copy of c in mode m, applied as a patch so that later
// patches keep it. A mode alone cannot make a valid config invalid, so the
// copy's warnings are dropped.
func (c *Config) WithMode(m olc.Mode) (*Config, error) {
	if m > olc.ModeEnforce {
		return nil, fmt.Errorf("set mode: unknown %s", m)
	}
	out, _, err := c.Patch([]byte("mode: "+m.String()), "mode")
	if err != nil {
		return nil, fmt.Errorf("set mode %s: %w", m, err)
	}
	return out, nil
}

// Validate checks a Config that was built or changed in Go rather than
// decoded, and reports every problem at once (*ValidationError, without
// lines). Configs returned by Parse, Load and Patch are valid.
func (c *Config) Validate() error {
	d := newChecker(c.Source)
	for s, t := range c.Thresholds {
		d.set[s] = t != 0
	}
	d.validate(c)
	if len(d.Problems) > 0 {
		return &ValidationError{Problems: d.Problems}
	}
	return nil
}

// ProblemAt returns a *ValidationError with the one problem Locate places,
// for the checks only the running daemon can make (an interface that must
// exist, a file it must open).
func (c *Config) ProblemAt(field, msg, hint string) error {
	return &ValidationError{Problems: []Problem{c.Locate(field, msg, hint)}}
}

// Locate returns a problem at field (a dotted path of keys, e.g.
// "lb.agent.address"), placed at the file and line its value came from, or
// at the config's source without a line when the document does not spell
// it out (a default).
func (c *Config) Locate(field, msg, hint string) Problem {
	p := Problem{File: sourceName(c.Source), Field: field, Msg: msg, Hint: hint}
	n := c.doc
	for _, key := range strings.Split(field, ".") {
		if n = n.Get(key); n == nil {
			return p
		}
	}
	p.File, p.Line = n.File, n.Line
	return p
}

// sourceName names a config's source in problems.
func sourceName(source string) string {
	if source == "" {
		return "embedded default"
	}
	return source
}

// retiredControllerKeys maps the controller keys of earlier versions to
// what replaced them: a config naming one is refused with this hint.
var retiredControllerKeys = map[string]string{
	"smoothing":         "the resource law acts on each tick's pressure; activation_ticks filters spikes",
	"cooldown_ticks":    "a port's pass rate returns to what its measured capacity admits in one tick; the resource law recovers by ki",
	"saturation_boost":  "a port's measured capacity sizes its cut; the resource law caps it by ki",
	"max_step":          "the resource law's step is ki × the share of work above the target",
	"recovery_step":     "a port's pass rate follows its measured capacity (capacity_window); the resource law recovers by ki",
	"demand_smoothing":  "demand is each tick's measured arrivals",
	"onset_ratio":       "onset_interval's windows cut when the queue outgrows what drains in a tick",
	"latency_kp":        "a port's law admits its measured capacity (capacity_window) less the standing queue beyond target",
	"latency_ki":        "a port's law admits its measured capacity (capacity_window) less the standing queue beyond target",
	"response_cooldown": "a port's pass rate returns to what its measured capacity admits in one tick",
}

// retiredKey returns the hint for a key of an earlier version that olcd
// refuses now, naming what replaced it.
func retiredKey(field string) (string, bool) {
	k, ok := strings.CutPrefix(field, "controller.")
	if !ok {
		return "", false
	}
	h, ok := retiredControllerKeys[k]
	return h, ok
}
