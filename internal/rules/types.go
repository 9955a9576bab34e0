// Package rules is the only place that knows olcd's YAML configuration. It
// decodes one file strictly (an unknown key is an error), validates it in one
// pass that reports every problem with file:line and the field path, and
// hands the other packages plain typed values: adaptive.Config for the
// controller, sampler.Config for the sampler and the fields the daemon maps
// onto the loader. docs/config.md documents every key and default.
package rules

import (
	"fmt"
	"strings"
)

// Mode is the global (or a port's) operating mode.
type Mode uint8

// The modes. For a Port, ModeOff (the zero value) means "no override".
const (
	// ModeOff: nothing is shed; the datapath passes everything (the kill
	// switch). Signals and counters are still reported.
	ModeOff Mode = iota
	// ModeObserve: the controller runs and the datapath counts what it would
	// drop (would-drop) without dropping.
	ModeObserve
	// ModeEnforce: the datapath drops (or marks) new connections with the
	// controller's probabilities.
	ModeEnforce
)

// String returns "off", "observe" or "enforce".
func (m Mode) String() string {
	switch m {
	case ModeOff:
		return "off"
	case ModeObserve:
		return "observe"
	case ModeEnforce:
		return "enforce"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode parses "off", "observe" or "enforce".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "off":
		return ModeOff, nil
	case "observe":
		return ModeObserve, nil
	case "enforce":
		return ModeEnforce, nil
	}
	return 0, fmt.Errorf("unknown mode %q: want off, observe or enforce", s)
}

// Action is what the datapath does to a new connection it sheds.
type Action uint8

// The actions.
const (
	// ActionDrop drops the SYN (or UDP request); the client retries later.
	ActionDrop Action = iota
	// ActionMark passes the packet with a DSCP and/or fwmark set, so that a
	// later stage (a load balancer, tc, iptables) decides.
	ActionMark
	// ActionReject answers a shed TCP SYN with a RST|ACK from the datapath
	// (rate-limited per CPU): the client's connect fails at once instead of
	// waiting out its SYN retransmit timeout. UDP requests are dropped.
	ActionReject
)

// actionNames lists the actions in documentation order.
var actionNames = []string{"drop", "mark", "reject"}

// String returns "drop", "mark" or "reject".
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ParseAction parses "drop", "mark" or "reject".
func ParseAction(s string) (Action, error) {
	for i, n := range actionNames {
		if s == n {
			return Action(i), nil
		}
	}
	return 0, fmt.Errorf("unknown action %q: want drop, mark or reject", s)
}

// AttachMode is how the datapath attaches to the interfaces; the loader
// defines the ladder each mode walks (see docs/config.md).
type AttachMode string

// The attach modes.
const (
	// AttachAuto is the default: TC (tcx, falling back to clsact).
	AttachAuto AttachMode = "auto"
	// AttachTC is tcx, falling back to clsact + cls_bpf.
	AttachTC AttachMode = "tc"
	// AttachXDP is native XDP, falling back to generic XDP.
	AttachXDP AttachMode = "xdp"
	// AttachXDPNative is native XDP only (fails where the driver lacks it).
	AttachXDPNative AttachMode = "xdp-native"
	// AttachXDPGeneric is generic (skb) XDP only.
	AttachXDPGeneric AttachMode = "xdp-generic"
)

// attachModes lists the valid attach modes in documentation order.
var attachModes = []AttachMode{AttachAuto, AttachTC, AttachXDP, AttachXDPNative, AttachXDPGeneric}

// Problem is one thing wrong with a config document.
type Problem struct {
	// File is the document's source (a path, or a name such as "patch").
	File string
	// Line is the 1-based line of the offending node; 0 when unknown.
	Line int
	// Field is the dotted field path, e.g. "signals.cpu_busy.threshold" or
	// "ports[2].port"; "" for the document as a whole.
	Field string
	// Msg says what is wrong, in lowercase words.
	Msg string
	// Hint suggests a fix, e.g. `looks like percent; did you mean 0.8?`.
	Hint string
}

// String renders "file:line: field: msg (hint)".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	if p.Hint != "" {
		fmt.Fprintf(&b, " (%s)", p.Hint)
	}
	return b.String()
}

// ValidationError lists every problem of a document, in document order.
type ValidationError struct {
	// Problems holds at least one problem, sorted by file and line.
	Problems []Problem
}

// Error renders the problems one per line, the first preceded by their count.
func (e *ValidationError) Error() string {
	lines := e.ProblemLines()
	if len(lines) == 1 {
		return "invalid config: " + lines[0]
	}
	return fmt.Sprintf("invalid config, %d problems:\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// ProblemLines returns one "file:line: field: msg (hint)" line per problem
// (the admin API sends them as a list).
func (e *ValidationError) ProblemLines() []string {
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.String()
	}
	return out
}

// Warning is a valid but surprising setting: the config loads, and the
// daemon logs the warning (e.g. everything in observe, enforce without any
// threshold).
type Warning struct {
	// File is the document's source.
	File string
	// Line is the 1-based line of the setting; 0 when it comes from a
	// default.
	Line int
	// Field is the dotted field path, e.g. "controller.min_pass_rate".
	Field string
	// Msg says what is surprising, in lowercase words.
	Msg string
}

// String renders "file:line: field: msg".
func (w Warning) String() string {
	return Problem{File: w.File, Line: w.Line, Field: w.Field, Msg: w.Msg}.String()
}
