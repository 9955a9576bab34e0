package rules

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/lb"
	"github.com/olcd/olcd/internal/loader/dpconfig"

	"github.com/olcd/olcd/internal/olc"
	sy "github.com/olcd/olcd/internal/strictyaml"
)

// expectation is one "# want: LINE FIELD | msg substring | hint substring"
// (or "# warn: FIELD | substring") header line of a fixture. FIELD "-"
// stands for the document as a whole.
type expectation struct {
	line        int
	field       string
	msg, hint   string
	fixtureLine int
}

// readExpectations parses a fixture's header comments.
func readExpectations(t *testing.T, path, tag string) []expectation {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []expectation
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		rest, ok := strings.CutPrefix(sc.Text(), "# "+tag+": ")
		if !ok {
			continue
		}
		parts := strings.Split(rest, " | ")
		head := strings.Fields(parts[0])
		e := expectation{fixtureLine: n}
		if tag == "want" {
			if len(head) != 2 {
				t.Fatalf("%s:%d: want header needs LINE FIELD", path, n)
			}
			e.line, err = strconv.Atoi(head[0])
			if err != nil {
				t.Fatalf("%s:%d: %v", path, n, err)
			}
			e.field = head[1]
		} else {
			e.field = head[0]
		}
		if e.field == "-" {
			e.field = ""
		}
		if len(parts) > 1 {
			e.msg = parts[1]
		}
		if len(parts) > 2 {
			e.hint = parts[2]
		}
		out = append(out, e)
	}
	return out
}

// TestInvalidFixtures loads every testdata/invalid-*.yaml: each must fail
// with exactly the problems its header lists, each naming the file, the
// line and the field.
func TestInvalidFixtures(t *testing.T) {
	paths, err := filepath.Glob("testdata/invalid-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 20 {
		t.Fatalf("%d invalid fixtures, want at least 20", len(paths))
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			want := readExpectations(t, path, "want")
			if len(want) == 0 {
				t.Fatal("fixture has no '# want:' header")
			}
			cfg, _, err := Load(path)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Load = %v, %v; want a *ValidationError", cfg, err)
			}
			if len(ve.Problems) != len(want) {
				t.Fatalf("%d problems, want %d:\n%s", len(ve.Problems), len(want), strings.Join(ve.ProblemLines(), "\n"))
			}
			for i, w := range want {
				p := ve.Problems[i]
				if p.File != path || p.Line != w.line || p.Field != w.field ||
					!strings.Contains(p.Msg, w.msg) || !strings.Contains(p.Hint, w.hint) {
					t.Errorf("problem %d = %q\nwant %s:%d: %s: …%s… (…%s…)", i, p.String(), path, w.line, w.field, w.msg, w.hint)
				}
				if !strings.HasPrefix(p.String(), path+":"+strconv.Itoa(w.line)+": ") {
					t.Errorf("rendered problem %q does not start with file:line", p.String())
				}
			}
		})
	}
}

// TestValidFixtures loads every testdata/valid-*.yaml: no problem, exactly
// the warnings its header lists.
func TestValidFixtures(t *testing.T) {
	paths, _ := filepath.Glob("testdata/valid-*.yaml")
	if len(paths) == 0 {
		t.Fatal("no valid fixtures")
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			want := readExpectations(t, path, "warn")
			_, warnings, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) != len(want) {
				t.Fatalf("%d warnings %v, want %d", len(warnings), warnings, len(want))
			}
			for i, w := range want {
				got := warnings[i]
				if got.Field != w.field || !strings.Contains(got.Msg, w.msg) || got.File != path || got.Line == 0 {
					t.Errorf("warning %d = %q, want field %s containing %q", i, got.String(), w.field, w.msg)
				}
			}
		})
	}
}

