// Package dpconfig declares the datapath's configurable sizes and limits
// once: their YAML keys and ranges (internal/ranges tags) on the fields, and
// their defaults in Default. internal/rules embeds these structs in its
// Config (the `datapath` section and action.reject_*); internal/loader fills
// zeros and checks bounds from the same declarations. It imports nothing
// Linux-only, so the config decoder builds and tests on any system.
package dpconfig

import (
	"errors"
	"fmt"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/ranges"
)

// MaxCapSources is how many source prefix caps (ports[].caps.sources) all
// ports may have together: the size of the datapath's cap map.
const MaxCapSources = 1024

// Datapath sizes the BPF maps and sets how the draw selects
// (docs/config.md, "datapath"). A zero field takes its default.
type Datapath struct {
	// MaxPorts is the capacity of the port policy map.
	MaxPorts int `yaml:"max_ports" range:"[1, 65534]"`
	// SYNTableSize is the capacity of the LRU table that recognises SYN
	// retransmits.
	SYNTableSize int `yaml:"syn_table_size" range:"[1024, 16777216]"`
	// MaxPrefixes is the capacity of the exception prefix trie.
	MaxPrefixes int `yaml:"max_prefixes" range:"[1, 1048576]"`
	// Selection is "random" (each new connection drawn independently) or
	// "even" (exactly the share p, evenly spaced per CPU and port).
	Selection string `yaml:"selection" enum:"random,even"`
	// ResponseSample times one flow in N on the protected ports; 0 turns
	// response timing off. Unlike the other fields, 0 is not "default":
	// Default gives 1 (every flow) and the decoder keeps an explicit 0.
	ResponseSample int `yaml:"response_sample" range:"[0, 65536]"`
	// ResponsePorts is how many protected ports are timed at most; each has
	// a per-CPU histogram of 1.5 KB.
	ResponsePorts int `yaml:"response_ports" range:"[1, 65534]"`
	// FlowTableSize is how many flows the response timer tracks at once.
	FlowTableSize int `yaml:"flow_table_size" range:"[64, 16777216]"`
}

// PortPolicy is what the datapath does with new connections to one port:
// the keys of an olcd.yaml ports: entry that the datapath applies (rules
// embeds it in rules.Port, and the daemon hands it to the loader as
// loader.PortPolicy, the same type), plus the drop probability and the
// retransmit flag the controller sets at every tick.
type PortPolicy struct {
	// Key is the port and protocol (keys port and proto; proto defaults
	// to tcp).
	Key olc.PortKey `yaml:",inline"`
	// Class is the priority class (default normal); the loader stores it
	// for read-back only.
	Class olc.Class `yaml:"class"`
	// Mode is the port's mode. In olcd.yaml only observe or enforce, and
	// olc.ModeOff (the zero value, key absent) for a port that follows
	// the global mode, which the daemon resolves before the loader sees
	// it; the global mode (Datapath.SetMode) caps it in the datapath.
	Mode olc.Mode `yaml:"mode" enum:"observe,enforce" offhint:"a port cannot be switched off alone: remove it from ports, or list it under exceptions"`
	// Action is drop, mark or reject (rules.Port.HasAction says whether
	// the entry sets it; the daemon resolves the global one otherwise).
	Action olc.Action `yaml:"action" has:"HasAction"`
	// RequestGate also sheds, with DropProbability and the same draw, the
	// requests that start on the port's established connections with
	// nothing outstanding, by resetting the connection both ways
	// (bpf/gate.h; docs/datapath.md, "The request gate"). TCP only, and
	// only on a timed port (Datapath.ResponseSample, ResponsePorts): the
	// gate reads the response timer's flow table, so with a sample of 1
	// in N it sees one connection in N. Default off: a reset between two
	// transactions loses a database session's state.
	RequestGate bool `yaml:"request_gate"`
	// DropProbability is the fraction 0..1 of new connections to act on
	// (set by the controller; see loader.ProbabilityToFixed for how it is
	// rounded).
	DropProbability float64 `yaml:"-"`
	// Retransmits is what DropProbability applies to, as a retransmitted
	// SYN (one found among the SYNs the port dropped) is told from a first
	// attempt (adaptive.PortDecision.Retransmits; set by the controller).
	Retransmits olc.Retransmits `yaml:"-"`
	// Fair sheds the heaviest sources first: while DropProbability > 0 the
	// drop probability a source meets grows with its share of the port's
	// new work above a fair share, the port's total staying
	// DropProbability (bpf/fair.h; docs/datapath.md, "Fair shedding").
	// Default off: one address behind a NAT or a proxy is many users.
	Fair bool `yaml:"fair"`
	// FairPrefix4 (1..32) and FairPrefix6 (1..128) are the source prefix
	// lengths fairness counts by; 0 takes 32 and 64.
	FairPrefix4 int `yaml:"fair_prefix4" range:"[1, 32]"`
	FairPrefix6 int `yaml:"fair_prefix6" range:"[1, 128]"`
	// Caps are the port's static caps (rules.Port.StaticCaps in olcd.yaml,
	// ports[].caps), the zero value none.
	Caps PortCaps `yaml:"-"`
}

