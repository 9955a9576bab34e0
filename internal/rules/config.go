package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/olc"
)

// Config is one complete, validated configuration. Build it with Default,
// Load, Parse or Patch; a Config is never modified after it is returned, so
// the daemon can swap it in between two ticks.
type Config struct {
	// Source is the file the config was read from; "" for the embedded
	// default.
	Source string
	// Mode is the global mode (default observe).
	Mode olc.Mode
	// Interfaces lists the interfaces to attach to; empty means every
	// non-loopback Ethernet interface that is up, each packet once (the
	// daemon skips bridge/bond ports and children of an attached parent).
	Interfaces []string
	// Attach is the attach mode (default auto).
	Attach olc.AttachMode
	// Interval is the tick interval (≥ 100 ms, default 500 ms).
	Interval time.Duration
	// Thresholds holds each signal's threshold in its canonical unit; 0 means
	// the signal does not drive shedding.
	Thresholds [olc.NumSignals]float64
	// Cgroup is the watched cgroup: a filesystem path under /sys/fs/cgroup,
	// or a path inside the cgroup hierarchy without the leading slash
	// ("system.slice/nginx.service"); "" watches none.
	Cgroup string
	// Controller holds the control-law parameters.
	Controller adaptive.Params
	// ResponseTarget is every port's response-time target unless the port
	// sets its own (controller.response_target, default auto).
	ResponseTarget adaptive.ResponseTarget
	// PortsAuto is true for `ports: auto`: the daemon protects every TCP port
	// with a listener on a non-loopback address, as class normal.
	PortsAuto bool
	// Ports lists the protected ports when PortsAuto is false.
	Ports []Port
	// Exceptions are never shed.
	Exceptions Exceptions
	// Action is what shedding does to a packet.
	Action ActionConfig
	// StaleAfter is the heartbeat age after which the datapath passes
	// everything, so a dead daemon never keeps shedding (default 5 s).
	StaleAfter time.Duration
	// MetricsAddress is the Prometheus listen address (host:port); "" turns
	// metrics off.
	MetricsAddress string
	// AdminSocket is the admin API's unix socket path (absolute).
	AdminSocket string
	// DecisionLog is the decision log's path (absolute); "" or "-" turns it
	// off.
	DecisionLog string
	// Datapath sizes the BPF maps.
	Datapath DatapathConfig
	// LB is what olcd tells load balancers (lb.go).
	LB LBConfig

	// doc is the effective document (defaults not included) the config was
	// decoded from; Patch merges onto it. origins maps its nodes to the
	// source they came from, so that problems name the right file.
	doc     *yaml.Node
	origins map[*yaml.Node]string
}

// Port is one protected port.
type Port struct {
	// Port is the destination port, 1..65535.
	Port uint16
	// Proto is olc.ProtoTCP or olc.ProtoUDP.
	Proto olc.Proto
	// Class is the priority class (default normal).
	Class olc.Class
	// Override is the port's own mode, olc.ModeObserve or olc.ModeEnforce; olc.ModeOff
	// (the zero value) means no override: the port follows the global mode.
	Override olc.Mode
	// Action is the port's own shedding action when HasAction is set;
	// otherwise the port uses action.kind.
	Action    olc.Action
	HasAction bool
	// Target is the port's own response-time target when HasTarget is
	// set (off included); otherwise controller.response_target.
	Target    adaptive.ResponseTarget
	HasTarget bool
}

// EffectiveAction returns the port's action: its own if set, else global.
func (p Port) EffectiveAction(global olc.Action) olc.Action {
	if p.HasAction {
		return p.Action
	}
	return global
}

// Key returns the port's controller key.
func (p Port) Key() olc.PortKey { return olc.PortKey{Proto: p.Proto, Port: p.Port} }

// EffectiveMode returns the mode the port runs in under global: off when
// global is off (the kill switch wins), else the override if set, else
// global.
func (p Port) EffectiveMode(global olc.Mode) olc.Mode {
	if global == olc.ModeOff || p.Override == olc.ModeOff {
		return global
	}
	return p.Override
}