// TestValidFull checks that every key of valid-full.yaml lands in the
// typed config.
func TestValidFull(t *testing.T) {
	c, _, err := Load("testdata/valid-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var th [olc.NumSignals]float64
	th[olc.CPUBusy], th[olc.PSICPUSome], th[olc.Load1PerCore] = 0.8, 0.4, 3
	th[olc.CgroupThrottledRatio], th[olc.ListenOverflowsPerS] = 0.3, 5
	th[olc.ResponseTimeP95], th[olc.ResponseTimeP99] = 0.05, 0.2
	want := &Config{
		Source:     "testdata/valid-full.yaml",
		Mode:       olc.ModeEnforce,
		Interfaces: []string{"eth0", "eth1"},
		Attach:     olc.AttachXDP,
		Interval:   250 * time.Millisecond,
		Thresholds: th,
		Cgroup:     "system.slice/nginx.service",
		Controller: adaptive.Params{Ki: 0.4, Kp: 0.2, ActivationTicks: 3, Hysteresis: 0.1, MinPassRate: 0.2, CorroborationRatio: 0.6,
			CapacityWindow: 5 * time.Second, ContinueEvery: 30 * time.Second, RecordChange: 0.02,
			OnsetInterval: 50 * time.Millisecond, TargetFactor: 4, InitialTarget: 200 * time.Millisecond},
		ResponseTarget: adaptive.ResponseTarget{Seconds: 0.08},
		Ports: []Port{
			{PortPolicy: dpconfig.PortPolicy{Key: olc.PortKey{Port: 443, Proto: olc.ProtoTCP}, Class: olc.ClassCritical, Mode: olc.ModeEnforce}},
			{PortPolicy: dpconfig.PortPolicy{Key: olc.PortKey{Port: 80, Proto: olc.ProtoTCP}, Class: olc.ClassNormal}, Target: adaptive.ResponseTarget{Auto: true}, HasTarget: true},
			{PortPolicy: dpconfig.PortPolicy{Key: olc.PortKey{Port: 8080, Proto: olc.ProtoTCP}, Class: olc.ClassBestEffort, Mode: olc.ModeObserve}},
			{PortPolicy: dpconfig.PortPolicy{Key: olc.PortKey{Port: 53, Proto: olc.ProtoUDP}, Class: olc.ClassNormal}, HasTarget: true},
		},
		Exceptions: Exceptions{
			Ports: []olc.PortKey{{Proto: olc.ProtoTCP, Port: 22}, {Proto: olc.ProtoTCP, Port: 9100}},
			Sources: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
				netip.MustParsePrefix("2001:db8::/32")},
			Management: []olc.PortKey{{Proto: olc.ProtoTCP, Port: 2222}, {Proto: olc.ProtoTCP, Port: 8022}},
		},
		Action:         ActionConfig{Kind: olc.ActionMark, DSCP: 8, SetDSCP: true, Fwmark: 0x10, Reject: dpconfig.DefaultReject()},
		StaleAfter:     3 * time.Second,
		MetricsAddress: "[::1]:9477",
		AdminSocket:    "/run/olcd/test.sock",
		DecisionLog:    "/var/log/olcd/test.jsonl",
		Datapath: DatapathConfig{Datapath: dpconfig.Datapath{MaxPorts: 256, SYNTableSize: 131072, MaxPrefixes: 64, Selection: "even",
			ResponseSample: 4, ResponsePorts: 16, FlowTableSize: 4096}, ResponseMinSamples: 10},
		LB: LBConfig{Agent: LBAgentConfig{Address: "10.0.0.5:9478", SendWait: 20 * time.Millisecond}, Weight: lb.Params{Smoothing: 0.3, MinWeight: 0.2}},
	}
	c.doc, c.file = nil, nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", c, want)
	}
	if got := c.Ports[2].EffectiveMode(olc.ModeEnforce); got != olc.ModeObserve {
		t.Errorf("port override: %v", got)
	}
	if got := c.Ports[1].EffectiveMode(olc.ModeEnforce); got != olc.ModeEnforce {
		t.Errorf("port without override: %v", got)
	}
	if got := c.Ports[0].EffectiveMode(olc.ModeOff); got != olc.ModeOff {
		t.Errorf("global off must win: %v", got)
	}
}

// TestDefault checks the embedded default and that it is valid and quiet.
func TestDefault(t *testing.T) {
	c := Default()
	if c.Mode != olc.ModeObserve || !c.PortsAuto || len(c.Interfaces) != 0 || c.Attach != olc.AttachAuto ||
		c.Interval != 500*time.Millisecond || c.Controller != adaptive.DefaultParams() || c.Thresholds != DefaultThresholds() {
		t.Errorf("default = %+v", c)
	}
	if _, w, err := Parse(nil, ""); err != nil || len(w) != 0 {
		t.Errorf("empty document: %v, warnings %v", err, w)
	}
	if err := c.Controller.Validate(); err != nil {
		t.Error(err)
	}
}

// TestDeployConfig: deploy/olcd.yaml validates without warning and spells
// out exactly the embedded default.
func TestDeployConfig(t *testing.T) {
	const path = "../../deploy/olcd.yaml"
	c, w, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	d := Default()
	c.Source, c.doc, c.file, d.doc = "", nil, nil, nil
	if !reflect.DeepEqual(c, d) {
		t.Errorf("deploy/olcd.yaml differs from the embedded default:\n%+v\n%+v", c, d)
	}
}

// TestThresholdOnlyConfig: a document that sets nothing but one signal's
// threshold is valid; that signal replaces the default list, and a warning
// names the default signals it leaves out (issue 28: it did so silently,
// while `olcd set threshold` adds to the running list). `off` says so and
// silences it.
func TestThresholdOnlyConfig(t *testing.T) {
	c, w, err := Parse([]byte("signals:\n  psi_cpu_some: {threshold: 0.4}\n"), "t.yaml")
	if err != nil || len(w) != 1 || w[0].String() != "t.yaml:2: signals: the list replaces the default signals: psi_memory_full or accept_queue_fill not used (list them to keep them, or write psi_memory_full: off to say so)" {
		t.Fatalf("%v %v", err, w)
	}
	if _, w, err := Parse([]byte("signals:\n  psi_cpu_some: {threshold: 0.4}\n  psi_memory_full: off\n  accept_queue_fill: off\n"), "t.yaml"); err != nil || len(w) != 0 {
		t.Errorf("with the defaults off: %v %v", err, w)
	}
	var want Thresholds
	want[olc.PSICPUSome] = 0.4
	if c.Thresholds != want {
		t.Errorf("thresholds %v", c.Thresholds)
	}
	if c.Mode != olc.ModeObserve || !c.PortsAuto || c.Controller != adaptive.DefaultParams() {
		t.Errorf("non-signal settings are not the defaults: %+v", c)
	}
}

func TestThresholdHints(t *testing.T) {
	tests := []struct {
		sig       olc.Signal
		x         float64
		msg, hint string
	}{
		{olc.CPUBusy, 950, "outside (0, 1]", "per-mille; did you mean 0.95?"},
		{olc.CPUBusy, 80, "outside (0, 1]", "percent; did you mean 0.8?"},
		{olc.PSIMemoryFull, 2, "outside (0, 1]", "percent; did you mean 0.02?"},
		{olc.CPUBusy, 1.5, "outside (0, 1]", "fractions are written 0..1"},
		{olc.CPUBusy, 5000, "outside (0, 1]", "fractions are written 0..1"},
		{olc.CPUBusy, 1, "", ""},
		{olc.Load1PerCore, 80, "", ""},
		{olc.ListenOverflowsPerS, 950, "", ""},
		{olc.Load1, -1, "must be positive", ""},
		{olc.Load1, math.Inf(1), "not a finite number", ""},
	}
	for _, tt := range tests {
		msg, hint := thresholdCheck(tt.sig, tt.x)
		if (tt.msg == "") != (msg == "") || !strings.Contains(msg, tt.msg) || !strings.Contains(hint, tt.hint) {
			t.Errorf("%s %v: %q (%q), want %q (%q)", tt.sig, tt.x, msg, hint, tt.msg, tt.hint)
		}
	}
}

