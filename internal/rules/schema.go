package rules

import (
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/lb"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/spell"
)

// document is olcd.yaml as written: every key is declared here once, as a
// field's yaml tag, with its range (`range`, see internal/ranges) or its
// words (`enum`) beside it. decoder.fields decodes a mapping onto it
// strictly (an unknown key is a problem, with the closest known one), and
// config turns it into a Config. The keys are documented in
// docs/config.md; the controller's are adaptive.Params' own tags.
type document struct {
	Mode       olc.Mode          `yaml:"mode"`
	Interfaces []string          `yaml:"interfaces"`
	Attach     olc.AttachMode    `yaml:"attach"`
	Interval   time.Duration     `yaml:"interval"`
	Signals    signalsSection    `yaml:"signals"`
	Cgroup     string            `yaml:"cgroup"`
	Controller controllerSection `yaml:"controller"`
	Ports      portsSection      `yaml:"ports"`
	Exceptions struct {
		Ports      exemptPorts     `yaml:"ports"`
		Sources    []netip.Prefix  `yaml:"sources"`
		Management managementPorts `yaml:"management"`
	} `yaml:"exceptions"`
	Action struct {
		Kind        olc.Action `yaml:"kind"`
		DSCP        *uint8     `yaml:"dscp" range:"[0, 63]"`
		Fwmark      uint32     `yaml:"fwmark"`
		RejectRate  int        `yaml:"reject_rate" range:"[0, 10000000]"`
		RejectBurst int        `yaml:"reject_burst" range:"[1, 10000000]"`
	} `yaml:"action"`
	Heartbeat struct {
		StaleAfter time.Duration `yaml:"stale_after"`
	} `yaml:"heartbeat"`
	Metrics struct {
		Address string `yaml:"address"`
	} `yaml:"metrics"`
	Admin struct {
		Socket string `yaml:"socket"`
	} `yaml:"admin"`
	DecisionLog string         `yaml:"decision_log"`
	Datapath    DatapathConfig `yaml:"datapath"`
	LB          struct {
		Agent     LBAgentConfig `yaml:"agent"`
		lb.Params `yaml:",inline"`
	} `yaml:"lb"`
}

// defaultDocument returns the built-in values every document is decoded
// onto; docs/config.md gives the reason for each.
func defaultDocument() *document {
	doc := &document{Mode: olc.ModeObserve, Attach: olc.AttachAuto, Interval: DefaultInterval, DecisionLog: DefaultDecisionLog,
		Datapath: DatapathConfig{MaxPorts: olc.DefaultMaxPorts, SYNTableSize: olc.DefaultSYNTableSize, MaxPrefixes: olc.DefaultMaxPrefixes, Selection: "random",
			ResponseSample: DefaultResponseSample, ResponsePorts: olc.DefaultResponsePorts,
			FlowTableSize: olc.DefaultFlowTableSize, ResponseMinSamples: DefaultResponseMinSamples}}
	doc.Signals.th = DefaultThresholds()
	doc.Controller.Params = adaptive.DefaultParams()
	doc.Controller.ResponseTarget = responseTarget{Auto: true}
	doc.Ports.auto = true
	doc.Exceptions.Management = DefaultManagementPorts()
	doc.Action.Kind, doc.Action.RejectRate = olc.ActionDrop, olc.DefaultRejectRate
	doc.Heartbeat.StaleAfter = olc.DefaultStaleAfter
	doc.Metrics.Address = DefaultMetricsAddress
	doc.Admin.Socket = DefaultAdminSocket
	doc.LB.Agent.SendWait, doc.LB.Params = lb.DefaultSendWait, lb.DefaultParams()
	return doc
}

// config returns the Config the document describes.
func (doc *document) config(source string) *Config {
	a := doc.Action
	c := &Config{
		Source: source, Mode: doc.Mode, Interfaces: doc.Interfaces, Attach: doc.Attach, Interval: doc.Interval,
		Thresholds: doc.Signals.th, Cgroup: doc.Cgroup,
		Controller: doc.Controller.Params, ResponseTarget: adaptive.ResponseTarget(doc.Controller.ResponseTarget),
		PortsAuto: doc.Ports.auto, Ports: doc.Ports.list,
		Exceptions: Exceptions{Ports: doc.Exceptions.Ports, Sources: doc.Exceptions.Sources, Management: doc.Exceptions.Management},
		Action:     ActionConfig{Kind: a.Kind, Fwmark: a.Fwmark, RejectRate: a.RejectRate, RejectBurst: a.RejectBurst},
		StaleAfter: doc.Heartbeat.StaleAfter, MetricsAddress: doc.Metrics.Address, AdminSocket: doc.Admin.Socket,
		DecisionLog: doc.DecisionLog, Datapath: doc.Datapath,
		LB: LBConfig{Agent: doc.LB.Agent, Weight: doc.LB.Params},
	}
	if a.DSCP != nil {
		c.Action.DSCP, c.Action.SetDSCP = *a.DSCP, true
	}
	return c
}

