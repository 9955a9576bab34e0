package rules

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestProblemAt: a problem the daemon finds in a loaded config names the
// file and line the setting came from: the file's, a patch's own line, or
// the file without a line for a default.
func TestProblemAt(t *testing.T) {
	cfg, _, err := Parse([]byte("mode: observe\n\ndecision_log: /var/log/x.jsonl\nlb:\n  agent: {address: '127.0.0.1:9999'}\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	patched, _, err := cfg.Patch([]byte("interfaces: [eth9]\n"), "admin patch")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cfg   *Config
		field string
		want  string
	}{
		{cfg, "decision_log", "x.yaml:3: decision_log: m (h)"},
		{cfg, "lb.agent.address", "x.yaml:5: lb.agent.address: m (h)"},
		{cfg, "interfaces", "x.yaml: interfaces: m (h)"},
		{patched, "interfaces", "admin patch:1: interfaces: m (h)"},
		{patched, "decision_log", "x.yaml:3: decision_log: m (h)"},
		{Default(), "interfaces", "embedded default: interfaces: m (h)"},
	}
	for _, tt := range tests {
		err := tt.cfg.ProblemAt(tt.field, "m", "h")
		ve, ok := err.(*ValidationError)
		if !ok || len(ve.Problems) != 1 || ve.ProblemLines()[0] != tt.want {
			t.Errorf("ProblemAt(%q) = %v, want %q", tt.field, err, tt.want)
		}
	}
}

// TestPatchWithoutSetting: a patch that sets nothing (no bytes, white
// space, comments, null, {}) is refused naming its source, instead of being
// kept and shown as a live override that changes nothing.
func TestPatchWithoutSetting(t *testing.T) {
	for _, doc := range []string{"", "\n  \n", "# mode: off\n", "null", "~", "{}", "--- {}\n"} {
		_, _, err := Default().Patch([]byte(doc), "admin patch")
		if err == nil || !strings.Contains(err.Error(), "admin patch: the patch holds no setting") {
			t.Errorf("patch %q: %v, want a refusal naming admin patch", doc, err)
		}
	}
	if _, _, err := Default().Patch([]byte("controller: {ki: null}"), "admin patch"); err != nil {
		t.Errorf("a patch resetting one key was refused: %v", err)
	}
}

// TestTabIndentHint: a syntax error on a line indented with a tab says so
// (go-yaml names only a character that cannot start a token); other syntax
// errors and tabs inside a line get no such hint.
func TestTabIndentHint(t *testing.T) {
	const hint = "the line is indented with a tab: YAML indents with spaces only"
	for _, tt := range []struct {
		doc, want string
		hinted    bool
	}{
		{"ports:\n\t- {port: 80}\n", "x.yaml:2: yaml syntax:", true},
		{"controller:\n  ki: 0.5\n \tkp: 0.1\n", "x.yaml:3: yaml syntax:", true},
		{"mode: [enforce\n", "x.yaml:1: yaml syntax:", false},
	} {
		_, _, err := Parse([]byte(tt.doc), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), hint) != tt.hinted {
			t.Errorf("%q: %v; want %q, tab hint %v", tt.doc, err, tt.want, tt.hinted)
		}
	}
	if _, _, err := Parse([]byte("mode:\tenforce\n"), "x.yaml"); err != nil {
		t.Errorf("a tab after the colon is valid YAML: %v", err)
	}
}

// TestNumberOutOfRange: a number too large for a float64 is
// said to be one (go-yaml reads it as text, and the problem said "got the
// string"), in YAML and in a JSON patch, with the field's range.
func TestNumberOutOfRange(t *testing.T) {
	for _, doc := range []string{"controller: {ki: 1e400}\n", `{"controller": {"ki": -1e400}}`} {
		_, _, err := Parse([]byte(doc), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), "x.yaml:1: controller.ki:") || !strings.Contains(err.Error(), "e400 is not a finite number: must be in (0, 2]") {
			t.Errorf("%q: %v, want the number named out of range", doc, err)
		}
	}
	if _, _, err := Parse([]byte(`controller: {ki: "1e400"}`), "x.yaml"); err == nil || !strings.Contains(err.Error(), "got the string") {
		t.Errorf("a quoted 1e400 is a string: %v", err)
	}
}