func TestPatch(t *testing.T) {
	base, _, err := Load("testdata/valid-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		base  *Config
		patch string
		check func(t *testing.T, c *Config)
		fail  string // substring of the rendered problems
	}{
		{"one threshold (YAML)", base, "signals: {cpu_busy: {threshold: 0.7}}", func(t *testing.T, c *Config) {
			if c.Thresholds[olc.CPUBusy] != 0.7 || c.Thresholds[olc.PSICPUSome] != 0.4 {
				t.Errorf("thresholds %v", c.Thresholds)
			}
			if c.Mode != olc.ModeEnforce || len(c.Ports) != 4 {
				t.Error("the rest of the config changed")
			}
		}, ""},
		{"one threshold (JSON)", base, `{"signals": {"listen_overflows_per_s": {"threshold": 12}}}`, func(t *testing.T, c *Config) {
			if c.Thresholds[olc.ListenOverflowsPerS] != 12 || c.Thresholds[olc.CPUBusy] != 0.8 {
				t.Errorf("thresholds %v", c.Thresholds)
			}
		}, ""},
		{"new signal on the default list", Default(), "signals: {psi_io_some: {threshold: 0.3}}", func(t *testing.T, c *Config) {
			want := DefaultThresholds()
			want[olc.PSIIOSome] = 0.3
			if c.Thresholds != want {
				t.Errorf("thresholds %v, want the defaults plus psi_io_some", c.Thresholds)
			}
		}, ""},
		{"null puts back the file's signal", base, "signals: {psi_cpu_some: null}", func(t *testing.T, c *Config) {
			if c.Thresholds[olc.PSICPUSome] != 0.4 || c.Thresholds[olc.CPUBusy] != 0.8 {
				t.Errorf("thresholds %v", c.Thresholds)
			}
		}, ""},
		{"null puts back the file's value", base, "interval: null", func(t *testing.T, c *Config) {
			if c.Interval != 250*time.Millisecond {
				t.Errorf("interval %v, want the file's 250ms", c.Interval)
			}
		}, ""},
		{"null restores a default the file does not set", Default(), "interval: null", func(t *testing.T, c *Config) {
			if c.Interval != DefaultInterval {
				t.Errorf("interval %v", c.Interval)
			}
		}, ""},
		// A mistake inside a new key's subtree names the patch, not the
		// base: the merge copies that subtree.
		{"unknown signal names the patch", Default(), "signals:\n  cpu_bsy:\n    threshold: 0.5\n", nil,
			`patch:3: signals.cpu_bsy: unknown signal "cpu_bsy" (did you mean "cpu_busy"?)`},
		{"bad value in a new subtree names the patch", base, "exceptions:\n  sources: [10.0.0.0/33]\n", nil, "patch:2: exceptions.sources[0]"},
		{"mode", base, "mode: observe", func(t *testing.T, c *Config) {
			if c.Mode != olc.ModeObserve {
				t.Errorf("mode %v", c.Mode)
			}
		}, ""},
		{"list replaces", base, "ports: [{port: 9000, proto: udp}]", func(t *testing.T, c *Config) {
			if len(c.Ports) != 1 || c.Ports[0].Key != (olc.PortKey{Proto: olc.ProtoUDP, Port: 9000}) {
				t.Errorf("ports %v", c.Ports)
			}
		}, ""},
		{"per-mille threshold", base, "signals:\n  cpu_busy:\n    threshold: 950\n", nil, "patch:3: signals.cpu_busy.threshold: threshold 950 is outside (0, 1]"},
		{"unknown key", base, "controler: {ki: 1}", nil, `patch:1: controler: unknown key (did you mean "controller"?)`},
		// A key that looks right but holds an em space or a zero-width space
		// is shown quoted, with the key it looks like.
		{"an invisible character in a key", base, "\u2003interval: 1s", nil, `patch:1: "\u2003interval": unknown key: it holds an invisible or unusual white-space character (did you mean "interval"?)`},
		{"a zero-width space in a nested key", base, "controller: {\u200bki: 1}", nil, `patch:1: controller."\u200bki": unknown key: it holds an invisible or unusual white-space character (did you mean "ki"?)`},
		// A port's keys in declaration order: dpconfig.PortPolicy's
		// (inlined), then rules.Port's own.
		{"unknown port key lists the keys", base, "ports: [{port: 9000, xyz: 1}]", nil,
			"patch:1: ports[0].xyz: unknown key (known keys: port, proto, class, mode, action, request_gate, fair, fair_prefix4, fair_prefix6, response_target, caps)"},
		// A conflict names both places, each with its own file: "line 29"
		// alone read as line 29 of the patch.
		{"conflict with the file", base, "exceptions: {ports: [{port: 443, proto: tcp}]}", nil, "patch:1: exceptions.ports[0]: tcp/443 is both protected (ports[0], testdata/valid-full.yaml:41)"},
		{"patch protects a port the file exempts", base, "ports: [{port: 22}]", nil, "testdata/valid-full.yaml:47: exceptions.ports[0]: tcp/22 is both protected (ports[0], patch:1) and exempt"},
		{"null puts back the file's port list", base, "ports: null", func(t *testing.T, c *Config) {
			if c.PortsAuto || len(c.Ports) != 4 {
				t.Errorf("ports auto %v, %v; want the file's four", c.PortsAuto, c.Ports)
			}
		}, ""},
		{"merge key in a patch", base, "signals: {cpu_busy: &t {threshold: 0.6}, psi_cpu_some: {<<: *t}}", func(t *testing.T, c *Config) {
			if c.Thresholds[olc.CPUBusy] != 0.6 || c.Thresholds[olc.PSICPUSome] != 0.6 || c.Thresholds[olc.Load1PerCore] != 3 {
				t.Errorf("thresholds %v", c.Thresholds)
			}
		}, ""},
		// A merge key in a patch merges onto the file like the keys it
		// stands for: the merged ki replaces the file's.
		{"merge key replaces a base key", base, "controller: {<<: {ki: 0.3}}", func(t *testing.T, c *Config) {
			if c.Controller.Ki != 0.3 || c.Controller.Kp != 0.2 {
				t.Errorf("ki %v kp %v, want 0.3 (patched) and 0.2 (the file's)", c.Controller.Ki, c.Controller.Kp)
			}
		}, ""},
		// An alias inside its own anchor made merge recurse until the stack
		// overflowed: a fatal error that took the daemon down.
		{"alias cycle", base, "signals: &s {cpu_busy: {threshold: 0.7}, psi_cpu_some: *s}", nil, "patch:1: alias *s refers to a node that contains it"},
		{"alias cycle in a new key", base, "exceptions: &e {ports: *e}", nil, "patch:1: alias *e refers to a node that contains it"},
		{"syntax", base, "signals: {cpu_busy: {threshold: 0.7}", nil, "patch:1: yaml syntax"},
		// A merge keeps a duplicate's first value: refused as in a file,
		// or `mode: observe\nmode: off` would keep shedding.
		{"duplicate key", base, "mode: observe\nmode: off\n", nil, "patch:2: mode: duplicate key (first at line 1)"},
		{"duplicate key (JSON)", base, `{"mode": "off", "mode": "enforce"}`, nil, "patch:1: mode: duplicate key (first at line 1)"},
		{"duplicate section", base, "controller: {ki: 0.2}\ncontroller: {kp: 0.3}\n", nil, "patch:2: controller: duplicate key (first at line 1)"},
		{"duplicate nested key", base, "mode: off\ncontroller:\n  ki: 0.25\n  ki: 0.3\n", nil, "patch:4: controller.ki: duplicate key (first at line 3)"},
		{"duplicate key in a list's item", base, "ports: [{port: 9000, port: 9001}]", nil, "patch:1: ports[0].port: duplicate key (first at line 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := tt.base.Patch([]byte(tt.patch), "")
			if tt.fail != "" {
				if err == nil || !strings.Contains(err.Error(), tt.fail) {
					t.Fatalf("error %v, want %q", err, tt.fail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Source != tt.base.Source {
				t.Errorf("source %q", c.Source)
			}
			tt.check(t, c)
		})
	}
	// Patches stack, and never modify the config they start from.
	c1, _, err := base.Patch([]byte("signals: {cpu_busy: {threshold: 0.7}}"), "")
	if err != nil {
		t.Fatal(err)
	}
	c2, _, err := c1.Patch([]byte("mode: off"), "")
	if err != nil {
		t.Fatal(err)
	}
	if c2.Thresholds[olc.CPUBusy] != 0.7 || c2.Mode != olc.ModeOff || base.Thresholds[olc.CPUBusy] != 0.8 || c1.Mode != olc.ModeEnforce {
		t.Error("patches do not stack or modified their base")
	}
}

func TestControllerConfig(t *testing.T) {
	c, _, err := Load("testdata/valid-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ac := c.ControllerConfig(nil)
	if ac.Interval != 250*time.Millisecond || ac.Thresholds != c.Thresholds || ac.Params != c.Controller || len(ac.Ports) != 4 ||
		ac.Ports[0] != (adaptive.PortConfig{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 443}, Class: olc.ClassCritical, Target: c.ResponseTarget}) {
		t.Errorf("controller config %+v", ac)
	}
	if _, err := adaptive.New(ac); err != nil {
		t.Errorf("controller rejects a validated config: %v", err)
	}
	auto := Default()
	if auto.PortConfigs() != nil || len(auto.ControllerConfig([]adaptive.PortConfig{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 22}}}).Ports) != 1 {
		t.Error("ports: auto must take the resolved list")
	}
	if !c.ExemptPort(olc.PortKey{Proto: olc.ProtoTCP, Port: 22}) || c.ExemptPort(olc.PortKey{Proto: olc.ProtoUDP, Port: 22}) {
		t.Error("ExemptPort")
	}
}