// controllerSection is `controller:`: the control-law parameters (their
// keys and ranges are the tags of adaptive.Params) and the global response
// target.
type controllerSection struct {
	adaptive.Params `yaml:",inline"`
	ResponseTarget  responseTarget `yaml:"response_target"`
}

// portEntry is one entry of `ports:`.
type portEntry struct {
	Port   portNumber      `yaml:"port"`
	Proto  olc.Proto       `yaml:"proto"`
	Class  olc.Class       `yaml:"class"`
	Mode   portMode        `yaml:"mode"`
	Action *olc.Action     `yaml:"action"`
	Target *responseTarget `yaml:"response_target"`
}

// portKeyEntry is {port, proto}, an entry of exceptions.ports or
// exceptions.management.
type portKeyEntry struct {
	Port  portNumber `yaml:"port"`
	Proto olc.Proto  `yaml:"proto"`
}

// signalsSection is `signals: {<name>: {threshold: x}}`; present, it
// replaces the default signal list.
type signalsSection struct {
	th [olc.NumSignals]float64
	// set marks the signals the document gives a threshold, so that
	// validate also checks an explicit 0 (which the typed config reads as
	// "unused").
	set [olc.NumSignals]bool
}

func (s *signalsSection) decodeYAML(d *decoder, n *yaml.Node, path string) bool {
	*s = signalsSection{}
	return d.mapping(n, path, nil, func(name string, v *yaml.Node, field string) {
		sig, err := olc.ParseSignal(name)
		if err != nil {
			hint := "see docs/config.md for the canonical names"
			if c := spell.Closest(name, spell.Names(olc.Signals())); c != "" {
				hint = fmt.Sprintf("did you mean %q?", c)
			}
			d.add(v, field, fmt.Sprintf("unknown signal %q", name), hint)
			return
		}
		if isNull(v) || v.Kind != yaml.MappingNode {
			d.add(v, field, "must be a mapping with a threshold, got "+kindName(v), fmt.Sprintf("write %s: {threshold: …}", name))
			return
		}
		found := false
		d.mapping(v, field, []string{"threshold"}, func(_ string, tv *yaml.Node, f string) {
			found = true
			var x float64
			var ok bool
			if sig.Unit() == olc.UnitSeconds && tv.Kind == yaml.ScalarNode && tv.Tag == "!!str" {
				// Seconds may be written as a duration: 50ms.
				dur, good := d.duration(tv, f)
				x, ok = dur.Seconds(), good
			} else {
				x, ok = d.number(tv, f)
			}
			if ok {
				s.th[sig], s.set[sig] = x, true
			}
		})
		if !found {
			d.add(v, join(field, "threshold"), "missing", fmt.Sprintf("write %s: {threshold: …}, or remove the signal", name))
		}
	})
}

// portsSection is `ports: auto` or the list of protected ports.
type portsSection struct {
	auto bool
	list []Port
}

func (p *portsSection) decodeYAML(d *decoder, n *yaml.Node, path string) bool {
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		if n.Value != "auto" {
			d.add(n, path, fmt.Sprintf("must be auto or a list of ports, got %s", kindName(n)), "write ports: auto, or ports: [{port: 443, proto: tcp}]")
			return false
		}
		*p = portsSection{auto: true}
		return true
	}
	*p = portsSection{}
	return d.seq(n, path, func(item *yaml.Node, field string) bool {
		e := portEntry{Proto: olc.ProtoTCP, Class: olc.ClassNormal}
		if !d.entry(item, field, &e, "{port: 443, proto: tcp}") {
			return false
		}
		port := Port{Port: uint16(e.Port), Proto: e.Proto, Class: e.Class, Override: olc.Mode(e.Mode)}
		if e.Action != nil {
			port.Action, port.HasAction = *e.Action, true
		}
		if e.Target != nil {
			port.Target, port.HasTarget = adaptive.ResponseTarget(*e.Target), true
		}
		p.list = append(p.list, port)
		return true
	})
}