// Exceptions are ports and source prefixes whose new connections are never
// shed (counted as exempt).
type Exceptions struct {
	// Ports are exempt destination ports (each listed once, none of them
	// also protected).
	Ports []olc.PortKey
	// Sources are exempt client prefixes, IPv4 or IPv6, masked (no host
	// bits beyond the prefix length); a bare address is a /32 or /128.
	Sources []netip.Prefix
	// Management are the ports operators reach the node through (default
	// tcp/22, SSH): exempt unless the port list names them, so that under
	// ports: auto an overloaded node never sheds its operator's login.
	// Each is listed once; see Config.ExemptPorts.
	Management []olc.PortKey
}

// ActionConfig is the shedding action.
type ActionConfig struct {
	// Kind is drop (default) or mark.
	Kind olc.Action
	// DSCP is the DSCP (0..63) a mark sets; meaningful when SetDSCP.
	DSCP uint8
	// SetDSCP is true when a DSCP was configured.
	SetDSCP bool
	// Fwmark is the firewall mark a mark sets; 0 sets none.
	Fwmark uint32
	// RejectRate is how many shed SYNs per second one CPU answers under
	// the reject action (0..10,000,000, default 20,000); the rest are
	// dropped. 0 answers none.
	RejectRate int
	// RejectBurst is how many replies one CPU may send at once, from a
	// full bucket (1..10,000,000); 0 (the default) is RejectRate ÷ 10.
	RejectBurst int
}

// DatapathConfig sizes the BPF maps.
type DatapathConfig struct {
	// MaxPorts is the capacity of the port policy map (1..MaxMaxPorts, default
	// 1024).
	MaxPorts int `yaml:"max_ports" range:"[1, 65534]"`
	// SYNTableSize is the capacity of the LRU table that recognises SYN
	// retransmits (1024..16777216, default 65536).
	SYNTableSize int `yaml:"syn_table_size" range:"[1024, 16777216]"`
	// MaxPrefixes is the capacity of the exception prefix trie (1..1048576,
	// default 1024).
	MaxPrefixes int `yaml:"max_prefixes" range:"[1, 1048576]"`
	// Selection is how the datapath picks the new connections a drop
	// probability sheds: "random" (independently, the default) or "even"
	// (exactly that share, evenly spaced per CPU and port).
	Selection string `yaml:"selection" enum:"random,even"`
	// ResponseSample times one flow in N on the protected ports
	// (0..65536; 0 turns response timing off; default 1, every flow).
	ResponseSample int `yaml:"response_sample" range:"[0, 65536]"`
	// ResponsePorts is how many protected ports are timed at most
	// (1..65534, default 32): each has a per-CPU histogram of 1.5 KB.
	ResponsePorts int `yaml:"response_ports" range:"[1, 65534]"`
	// FlowTableSize is how many flows the response timer tracks at once
	// (64..16777216, default 16384).
	FlowTableSize int `yaml:"flow_table_size" range:"[64, 16777216]"`
	// ResponseMinSamples is the fewest responses a port needs in a tick for
	// its response-time signals to be available (1..1000000, default 5).
	ResponseMinSamples int `yaml:"response_min_samples" range:"[1, 1000000]"`
}

// The defaults that are not controller parameters; docs/config.md gives the
// reason for each. The datapath's sizes and heartbeat.stale_after are olc's
// (olc.DefaultMaxPorts, olc.DefaultStaleAfter, …), shared with the loader.
const (
	DefaultInterval       = 500 * time.Millisecond
	MinInterval           = 100 * time.Millisecond
	DefaultMetricsAddress = "127.0.0.1:9477"
	DefaultAdminSocket    = "/run/olcd/olcd.sock"
	DefaultDecisionLog    = "/var/log/olcd/decisions.jsonl"
	// Response timing defaults (docs/config.md).
	DefaultResponseSample     = 1
	DefaultResponseMinSamples = 5
)

// DefaultThresholds returns the signals that drive shedding when a config
// has no `signals` section, with their thresholds (see docs/config.md).
func DefaultThresholds() [olc.NumSignals]float64 {
	var t [olc.NumSignals]float64
	t[olc.PSICPUSome] = 0.5
	t[olc.PSIMemoryFull] = 0.1
	t[olc.AcceptQueueFill] = 0.9
	return t
}

// DefaultManagementPorts returns the default exceptions.management: SSH.
func DefaultManagementPorts() []olc.PortKey {
	return []olc.PortKey{{Proto: olc.ProtoTCP, Port: 22}}
}