func TestParseModeAction(t *testing.T) {
	for _, s := range []string{"off", "observe", "enforce"} {
		if m, err := olc.ParseMode(s); err != nil || m.String() != s {
			t.Errorf("%s: %v %v", s, m, err)
		}
	}
	if _, err := olc.ParseMode("on"); err == nil || !strings.Contains(err.Error(), "want off, observe or enforce") {
		t.Errorf("ParseMode(on) = %v", err)
	}
	if a, err := olc.ParseAction("mark"); err != nil || a != olc.ActionMark {
		t.Error("mark")
	}
	if a, err := olc.ParseAction("reject"); err != nil || a != olc.ActionReject {
		t.Error("reject")
	}
	if _, err := olc.ParseAction("refuse"); err == nil {
		t.Error("refuse accepted")
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, _, err := Load("testdata/does-not-exist.yaml")
	var ve *ValidationError
	if err == nil || errors.As(err, &ve) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v: want a wrapped not-exist error", err)
	}
}

// TestDocsExamples parses every ```yaml block of docs/config.md: the
// documented examples must be valid configs.
func TestDocsExamples(t *testing.T) {
	data, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(data), "```yaml\n")
	if len(blocks) < 3 {
		t.Fatalf("%d yaml blocks in docs/config.md, want the minimal and the complete example", len(blocks)-1)
	}
	for i, b := range blocks[1:] {
		doc, _, ok := strings.Cut(b, "```")
		if !ok {
			t.Fatalf("block %d not closed", i+1)
		}
		if _, _, err := Parse([]byte(doc), "docs/config.md block "+strconv.Itoa(i+1)); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func TestWithModeAndValidate(t *testing.T) {
	c, _, err := Load("testdata/valid-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	off, err := c.WithMode(olc.ModeOff)
	if err != nil || off.Mode != olc.ModeOff || c.Mode != olc.ModeEnforce {
		t.Fatalf("WithMode: %v %v", off, err)
	}
	// A later patch keeps the mode.
	p, _, err := off.Patch([]byte("signals: {cpu_busy: {threshold: 0.6}}"), "")
	if err != nil || p.Mode != olc.ModeOff || p.Thresholds[olc.CPUBusy] != 0.6 {
		t.Fatalf("patch after WithMode: mode %v, %v", p.Mode, err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	bad := *c
	bad.Interval = time.Millisecond
	bad.Thresholds[olc.CPUBusy] = 80
	bad.Ports = append([]Port{}, c.Ports...)
	bad.Ports = append(bad.Ports, c.Ports[0])
	err = bad.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 3 {
		t.Fatalf("Validate = %v, want 3 problems (interval, threshold, duplicate port)", err)
	}
	for _, want := range []string{"interval", "signals.cpu_busy.threshold", "ports[4]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %s", err, want)
		}
	}
}

// TestAnchorsAndMergeKeys: anchors, aliases and merge keys (`<<`) are
// expanded before decoding; keys written in a mapping win over merged ones,
// and the first merged mapping wins over later ones.
func TestAnchorsAndMergeKeys(t *testing.T) {
	c, w, err := Load("testdata/valid-anchors-merge.yaml")
	if err != nil || len(w) != 0 {
		t.Fatalf("%v, warnings %v", err, w)
	}
	want := []Port{
		{PortPolicy: dpconfig.PortPolicy{Key: olc.PortKey{Port: 443, Proto: olc.ProtoTCP}, Class: olc.ClassCritical}},
		{PortPolicy: dpconfig.PortPolicy{Key: olc.PortKey{Port: 80, Proto: olc.ProtoTCP}, Class: olc.ClassCritical}},
		{PortPolicy: dpconfig.PortPolicy{Key: olc.PortKey{Port: 8080, Proto: olc.ProtoTCP}, Class: olc.ClassNormal}},
	}
	if !reflect.DeepEqual(c.Ports, want) {
		t.Errorf("ports %+v, want %+v", c.Ports, want)
	}
	if c.Thresholds[olc.CPUBusy] != 0.8 || c.Thresholds[olc.PSICPUSome] != 0.8 {
		t.Errorf("thresholds %v", c.Thresholds)
	}
	// A later patch merges onto the expanded document.
	p, _, err := c.Patch([]byte("signals: {cpu_busy: {threshold: 0.7}}"), "")
	if err != nil || p.Thresholds[olc.CPUBusy] != 0.7 || p.Thresholds[olc.PSICPUSome] != 0.8 {
		t.Errorf("patch: %v, thresholds %v", err, p.Thresholds)
	}
}

// TestPatchOriginsBounded: a config patched again and again holds its
// current document only. Each patch once copied the origins of every node
// of its base, so a daemon patched every minute grew that map without end.
func TestPatchOriginsBounded(t *testing.T) {
	c, _, err := Load("testdata/valid-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var first int
	for i := range 200 {
		c, _, err = c.Patch([]byte(fmt.Sprintf("signals: {cpu_busy: {threshold: 0.%d}}\nmode: observe\n", 5+i%4)), "patch")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = nodes(c.doc)
		}
	}
	if n := nodes(c.doc); n > first {
		t.Errorf("the document grew from %d to %d nodes over 200 patches", first, n)
	}
	// Problems still name the right file after many patches.
	_, _, err = c.Patch([]byte("exceptions: {ports: [{port: 443}]}"), "patch")
	if err == nil || !strings.Contains(err.Error(), "patch:1: exceptions.ports[0]: tcp/443 is both protected (ports[0], testdata/valid-full.yaml:41)") {
		t.Errorf("error %v", err)
	}
}

// nodes counts the nodes of the document tree at n, each once.
func nodes(n *sy.Node) int {
	seen := map[*sy.Node]bool{}
	var walk func(n *sy.Node)
	walk = func(n *sy.Node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		for i := range n.Vals {
			walk(n.Vals[i])
			if n.Keys != nil {
				walk(n.Keys[i])
			}
		}
	}
	walk(n)
	return len(seen)
}

// TestSyntaxErrorLineInLongFile: the line of a syntax error is found in a
// config far longer than a hand-written one (a generated exception list).
// The linear search gave up beyond 2000 lines and reported go-yaml's line,
// the start of the enclosing block.
func TestSyntaxErrorLineInLongFile(t *testing.T) {
	for _, n := range []int{10, 1999, 5000} {
		var b strings.Builder
		b.WriteString("exceptions:\n  sources:\n")
		for i := range n {
			fmt.Fprintf(&b, "    - 10.%d.%d.0/24\n", i/256%256, i%256)
		}
		b.WriteString("  ports: [{port: 22}\nmode: observe\n")
		_, _, err := Parse([]byte(b.String()), "long.yaml")
		want := fmt.Sprintf("long.yaml:%d: yaml syntax: did not find expected ',' or ']'", n+3)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%d sources: error %v, want %q", n, err, want)
		}
	}
}

// TestValueHints: a value that is nearly right gets the right suggestion.
func TestValueHints(t *testing.T) {
	tests := []struct{ doc, want string }{
		{"mode: true\n", `did you mean "enforce"?`},
		{"mode: yes\n", `did you mean "enforce"?`},
		{"mode: no\n", `did you mean "off"?`},
		{"mode: OFF\n", `did you mean "off"?`},
		{"mode: Observe\n", `did you mean "observe"?`},
		{"mode: enforcing\n", `did you mean "enforce"?`},
		{"ports: [{port: 80, mode: on}]\n", `did you mean "enforce"?`},
		{"ports: [{port: 80, class: Best-Effort}]\n", `did you mean "best-effort"?`},
		{"ports: [{port: \"80\"}]\n", "remove the quotes: write 80"},
		{"controller: {activation_ticks: '5'}\n", "remove the quotes: write 5"},
		{"signals: {cpu_busy: {threshold: '0.8'}}\n", "remove the quotes: write 0.8"},
		{"ports: [web]\n", `ports[0]: must be a port number such as 443, or {port: 443, proto: tcp}, got the string "web"`},
		{"exceptions: {ports: [\"22\"]}\n", `exceptions.ports[0]: must be a port number such as 22, or {port: 22, proto: tcp}, got the string "22" (remove the quotes: write 22)`},
		{"exceptions: {sources: [\"fe80::%eth0/64\"]}\n", `"fe80::%eth0/64" has an interface zone %eth0: exceptions apply on every interface (write fe80::/64)`},
	}
	for _, tt := range tests {
		_, _, err := Parse([]byte(tt.doc), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.doc, err, tt.want)
		}
	}
}

