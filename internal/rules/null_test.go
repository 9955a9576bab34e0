package rules

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// TestNullMeansBeneath: a null (`key:`, `~`, `null`) says "as if this
// document did not write the key", in a file and in a live patch alike: in
// the file the key keeps its default (it was an empty list or string there,
// an error for a number, and no signal at all for `signals:`, while in a
// patch it meant the default even where the file set the key); in a patch
// the key is back to the file's value, or to the default where the file
// does not set it. Scalars, lists, mappings and signals; a file's null
// that is not a section is warned of.
func TestNullMeansBeneath(t *testing.T) {
	const file = "mode: enforce\ninterval: 250ms\nmetrics: {address: '127.0.0.1:9999'}\nports: [443]\n" +
		"controller: {ki: 0.7, kp: 0.2}\nexceptions: {management: [2222]}\nsignals: {cpu_busy: {threshold: 0.8}}\n"
	const patch = "mode: off\ninterval: 1s\nmetrics: {address: ''}\nports: [8080]\ncontroller: {ki: 0.3}\n" +
		"exceptions: {management: []}\nsignals: {cpu_busy: {threshold: 0.6}, psi_io_some: {threshold: 0.3}}\n"
	def := Default()
	for _, tt := range []struct {
		name      string
		fileNull  string // the file with the key null: its default
		patchNull string // after the patch: the file's value
		warn      string // the field the file's null is warned of ("" for none)
		isDefault func(c *Config) bool
		isFiles   func(c *Config) bool
	}{
		{name: "scalar (enum)", fileNull: "mode: ~\n", patchNull: "mode: null\n", warn: "mode",
			isDefault: func(c *Config) bool { return c.Mode == def.Mode },
			isFiles:   func(c *Config) bool { return c.Mode == olc.ModeEnforce }},
		{name: "scalar (duration)", fileNull: "interval:\n", patchNull: "interval: null\n", warn: "interval",
			isDefault: func(c *Config) bool { return c.Interval == DefaultInterval },
			isFiles:   func(c *Config) bool { return c.Interval == 250*time.Millisecond }},
		{name: "scalar (string)", fileNull: "metrics: {address: }\n", patchNull: "metrics: {address: null}\n", warn: "metrics.address",
			isDefault: func(c *Config) bool { return c.MetricsAddress == def.MetricsAddress },
			isFiles:   func(c *Config) bool { return c.MetricsAddress == "127.0.0.1:9999" }},
		{name: "scalar (number)", fileNull: "controller: {ki: null}\n", patchNull: "controller: {ki: ~}\n", warn: "controller.ki",
			isDefault: func(c *Config) bool { return c.Controller.Ki == def.Controller.Ki },
			isFiles:   func(c *Config) bool { return c.Controller.Ki == 0.7 && c.Controller.Kp == 0.2 }},
		{name: "list (ports: auto by default)", fileNull: "ports:\n", patchNull: "ports: null\n", warn: "ports",
			isDefault: func(c *Config) bool { return c.PortsAuto },
			isFiles:   func(c *Config) bool { return !c.PortsAuto && len(c.Ports) == 1 && c.Ports[0].Key.Port == 443 }},
		{name: "list ([22] by default)", fileNull: "exceptions: {management: }\n", patchNull: "exceptions: {management: null}\n", warn: "exceptions.management",
			isDefault: func(c *Config) bool { return slices.Equal(c.Exceptions.Management, def.Exceptions.Management) },
			isFiles: func(c *Config) bool {
				return len(c.Exceptions.Management) == 1 && c.Exceptions.Management[0].Port == 2222
			}},
		{name: "mapping (section)", fileNull: "controller:\n", patchNull: "controller: null\n",
			isDefault: func(c *Config) bool { return c.Controller == def.Controller },
			isFiles:   func(c *Config) bool { return c.Controller.Ki == 0.7 && c.Controller.Kp == 0.2 }},
		{name: "mapping (signals)", fileNull: "signals:\n", patchNull: "signals: null\n", warn: "signals",
			isDefault: func(c *Config) bool { return c.Thresholds == def.Thresholds },
			isFiles: func(c *Config) bool {
				var want Thresholds
				want[olc.CPUBusy] = 0.8
				return c.Thresholds == want
			}},
		{name: "one signal", fileNull: "signals: {cpu_busy: {threshold: 0.5}, psi_io_some: null}\n", patchNull: "signals: {cpu_busy: null, psi_io_some: null}\n", warn: "signals.psi_io_some",
			isDefault: func(c *Config) bool { return c.Thresholds[olc.CPUBusy] == 0.5 && c.Thresholds[olc.PSIIOSome] == 0 },
			isFiles: func(c *Config) bool {
				return c.Thresholds[olc.CPUBusy] == 0.8 && c.Thresholds[olc.PSIIOSome] == 0 // the file has no psi_io_some
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, warns, err := Parse([]byte(tt.fileNull), "f.yaml")
			if err != nil || !tt.isDefault(c) {
				t.Errorf("file %q: %v, want the default", tt.fileNull, err)
			}
			warned := slices.ContainsFunc(warns, func(w Warning) bool {
				return w.Field == tt.warn && w.File == "f.yaml" && strings.Contains(w.Msg, "no value (null): its default applies")
			})
			if warned != (tt.warn != "") {
				t.Errorf("file %q: warnings %v, want one at %q", tt.fileNull, warns, tt.warn)
			}
			base, _, err := Parse([]byte(file), "f.yaml")
			if err != nil {
				t.Fatal(err)
			}
			patched, _, err := base.Patch([]byte(patch), "admin patch")
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []*Config{base, patched} {
				got, _, err := c.Patch([]byte(tt.patchNull), "admin patch")
				if err != nil || !tt.isFiles(got) {
					t.Errorf("patch %q: %v, want the file's value", tt.patchNull, err)
				}
			}
			got, _, err := Default().Patch([]byte(tt.patchNull), "admin patch")
			if err != nil || got.Digest() != def.Digest() {
				t.Errorf("patch %q on the embedded default: %v, want the default", tt.patchNull, err)
			}
		})
	}
}