// PortCaps are a port's static caps, enforced in the datapath beside the
// adaptive law, the stricter winning (bpf/fair.h).
type PortCaps struct {
	// Rate is the most new connections (and gated request starts) per
	// second the port admits, all CPUs and sources together; 0: no cap.
	Rate float64
	// Burst is how many above Rate may come at once; 0 takes a tenth of a
	// second's worth (at least 1).
	Burst int
	// InFlight is the most requests in flight the port may have (the
	// response timer's count, all CPUs, read per arrival: bpf/fair.h); 0:
	// no ceiling. The adaptive law's ceiling (Datapath.SetInFlightCeilings)
	// may be lower.
	InFlight int
}

// Reject is the reject action's rate limit, a token bucket per CPU.
type Reject struct {
	// RejectRate is how many shed SYNs per second one CPU answers; the
	// rest are dropped. 0 answers none.
	RejectRate int `yaml:"reject_rate" range:"[0, 10000000]"`
	// RejectBurst is how many replies one CPU may send at once from a full
	// bucket; 0 is BurstFor(RejectRate).
	RejectBurst int `yaml:"reject_burst" range:"[1, 10000000]" off:"0" hint:"0 (the default) is a tenth of a second's worth of reject_rate"`
}

// Default returns the datapath defaults (docs/config.md gives the reason
// for each).
func Default() Datapath {
	return Datapath{MaxPorts: olc.DefaultMaxPorts, SYNTableSize: olc.DefaultSYNTableSize, MaxPrefixes: olc.DefaultMaxPrefixes,
		Selection: "random", ResponseSample: 1, ResponsePorts: olc.DefaultResponsePorts, FlowTableSize: olc.DefaultFlowTableSize}
}

// DefaultReject returns the reject action's default limit.
func DefaultReject() Reject { return Reject{RejectRate: olc.DefaultRejectRate} }

// BurstFor returns the bucket size a zero reject_burst stands for: a tenth
// of a second's worth of rate, at least 1.
func BurstFor(rate int) int { return max(rate/10, 1) }

// WithDefaults returns d with every zero size replaced by its default
// (ResponseSample and Selection are kept: 0 and "" have meanings of their
// own for the loader).
func (d Datapath) WithDefaults() Datapath {
	def := Default()
	for _, f := range []struct{ v, def *int }{{&d.MaxPorts, &def.MaxPorts}, {&d.SYNTableSize, &def.SYNTableSize},
		{&d.MaxPrefixes, &def.MaxPrefixes}, {&d.ResponsePorts, &def.ResponsePorts}, {&d.FlowTableSize, &def.FlowTableSize}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return d
}

// Check returns an error naming every field of s (a Datapath or a Reject)
// outside its declared range, or nil.
func Check(s any) error {
	var errs []error
	for _, p := range ranges.Check(s) {
		errs = append(errs, fmt.Errorf("%s: %s", p.Key, p.Msg))
	}
	return errors.Join(errs...)
}