// TestLoadBounded: a path that is not a config (a device that never ends)
// is refused instead of read into memory.
func TestLoadBounded(t *testing.T) {
	_, _, err := Load("/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "not a config file") {
		t.Fatalf("Load(/dev/zero) = %v, want a size refusal", err)
	}
}

// TestLoadRefusesEmptyAndTruncated: a file without any setting (empty,
// white space, comments only) or cut off mid-document is refused with a
// *ValidationError naming the file, never read as the embedded default.
// `{}` still asks for every default.
func TestLoadRefusesEmptyAndTruncated(t *testing.T) {
	good := "mode: enforce\ninterfaces: [eth0]\nports:\n  - {port: 443, proto: tcp}\n  - {port: 80, proto: tcp}\n"
	tests := []struct{ name, doc, want string }{
		{"empty", "", "the file is empty"},
		{"white space", " \n\t\n\n", "the file holds only white space"},
		{"comments only", "# mode: enforce\n# ports: auto\n", "holds no setting"},
		{"empty document", "---\n", "holds no setting"},
		{"cut in a flow list", good[:strings.Index(good, "eth0")+2], "yaml syntax"},
		{"cut in a port entry", good[:len(good)-10], "yaml syntax"},
		{"cut after a key", "mode: enforce\ninterfaces: [eth0]\nport", "yaml syntax"},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tt.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			c, _, err := Load(path)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Load(%q) = %+v, %v; want a *ValidationError", tt.doc, c, err)
			}
			if !strings.Contains(err.Error(), tt.want) || ve.Problems[0].File != path {
				t.Errorf("error %q, want %q naming %s", err, tt.want, path)
			}
		})
	}
	path := filepath.Join(dir, "all-defaults.yaml")
	if err := os.WriteFile(path, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, _, err := Load(path); err != nil || c.Mode != olc.ModeObserve || !c.PortsAuto {
		t.Errorf("{}: %+v, %v; want every default", c, err)
	}
}