// TestOwnPathsApart: the decision log and the admin socket may not be the
// config file itself, nor each other: the log's records would be appended
// to the config.
func TestOwnPathsApart(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"decision_log: /etc/olcd/olcd.yaml\n", `/etc/olcd/olcd.yaml:1: decision_log: "/etc/olcd/olcd.yaml" is the config file itself`},
		{"admin: {socket: /etc/olcd/./olcd.yaml}\n", `/etc/olcd/olcd.yaml:1: admin.socket: "/etc/olcd/./olcd.yaml" is the config file itself`},
		{"decision_log: /run/olcd/x\nadmin: {socket: /run/olcd/x}\n", `decision_log: "/run/olcd/x" is also admin.socket`},
	} {
		_, _, err := Parse([]byte(tt.doc), "/etc/olcd/olcd.yaml")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.doc, err, tt.want)
		}
	}
	if _, _, err := Parse([]byte("decision_log: /var/log/olcd/olcd.yaml\n"), "/etc/olcd/olcd.yaml"); err != nil {
		t.Errorf("a decision log elsewhere was refused: %v", err)
	}
}

// TestResponseTargetBareNumberHint: a bare number beyond 30 s as a
// response target is most likely milliseconds, and the hint says so.
func TestResponseTargetBareNumberHint(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"controller: {response_target: 50}\n", "a bare number is seconds: did you mean 50ms?"},
		{"ports: [{port: 80, response_target: 250}]\n", "a bare number is seconds: did you mean 250ms?"},
		{"controller: {response_target: 31s}\n", "write auto, off, or a duration such as 50ms"},
		{"controller: {response_target: 100000}\n", "write auto, off, or a duration such as 50ms"},
	} {
		_, _, err := Parse([]byte(tt.doc), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.doc, err, tt.want)
		}
	}
}

// TestNoSignalWarning: "the controller never sheds" is warned only when
// nothing can shed: no signal threshold and no port under the law on the
// measured response time (timing off, or every target off). With the
// default response_target: auto the law sheds without any signal, and the
// warning said it never would.
func TestNoSignalWarning(t *testing.T) {
	const none = "signals: {psi_cpu_some: null, psi_memory_full: null, accept_queue_fill: null}\n"
	for _, tt := range []struct {
		doc  string
		warn bool
	}{
		{"mode: enforce\n", false},
		{"mode: enforce\n" + none, false},
		{"mode: enforce\ncontroller: {response_target: off}\n" + none, true},
		{"mode: enforce\ndatapath: {response_sample: 0}\n" + none, true},
		{"mode: enforce\ncontroller: {response_target: off}\nports: [{port: 80, response_target: 50ms}]\n" + none, false},
		{"mode: enforce\nports: [{port: 80, response_target: off}]\n" + none, true},
	} {
		// Patched onto the default so that null removes the default signals.
		base, _, err := Parse([]byte("mode: enforce\n"), "x.yaml")
		if err != nil {
			t.Fatal(err)
		}
		_, warns, err := base.Patch([]byte(tt.doc), "patch")
		if err != nil {
			t.Fatalf("%q: %v", tt.doc, err)
		}
		got := false
		for _, w := range warns {
			got = got || strings.Contains(w.String(), "the controller never sheds")
		}
		if got != tt.warn {
			t.Errorf("%q: warnings %v, want the never-sheds warning %v", tt.doc, warns, tt.warn)
		}
	}
}