// TestNullKeyTypoRefused: a key the schema does not know is refused with
// its file:line and the closest known key when it has no value, as when it
// has one, in a file and in a live patch alike: a null means "as if left
// out" only for a key olcd knows (DropNulls and the merge took `mdoe:` out
// before the decoder saw it, and it loaded with a warning, or silently).
func TestNullKeyTypoRefused(t *testing.T) {
	for _, tt := range []struct {
		name, doc  string
		line       int
		field, msg string
		hint       string
	}{
		{name: "top level", doc: "interval: 1s\nmdoe:\n", line: 2, field: "mdoe", msg: "unknown key", hint: `did you mean "mode"?`},
		{name: "top level ~", doc: "mdoe: ~\n", line: 1, field: "mdoe", msg: "unknown key", hint: `did you mean "mode"?`},
		{name: "controller key", doc: "controller:\n  ki: 0.3\n  kpp: null\n", line: 3, field: "controller.kpp", msg: "unknown key", hint: `did you mean "kp"?`},
		{name: "retired controller key", doc: "controller:\n  smoothing:\n", line: 2, field: "controller.smoothing", msg: "this key was retired"},
		{name: "signal name", doc: "signals:\n  cpu_bsy:\n", line: 2, field: "signals.cpu_bsy", msg: `unknown signal "cpu_bsy"`, hint: `did you mean "cpu_busy"?`},
		{name: "signal name, flow", doc: "signals: {cpu_busy: {threshold: 0.7}, cpu_bsy: }\n", line: 1, field: "signals.cpu_bsy", msg: `unknown signal "cpu_bsy"`, hint: `did you mean "cpu_busy"?`},
		{name: "signal key", doc: "signals:\n  cpu_busy:\n    threshold: 0.7\n    treshold:\n", line: 4, field: "signals.cpu_busy.treshold", msg: "unknown key", hint: `did you mean "threshold"?`},
		{name: "list entry", doc: "ports:\n  - port: 443\n    prto:\n", line: 3, field: "ports[0].prto", msg: "unknown key", hint: `did you mean "proto"?`},
		{name: "written twice, once without a value", doc: "mode: enforce\nmode:\n", line: 2, field: "mode", msg: "duplicate key (first at line 1)"},
	} {
		for _, kind := range []string{"file", "patch"} {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				var err error
				src := "f.yaml"
				if kind == "file" {
					_, _, err = Parse([]byte(tt.doc), src)
				} else {
					src = "admin patch"
					_, _, err = Default().Patch([]byte(tt.doc), src)
				}
				var ve *ValidationError
				if !errors.As(err, &ve) {
					t.Fatalf("%q: err %v, want a *ValidationError", tt.doc, err)
				}
				if !slices.ContainsFunc(ve.Problems, func(p Problem) bool {
					return p.File == src && p.Line == tt.line && p.Field == tt.field && p.Msg == tt.msg && (tt.hint == "" || p.Hint == tt.hint)
				}) {
					t.Errorf("%q: problems %q, want %s:%d: %s: %s (%s)", tt.doc, ve.Problems, src, tt.line, tt.field, tt.msg, tt.hint)
				}
				if len(ve.Problems) != 1 {
					t.Errorf("%q: problems %q, want one", tt.doc, ve.Problems)
				}
			})
		}
	}
	// Both copies without a value: refused as written twice (the decoder
	// also reads the first as a value, which a file never reaches).
	if _, _, err := Parse([]byte("controller:\n  kp:\n  kp: ~\n"), "f.yaml"); err == nil || !strings.Contains(err.Error(), "f.yaml:3: controller.kp: duplicate key (first at line 2)") {
		t.Errorf("a key written twice without a value: %v, want the duplicate refused at line 3", err)
	}
	// A known key without a value still loads (its default), and a null
	// for a known signal still removes it in a patch.
	for _, doc := range []string{"mode:\n", "controller: {kp: }\n", "signals: {cpu_busy: {threshold: 0.7}, psi_io_some: }\n", "ports: [{port: 443, proto: }]\n"} {
		if _, _, err := Parse([]byte(doc), "f.yaml"); err != nil {
			t.Errorf("file %q: %v, want it to load", doc, err)
		}
	}
	for _, doc := range []string{"mode: null\n", "controller: {kp: ~}\n", "signals: {cpu_busy: null}\n"} {
		if _, _, err := Default().Patch([]byte(doc), "admin patch"); err != nil {
			t.Errorf("patch %q: %v, want it applied", doc, err)
		}
	}
}