// TestLoadNonRegular: a FIFO, a device or a directory in the config's
// place is refused at once, naming what it is; a FIFO without a writer
// used to block the read for ever.
func TestLoadNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "olcd.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink("olcd.yaml", link); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{fifo, "a FIFO (named pipe)"},
		{link, "a FIFO (named pipe)"},
		{"/dev/null", "a character device"},
		{dir, "a directory"},
	}
	for _, tt := range tests {
		done := make(chan error, 1)
		go func() {
			_, _, err := Load(tt.path)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("Load(%s) = %v, want %q naming the path", tt.path, err, tt.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Load(%s) blocked", tt.path)
		}
	}
}

// TestStaleAfterBounded: heartbeat.stale_after is at most MaxStaleAfter,
// above which a dead daemon would keep shedding for minutes or years, and
// longer than the interval, the problem named at the setting written.
func TestStaleAfterBounded(t *testing.T) {
	tests := []struct{ doc, want string }{
		{"heartbeat: {stale_after: 100000h}\n", "x.yaml:1: heartbeat.stale_after: 100000h0m0s is above the maximum 1m0s"},
		{"heartbeat: {stale_after: 61s}\n", "above the maximum 1m0s"},
		{"heartbeat: {stale_after: 60s}\n", ""},
		{"interval: 30s\nheartbeat: {stale_after: 25s}\n", "use an interval of at most 20s"},
		{"interval: 10s\nheartbeat: {stale_after: 50s}\n", ""},
		// stale_after not written: the interval is the setting to blame,
		// and a hint to follow stays within the maximum.
		{"interval: 10s\n", "x.yaml:1: interval: 10s is not shorter than heartbeat.stale_after 5s (the default): the datapath would go stale between two ticks (use an interval below 5s, or set heartbeat.stale_after to at least 3 × interval, e.g. 1m0s)"},
		{"mode: observe\ninterval: 25s\n", "x.yaml:2: interval: 25s is not shorter than heartbeat.stale_after 5s (the default): the datapath would go stale between two ticks (stale_after is at most 1m0s: use an interval of at most 20s)"},
	}
	for _, tt := range tests {
		_, _, err := Parse([]byte(tt.doc), "x.yaml")
		if tt.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.doc, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.doc, err, tt.want)
		}
	}
	c := Default()
	c.StaleAfter = time.Hour
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "above the maximum") {
		t.Errorf("Validate with stale_after 1h: %v", err)
	}
}

