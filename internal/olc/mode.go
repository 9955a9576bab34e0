package olc

import "slices"

// Mode is the operating mode, globally and per port: off, observe or
// enforce (0..2, the values of enum olcd_mode in bpf/olcd.h). A packet's
// effective mode at the datapath is the smaller of the global and the
// port's.
type Mode uint8

// The modes, in increasing order of effect.
const (
	// ModeOff: nothing is shed; the datapath counts new connections and
	// passes them all (the kill switch). Signals and counters are still
	// reported. In a rules port entry the zero value means "no override".
	ModeOff Mode = iota
	// ModeObserve: the controller runs and the datapath counts what it
	// would shed (would-drop) without shedding.
	ModeObserve
	// ModeEnforce: the datapath drops, marks or rejects the new
	// connections the draw selects.
	ModeEnforce
)

var modeNames = []string{"off", "observe", "enforce"}

// ModeNames returns the modes' names in order: off, observe, enforce.
func ModeNames() []string { return slices.Clone(modeNames) }

// Valid reports whether m is one of the modes above.
func (m Mode) Valid() bool { return int(m) < len(modeNames) }

// String returns "off", "observe" or "enforce" (or "mode(N)").
func (m Mode) String() string {
	if m.Valid() {
		return modeNames[m]
	}
	return "mode(" + itoa(uint64(m)) + ")"
}

// ParseMode parses "off", "observe" or "enforce". Errors: any other text,
// named with the accepted ones.
func ParseMode(s string) (Mode, error) {
	i, err := parseName("mode", s, modeNames)
	return Mode(i), err
}