// Default returns the embedded default configuration: observe mode, every
// non-loopback Ethernet interface, ports: auto, the default signals and controller
// parameters. It is what `olcd run` uses without --config.
func Default() *Config {
	c, _, err := Parse(nil, "")
	if err != nil {
		// The empty document decodes onto the built-in defaults, which
		// TestDefaultValid keeps valid.
		panic("rules: built-in defaults invalid: " + err.Error())
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
		out[i] = adaptive.PortConfig{Key: p.Key(), Class: p.Class, Target: c.ResponseTarget}
		if p.HasTarget {
			out[i].Target = p.Target
		}
	}
	return out
}

// ControllerConfig returns the controller's config for the resolved port
// list: the configured ports, or under ports: auto the discovered listeners
// (the daemon resolves them). A nil ports uses c.PortConfigs().
func (c *Config) ControllerConfig(ports []adaptive.PortConfig) adaptive.Config {
	if ports == nil {
		ports = c.PortConfigs()
	}
	ports = append([]adaptive.PortConfig(nil), ports...)
	// Resolved ports (ports: auto) take the global target; configured
	// ones their own.
	own := make(map[olc.PortKey]Port, len(c.Ports))
	for _, p := range c.Ports {
		own[p.Key()] = p
	}
	for i := range ports {
		if p, ok := own[ports[i].Key]; ok && p.HasTarget {
			ports[i].Target = p.Target
		} else {
			ports[i].Target = c.ResponseTarget
		}
	}
	return adaptive.Config{
		Interval:   c.Interval,
		Thresholds: c.Thresholds,
		Params:     c.Controller,
		Ports:      ports,
	}
}

// ExemptPorts returns the ports whose new connections are never shed, each
// once: exceptions.ports, then the management ports the port list does not
// name (under ports: auto, every management port). The datapath counts
// their new connections as exempt.
func (c *Config) ExemptPorts() []olc.PortKey {
	out := slices.Clone(c.Exceptions.Ports)
	for _, k := range c.Exceptions.Management {
		if !slices.Contains(out, k) && !c.listed(k) {
			out = append(out, k)
		}
	}
	return out
}

// ExemptPort reports whether k is one of ExemptPorts (the daemon skips such
// listeners under ports: auto).
func (c *Config) ExemptPort(k olc.PortKey) bool { return c.ExemptReason(k) != "" }

// ExemptReason returns why k is exempt, for status and logs: the list that
// exempts it ("exceptions.ports" or "exceptions.management"), or "" when k
// is not exempt.
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
	if c.PortsAuto {
		return false
	}
	return slices.ContainsFunc(c.Ports, func(p Port) bool { return p.Key() == k })
}

// WithMode returns a copy of c in mode m, applied as a patch so that later
// patches (which merge onto the document) keep it. The copy's warnings are
// dropped: a mode alone cannot make a valid config invalid.
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
// line numbers). Configs returned by Parse, Load and Patch are valid.
func (c *Config) Validate() error {
	name := c.Source
	if name == "" {
		name = "config"
	}
	d := newDecoder(nil, name)
	for s, t := range c.Thresholds {
		d.thresholdSet[s] = t != 0
	}
	d.validate(c)
	if len(d.problems) > 0 {
		return &ValidationError{Problems: d.problems}
	}
	return nil
}

// ProblemAt returns a *ValidationError with the one problem Locate places.
// It is for the checks only the running daemon can make (an interface that
// must exist, a file it must open), so they read like the validator's own.
func (c *Config) ProblemAt(field, msg, hint string) error {
	return &ValidationError{Problems: []Problem{c.Locate(field, msg, hint)}}
}

// Locate returns a problem at field (a dotted path of mapping keys, e.g.
// "decision_log" or "lb.agent.address"), placed at the line and file its
// value came from, or at the config's source without a line when the
// document does not spell it out (a default).
func (c *Config) Locate(field, msg, hint string) Problem {
	file := c.Source
	if file == "" {
		file = "embedded default"
	}
	p := Problem{File: file, Field: field, Msg: msg, Hint: hint}
	n := c.doc
	for _, key := range strings.Split(field, ".") {
		if n = mapGet(resolve(n), key); n == nil {
			break
		}
	}
	if n != nil {
		p.Line = n.Line
		if s, ok := c.origins[n]; ok {
			p.File = s
		}
	}
	return p
}