// TestTickParameterRange: an integer controller parameter out of range,
// even one beyond int32, names the documented range.
func TestTickParameterRange(t *testing.T) {
	tests := []struct{ doc, want string }{
		{"controller: {activation_ticks: 99999999999}\n", "99999999999 is out of range: must be 1..10"},
		{"controller: {activation_ticks: 99999999999999999999}\n", "must be 1..10"},
		{"controller: {activation_ticks: -1}\n", "-1 is out of range: must be 1..10"},
		{"controller: {activation_ticks: 11}\n", "11 is out of range: must be 1..10"},
		{"controller: {activation_ticks: 3000000000}\n", "must be 1..10 (2 ignores single-tick spikes"},
		{"controller: {activation_ticks: 0}\n", "must be 1..10"},
	}
	for _, tt := range tests {
		_, _, err := Parse([]byte(tt.doc), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "2147483647") {
			t.Errorf("%q: error %v, want %q", tt.doc, err, tt.want)
		}
	}
	c := Default()
	c.Controller.ActivationTicks = 5000
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "must be 1..10") {
		t.Errorf("Validate with activation_ticks 5000: %v", err)
	}
}

// TestManagementPorts: exceptions.management (default SSH) exempts its
// ports under ports: auto and from a port list that does not name them; a
// port list that names one protects it.
func TestManagementPorts(t *testing.T) {
	ssh := olc.PortKey{Proto: olc.ProtoTCP, Port: 22}
	alt := olc.PortKey{Proto: olc.ProtoTCP, Port: 2222}
	web := olc.PortKey{Proto: olc.ProtoTCP, Port: 443}
	tests := []struct {
		name, doc string
		exempt    []olc.PortKey
		reason22  string
	}{
		{"default, auto", "mode: enforce\n", []olc.PortKey{ssh}, "exceptions.management"},
		{"list without 22", "ports: [{port: 443}]\n", []olc.PortKey{ssh}, "exceptions.management"},
		{"list naming 22", "ports: [{port: 443}, {port: 22}]\n", []olc.PortKey{}, ""},
		{"management off", "exceptions: {management: []}\n", []olc.PortKey{}, ""},
		{"own list", "exceptions: {management: [22, {port: 2222, proto: tcp}]}\nports: [{port: 443}]\n", []olc.PortKey{ssh, alt}, "exceptions.management"},
		{"also an exception port", "exceptions: {ports: [{port: 22}]}\n", []olc.PortKey{ssh}, "exceptions.ports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := Parse([]byte(tt.doc), "x.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ExemptPorts(); !reflect.DeepEqual(nonNilKeys(got), tt.exempt) {
				t.Errorf("ExemptPorts = %v, want %v", got, tt.exempt)
			}
			if got := c.ExemptReason(ssh); got != tt.reason22 {
				t.Errorf("ExemptReason(tcp/22) = %q, want %q", got, tt.reason22)
			}
			if c.ExemptPort(web) {
				t.Error("tcp/443 exempt")
			}
		})
	}
	bad := []struct{ doc, want string }{
		{"exceptions: {management: [ssh]}\n", `x.yaml:1: exceptions.management[0]: must be a port number such as 22, or {port: 22, proto: tcp}, got the string "ssh"`},
		{"exceptions: {management: [22, 22]}\n", "exceptions.management[1]: tcp/22 is listed twice (also exceptions.management[0])"},
		{"exceptions: {management: [70000]}\n", "port 70000 is out of range"},
		{"exceptions: {management: 22}\n", "exceptions.management: must be a list"},
		{"exceptions: {management: [{proto: tcp}]}\n", "exceptions.management[0].port: missing"},
	}
	for _, tt := range bad {
		if _, _, err := Parse([]byte(tt.doc), "x.yaml"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.doc, err, tt.want)
		}
	}
}

func nonNilKeys(k []olc.PortKey) []olc.PortKey {
	if k == nil {
		return []olc.PortKey{}
	}
	return k
}