// entry decodes a list entry that is a mapping with a port (e, a
// *portEntry or *portKeyEntry); example shows its shape in the problem.
func (d *decoder) entry(item *yaml.Node, field string, e any, example string) bool {
	if item.Kind != yaml.MappingNode {
		d.add(item, field, fmt.Sprintf("must be a mapping such as %s, got %s", example, kindName(item)), portShorthandHint(item))
		return false
	}
	ok := d.fields(item, reflect.ValueOf(e).Elem(), field)
	if _, has := d.pos[join(field, "port")]; !has {
		d.add(item, join(field, "port"), "missing", "every entry needs a port number")
		ok = false
	}
	return ok
}

// exemptPorts is exceptions.ports.
type exemptPorts []olc.PortKey

func (l *exemptPorts) decodeYAML(d *decoder, n *yaml.Node, path string) bool {
	*l = nil
	return d.seq(n, path, func(item *yaml.Node, field string) bool {
		e := portKeyEntry{Proto: olc.ProtoTCP}
		if !d.entry(item, field, &e, "{port: 22, proto: tcp}") {
			return false
		}
		*l = append(*l, olc.PortKey{Proto: e.Proto, Port: uint16(e.Port)})
		return true
	})
}

// managementPorts is exceptions.management: each entry a port number (TCP,
// which every remote shell and config agent uses), or {port, proto}.
type managementPorts []olc.PortKey

func (l *managementPorts) decodeYAML(d *decoder, n *yaml.Node, path string) bool {
	*l = nil
	return d.seq(n, path, func(item *yaml.Node, field string) bool {
		e := portKeyEntry{Proto: olc.ProtoTCP}
		switch {
		case item.Kind == yaml.ScalarNode && item.Tag == "!!int":
			if !e.Port.decodeYAML(d, item, field) {
				return false
			}
		case item.Kind != yaml.MappingNode:
			d.add(item, field, "must be a port number such as 22, or {port: 22, proto: tcp}, got "+kindName(item), quotedNumberHint(item))
			return false
		case !d.entry(item, field, &e, ""):
			return false
		}
		*l = append(*l, olc.PortKey{Proto: e.Proto, Port: uint16(e.Port)})
		return true
	})
}

// portNumber is a port number, 1..65535.
type portNumber uint16

func (p *portNumber) decodeYAML(d *decoder, n *yaml.Node, field string) bool {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err == nil && (v < 1 || v > 65535) {
			d.add(n, field, fmt.Sprintf("port %s is out of range: must be 1..65535", n.Value), "")
			return false
		}
	}
	v, ok := d.integer(n, field, 1, 65535, "")
	*p = portNumber(v)
	return ok
}

// portMode is a port's own mode: observe or enforce (olc.ModeOff, the zero
// value, is no override).
type portMode olc.Mode

func (m *portMode) decodeYAML(d *decoder, n *yaml.Node, field string) bool {
	s, ok := d.enum(n, field, []string{"observe", "enforce"})
	if !ok {
		if n.Value == "off" {
			d.problems[len(d.problems)-1].Hint = "a port cannot be switched off alone: remove it from ports, or list it under exceptions"
		}
		return false
	}
	mode, _ := olc.ParseMode(s)
	*m = portMode(mode)
	return true
}

// responseTarget is a response-time target: auto, off, a duration (50ms)
// or seconds (0.05), in (0, 30s].
type responseTarget adaptive.ResponseTarget

func (t *responseTarget) decodeYAML(d *decoder, n *yaml.Node, field string) bool {
	x, ok := 0.0, false
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		switch n.Value {
		case "auto":
			*t = responseTarget{Auto: true}
			return true
		case "off":
			*t = responseTarget{}
			return true
		}
		dur, good := d.duration(n, field)
		if !good {
			d.problems[len(d.problems)-1].Hint = "write auto, off, or a duration such as 50ms"
			return false
		}
		x, ok = dur.Seconds(), true
	} else if x, ok = d.number(n, field); !ok {
		return false
	}
	if !(x > 0 && x <= adaptive.MaxResponseTarget) {
		hint := "write auto, off, or a duration such as 50ms"
		if n.Tag != "!!str" && x > adaptive.MaxResponseTarget && x/1000 <= adaptive.MaxResponseTarget {
			// A bare number is seconds: 50 is most likely 50 ms.
			hint = fmt.Sprintf("a bare number is seconds: did you mean %gms?", x)
		}
		d.add(n, field, fmt.Sprintf("response target %v s is out of range: must be in (0, 30s]", x), hint)
		return false
	}
	*t = responseTarget{Seconds: x}
	return true
}