// MarshalText returns the mode's name; an invalid mode is an error.
func (m Mode) MarshalText() ([]byte, error) {
	if !m.Valid() {
		return nil, invalid("mode", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText parses the text as ParseMode does.
func (m *Mode) UnmarshalText(text []byte) error {
	v, err := ParseMode(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Action is what a protected port does with a new connection the draw
// selects in enforce mode: drop, mark or reject (0..2, the values of enum
// olcd_action).
type Action uint8

// The actions.
const (
	// ActionDrop drops the SYN (or UDP request): XDP_DROP, TC_ACT_SHOT. The
	// client retries later.
	ActionDrop Action = iota
	// ActionMark passes the packet with its DSCP rewritten and, at TC,
	// skb->mark set, so that a later stage (a load balancer, tc, iptables)
	// decides.
	ActionMark
	// ActionReject answers a shed TCP SYN with a RST|ACK from the datapath
	// (rate-limited per CPU): the client's connect fails at once instead of
	// waiting out its SYN retransmit timeout. UDP requests are dropped.
	ActionReject
)

var actionNames = []string{"drop", "mark", "reject"}

// ActionNames returns the actions' names in documentation order: drop,
// mark, reject.
func ActionNames() []string { return slices.Clone(actionNames) }

// Valid reports whether a is one of the actions above.
func (a Action) Valid() bool { return int(a) < len(actionNames) }

// String returns "drop", "mark" or "reject" (or "action(N)").
func (a Action) String() string {
	if a.Valid() {
		return actionNames[a]
	}
	return "action(" + itoa(uint64(a)) + ")"
}

// ParseAction parses "drop", "mark" or "reject". Errors: any other text,
// named with the accepted ones.
func ParseAction(s string) (Action, error) {
	i, err := parseName("action", s, actionNames)
	return Action(i), err
}

// MarshalText returns the action's name; an invalid action is an error.
func (a Action) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, invalid("action", uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText parses the text as ParseAction does.
func (a *Action) UnmarshalText(text []byte) error {
	v, err := ParseAction(string(text))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// AttachMode selects the hook and the attach ladder of an interface
// (docs/config.md, attach). The zero value "" is not a mode; configs
// default to AttachAuto.
type AttachMode string

// The attach modes.
const (
	// AttachAuto is the default: AttachTC.
	AttachAuto AttachMode = "auto"
	// AttachTC attaches at TC ingress with tcx, falling back to a clsact
	// qdisc and a direct-action cls_bpf filter where the kernel has no tcx.
	AttachTC AttachMode = "tc"
	// AttachXDP attaches XDP in native (driver) mode, falling back to
	// generic mode when the driver refuses.
	AttachXDP AttachMode = "xdp"
	// AttachXDPNative attaches XDP in native mode only (fails where the
	// driver lacks it).
	AttachXDPNative AttachMode = "xdp-native"
	// AttachXDPGeneric attaches XDP in generic (skb) mode only.
	AttachXDPGeneric AttachMode = "xdp-generic"
)

var attachModes = []AttachMode{AttachAuto, AttachTC, AttachXDP, AttachXDPNative, AttachXDPGeneric}

// AttachModes returns the attach modes in documentation order.
func AttachModes() []AttachMode { return slices.Clone(attachModes) }

// Valid reports whether m is one of the attach modes above.
func (m AttachMode) Valid() bool { return slices.Contains(attachModes, m) }

// String returns the mode as written in the config, e.g. "xdp-native".
func (m AttachMode) String() string { return string(m) }

// ParseAttachMode parses "auto", "tc", "xdp", "xdp-native" or
// "xdp-generic". Errors: any other text, named with the accepted ones.
func ParseAttachMode(s string) (AttachMode, error) {
	names := make([]string, len(attachModes))
	for i, m := range attachModes {
		names[i] = string(m)
	}
	i, err := parseName("attach mode", s, names)
	if err != nil {
		return "", err
	}
	return attachModes[i], nil
}

// MarshalText returns the mode's text; an invalid mode is an error.
func (m AttachMode) MarshalText() ([]byte, error) {
	if !m.Valid() {
		return nil, invalid("attach mode", string(m))
	}
	return []byte(m), nil
}

// UnmarshalText parses the text as ParseAttachMode does.
func (m *AttachMode) UnmarshalText(text []byte) error {
	v, err := ParseAttachMode(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Retransmits is how a protected port's datapath treats a retransmitted
// SYN, one whose earlier copy it dropped (its SYN table knows them): 0..2,
// the values of policy field shed_retransmits. The controller sets it with
// each drop probability (docs/controller.md §1).
type Retransmits uint8

// The retransmit rules.
const (
	// RetransmitsAsFirst: a retransmit meets the drop probability like a
	// first attempt.
	RetransmitsAsFirst Retransmits = iota
	// RetransmitsShed: every retransmit is dropped, first attempts meet
	// the drop probability. While a port sheds with a target below the
	// SYN retransmit timeout, a client that retransmits has waited a
	// second already: its answer is late whatever follows, and the worker
	// it would take is a first attempt's that would be on time.
	RetransmitsShed
	// RetransmitsLast: every first attempt passes, retransmits meet the
	// drop probability: after an overload the clients still retrying get
	// the capacity that new clients leave, and new clients are not shed
	// behind them.
	RetransmitsLast
)

var retransmitNames = []string{"as-first", "shed", "last"}

// Valid reports whether r is one of the rules above.
func (r Retransmits) Valid() bool { return int(r) < len(retransmitNames) }

// String returns "as-first", "shed" or "last" (or "retransmits(N)").
func (r Retransmits) String() string {
	if r.Valid() {
		return retransmitNames[r]
	}
	return "retransmits(" + itoa(uint64(r)) + ")"
}

// ParseRetransmits parses "as-first", "shed" or "last". Errors: any other
// text, named with the accepted ones.
func ParseRetransmits(s string) (Retransmits, error) {
	i, err := parseName("retransmit rule", s, retransmitNames)
	return Retransmits(i), err
}

// MarshalText returns the rule's name; an invalid rule is an error.
func (r Retransmits) MarshalText() ([]byte, error) {
	if !r.Valid() {
		return nil, invalid("retransmit rule", uint8(r))
	}
	return []byte(r.String()), nil
}

// UnmarshalText parses the text as ParseRetransmits does.
func (r *Retransmits) UnmarshalText(text []byte) error {
	v, err := ParseRetransmits(string(text))
	if err != nil {
		return err
	}
	*r = v
	return nil
}