// TestPortAction: a port's own action overrides action.kind; reject on a
// UDP port loads with a warning that it drops; the rate limit decodes.
func TestPortAction(t *testing.T) {
	doc := `
action: {kind: drop, reject_rate: 500, reject_burst: 50}
ports:
  - {port: 80, action: reject}
  - {port: 443}
  - {port: 53, proto: udp, action: reject}
`
	c, warns, err := Parse([]byte(doc), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []olc.Action{olc.ActionReject, olc.ActionDrop, olc.ActionReject}
	for i, p := range c.Ports {
		if got := p.EffectiveAction(c.Action.Kind); got != want[i] {
			t.Errorf("port %d: action %s, want %s", p.Key.Port, got, want[i])
		}
	}
	if c.Action.RejectRate != 500 || c.Action.RejectBurst != 50 {
		t.Errorf("reject limit %d/%d, want 500/50", c.Action.RejectRate, c.Action.RejectBurst)
	}
	if len(warns) != 1 || warns[0].Field != "ports[2].action" || !strings.Contains(warns[0].Msg, "reject drops it") {
		t.Errorf("warnings %v, want one for the UDP port", warns)
	}
	if r := Default().Action.RejectRate; r != olc.DefaultRejectRate {
		t.Errorf("default reject rate %d", r)
	}
}

// TestBillionLaughs: a document whose aliases expand to a billion nodes,
// through lists or through mappings (which merge and PatchPaths walk), is
// refused at the alias that crosses the bound, as a file, as a patch and by
// PatchPaths, before anything expands it.
func TestBillionLaughs(t *testing.T) {
	for _, shape := range []string{"[%s]", "{%s}"} {
		var b strings.Builder
		b.WriteString("l0: &l0 {threshold: 0.5}\n")
		for i := 1; i <= 9; i++ {
			items := make([]string, 10)
			for j := range items {
				items[j] = fmt.Sprintf("*l%d", i-1)
				if shape == "{%s}" {
					items[j] = fmt.Sprintf("k%d: *l%d", j, i-1)
				}
			}
			fmt.Fprintf(&b, "l%d: &l%d "+shape+"\n", i, i, strings.Join(items, ", "))
		}
		doc := b.String()
		// 10^5 nodes are reached in l5's list, the sixth line.
		const want = ":6: aliases expand to more than 100000 nodes"
		_, _, err := Parse([]byte(doc), "laughs.yaml")
		if err == nil || !strings.Contains(err.Error(), "laughs.yaml"+want) {
			t.Errorf("%s: Parse error %v, want %q", shape, err, want)
		}
		_, _, err = Default().Patch([]byte(doc), "")
		if err == nil || !strings.Contains(err.Error(), "patch"+want) {
			t.Errorf("%s: Patch error %v, want %q", shape, err, want)
		}
		if _, err := PatchPaths([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: PatchPaths error %v, want %q", shape, err, want)
		}
	}
}

// TestRetiredControllerKeys checks that a retired key is no longer a key
// and has a hint (testdata/invalid-retired-key.yaml checks that a config
// naming one is refused with it, at its line).
func TestRetiredControllerKeys(t *testing.T) {
	keys := map[string]bool{}
	pt := reflect.TypeFor[adaptive.Params]()
	for i := range pt.NumField() {
		keys[strings.Split(pt.Field(i).Tag.Get("yaml"), ",")[0]] = true
	}
	for k, hint := range retiredControllerKeys {
		if keys[k] {
			t.Errorf("retired key %s is still a key", k)
		}
		if hint == "" {
			t.Errorf("retired key %s has no hint", k)
		}
	}
}

// TestDigest: a config's digest names what it sets: comments, key order,
// flow or block style and its path leave it; any value changes it, deep
// ones too (a source cap's rate, a port's fair prefix).
func TestDigest(t *testing.T) {
	const doc = "mode: enforce\ninterval: 400ms\nports:\n  - {port: 443, caps: {rate: 5, sources: [{prefix: 198.51.100.0/24, rate: 50}]}}\n"
	parse := func(s, path string) string {
		t.Helper()
		c, _, err := Parse([]byte(s), path)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return c.Digest()
	}
	base := parse(doc, "/etc/olcd/olcd.yaml")
	if len(base) != 16 {
		t.Fatalf("digest %q, want 16 hex digits", base)
	}
	for name, s := range map[string]string{
		"a comment":             "# managed\n" + doc + "# end\n",
		"key order":             "interval: 400ms\nmode: enforce\nports:\n  - {port: 443, caps: {rate: 5, sources: [{prefix: 198.51.100.0/24, rate: 50}]}}\n",
		"block style":           "mode: enforce\ninterval: 400ms\nports:\n  - port: 443\n    caps:\n      rate: 5\n      sources:\n        - prefix: 198.51.100.0/24\n          rate: 50\n",
		"a default written out": doc + "heartbeat: {stale_after: 5s}\n",
	} {
		if got := parse(s, "/etc/olcd/olcd.yaml"); got != base {
			t.Errorf("%s: digest %s, want %s", name, got, base)
		}
	}
	if got := parse(doc, "/srv/olcd.yaml"); got != base {
		t.Errorf("another path: digest %s, want %s", got, base)
	}
	for name, s := range map[string]string{
		"the mode":          strings.Replace(doc, "enforce", "observe", 1),
		"a source cap rate": strings.Replace(doc, "rate: 50", "rate: 60", 1),
		"a fair prefix":     strings.Replace(doc, "{port: 443,", "{port: 443, fair: true, fair_prefix4: 24,", 1),
	} {
		if got := parse(s, "/etc/olcd/olcd.yaml"); got == base {
			t.Errorf("%s changed: the same digest %s", name, got)
		}
	}
}

// TestManagementEmptyWarns: `management: []` in the file exempts no port:
// loaded, with a warning that SSH can be shed; the default, `management:`
// with no value (which is the default, [22]) and a list holding a port say
// nothing of SSH.
func TestManagementEmptyWarns(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		warn bool
	}{
		{"exceptions: {management: }\n", false}, // no value: the default, [22]
		{"exceptions:\n  management: []\n", true},
		{"exceptions: {management: [2222]}\n", false},
		{"mode: observe\n", false},
	} {
		c, warns, err := Parse([]byte(tt.doc), "t.yaml")
		if err != nil {
			t.Fatalf("%q: %v", tt.doc, err)
		}
		got := slices.ContainsFunc(warns, func(w Warning) bool {
			return w.Field == "exceptions.management" && strings.Contains(w.Msg, "SSH can be shed")
		})
		if got != tt.warn {
			t.Errorf("%q: management %v, warnings %v; want the SSH warning %v", tt.doc, c.Exceptions.Management, warns, tt.warn)
		}
	}
}