// TestRequestGateKey: ports[].request_gate is off unless set; set, it is
// refused on a UDP port, with response timing off and under the mark
// action, each at its entry.
func TestRequestGateKey(t *testing.T) {
	c, _, err := Parse([]byte("ports: [{port: 80, request_gate: true}, {port: 443}]\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Ports[0].RequestGate || c.Ports[1].RequestGate {
		t.Errorf("request_gate %v %v, want true false", c.Ports[0].RequestGate, c.Ports[1].RequestGate)
	}
	for _, tt := range []struct{ doc, want string }{
		{"ports: [{port: 53, proto: udp, request_gate: true}]\n", "ports[0].request_gate: the request gate resets TCP connections"},
		{"datapath: {response_sample: 0}\nports: [{port: 80, request_gate: true}]\n", "ports[0].request_gate: the request gate reads response timing's flow table"},
		{"action: {kind: mark, dscp: 8}\nports: [{port: 443}, {port: 80, request_gate: true}]\n", "ports[1].request_gate: the mark action passes what it selects"},
		{"ports: [{port: 80, request_gate: on}]\n", "must be true or false"},
	} {
		_, _, err := Parse([]byte(tt.doc), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.doc, err, tt.want)
		}
	}
}

// TestNonFiniteNumbers: every spelling of a number that is not finite —
// YAML's .nan and .inf, Go's NaN and Inf (what `olcd set threshold X NaN`
// sends), a number beyond float64 (1e309) — is one problem, naming the
// value as written and the field's range, in a file and in a live patch
// alike (NaN was "got the string", 1e309 "beyond the range of a number"
// without the range, .inf for a response time "did you mean +Infms?"); -0
// is 0.
func TestNonFiniteNumbers(t *testing.T) {
	fields := []struct {
		doc, field, allowed string
	}{
		{"signals: {cpu_busy: {threshold: %s}}", "signals.cpu_busy.threshold", "(0, 1]"},
		{"signals: {response_time_p95: {threshold: %s}}", "signals.response_time_p95.threshold", "(0, 30s]"},
		{"signals: {load1: {threshold: %s}}", "signals.load1.threshold", "(0, ∞)"},
		{"controller: {ki: %s}", "controller.ki", "(0, 2]"},
		{"controller: {response_target: %s}", "controller.response_target", "(0, 30s]"},
		{"ports: [{port: 443, caps: {rate: %s}}]", "ports[0].caps.rate", "[0, 1000000000]"},
		{"controller: {activation_ticks: %s}", "controller.activation_ticks", "whole number in 1..10"},
		{"interval: %s", "interval", "must be a duration"},
	}
	for _, f := range fields {
		for _, v := range []string{".nan", ".inf", "-.inf", "NaN", "Inf", "-Infinity", "nan", "1e309", "-1e309", "1_0e309"} {
			doc := fmt.Sprintf(f.doc, v) + "\n"
			_, _, ferr := Parse([]byte(doc), "f.yaml")
			_, _, perr := Default().Patch([]byte(doc), "admin patch")
			for _, c := range []struct {
				err  error
				file string
			}{{ferr, "f.yaml"}, {perr, "admin patch"}} {
				var ve *ValidationError
				if !errors.As(c.err, &ve) || len(ve.Problems) != 1 {
					t.Errorf("%s %q: %v, want one problem", c.file, doc, c.err)
					continue
				}
				got := ve.Problems[0].String()
				if !strings.HasPrefix(got, c.file+":1: "+f.field+": ") || !strings.Contains(got, v) || !strings.Contains(got, f.allowed) || !strings.Contains(got, "not a finite number") {
					t.Errorf("%s %q: %q, want %s:1: %s: naming %s as not a finite number and %s", c.file, doc, got, c.file, f.field, v, f.allowed)
				}
			}
		}
	}
	for _, doc := range []string{"controller: {min_pass_rate: -0}\n", "controller: {min_pass_rate: -0.0}\n"} {
		cfg, _, err := Parse([]byte(doc), "f.yaml")
		if err != nil || math.Signbit(cfg.Controller.MinPassRate) {
			t.Errorf("%q: %v, min_pass_rate %v; want 0", doc, err, cfg.Controller.MinPassRate)
		}
	}
}
