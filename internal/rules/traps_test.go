package rules

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader/dpconfig"
	"github.com/olcd/olcd/internal/olc"
)

// TestTraps holds the config traps of issue 28 closed: each document was
// refused or misread before. want is the decoded value (got from the
// config by get) or, with a prefix "error: ", a substring of the error.
func TestTraps(t *testing.T) {
	tcp := func(p uint16) olc.PortKey { return olc.PortKey{Proto: olc.ProtoTCP, Port: p} }
	tests := []struct {
		name, doc string
		get       func(c *Config) any
		want      any
	}{
		// One shape for every port list: a bare number is {port: N, proto: tcp}
		// (exceptions.ports and ports refused it while management took it).
		{"exceptions.ports bare", "exceptions: {ports: [8081, {port: 53, proto: udp}]}\n",
			func(c *Config) any { return c.Exceptions.Ports }, []olc.PortKey{tcp(8081), {Proto: olc.ProtoUDP, Port: 53}}},
		{"ports bare", "ports: [443, {port: 8080, class: best-effort}]\n",
			func(c *Config) any { return c.Ports }, []Port{{PortPolicy: dpconfig.PortPolicy{Key: olc.PortKey{Port: 443, Proto: olc.ProtoTCP}, Class: olc.ClassNormal}},
				{PortPolicy: dpconfig.PortPolicy{Key: olc.PortKey{Port: 8080, Proto: olc.ProtoTCP}, Class: olc.ClassBestEffort}}}},
		{"management bare", "exceptions: {management: [22, 2222]}\n",
			func(c *Config) any { return c.Exceptions.Management }, []olc.PortKey{tcp(22), tcp(2222)}},
		{"bare port out of range", "ports: [70000]\n", nil, "error: ports[0]: port 70000 is out of range: must be 1..65535"},
		// 0 where 0 means off ("duration 0 has no unit" before).
		{"onset_interval 0", "controller: {onset_interval: 0}\n",
			func(c *Config) any { return c.Controller.OnsetInterval }, time.Duration(0)},
		{"send_wait 0", "lb: {agent: {send_wait: 0}}\n", func(c *Config) any { return c.LB.Agent.SendWait }, time.Duration(0)},
		{"reject_burst 0", "action: {reject_burst: 0}\n", func(c *Config) any { return c.Action.RejectBurst }, 0},
		{"interval 0 is out of range, not unitless", "interval: 0\n", nil, "error: interval: 0s is below the minimum 100ms"},
		{"a bare 5 still has no unit", "interval: 5\n", nil, "error: interval: duration 5 has no unit"},
		// A bare number as a response-time threshold is seconds: 50 is
		// refused with the hint (it was accepted as 50 s).
		{"threshold 50", "signals: {response_time_p95: {threshold: 50}}\n", nil,
			"error: signals.response_time_p95.threshold: threshold 50 s is above 30 s: a bare number is seconds (did you mean 50ms?)"},
		{"threshold 50ms", "signals: {response_time_p95: {threshold: 50ms}}\n",
			func(c *Config) any { return c.Thresholds[olc.ResponseTimeP95] }, 0.05},
		{"threshold 0.05 s", "signals: {response_time_p95: {threshold: 0.05}}\n",
			func(c *Config) any { return c.Thresholds[olc.ResponseTimeP95] }, 0.05},
		// A signal is removed with off, in a file or a patch.
		{"signal off", "signals: {cpu_busy: {threshold: 0.8}, psi_cpu_some: off, psi_memory_full: off, accept_queue_fill: off}\n",
			func(c *Config) any { return c.Thresholds }, func() Thresholds { var t Thresholds; t[olc.CPUBusy] = 0.8; return t }()},
		{"target 0 is no target", "ports: [{port: 80, response_target: off}]\n",
			func(c *Config) any { return c.Ports[0].Target }, adaptive.ResponseTarget{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := Parse([]byte(tt.doc), "x.yaml")
			if want, ok := tt.want.(string); ok && strings.HasPrefix(want, "error: ") {
				if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(want, "error: ")) {
					t.Fatalf("error %v, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.get(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
	// A patch's signals change the running list; off removes one.
	p, _, err := Default().Patch([]byte("signals: {cpu_busy: {threshold: 0.7}, psi_memory_full: off}"), "")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultThresholds()
	want[olc.CPUBusy], want[olc.PSIMemoryFull] = 0.7, 0
	if p.Thresholds != want {
		t.Errorf("patched thresholds %v, want %v", p.Thresholds, want)
	}
}

// TestSettings: `olcd config show` lists every key with its value and
// origin: the default, the file's line, or a live override's (issue 28:
// no command printed the effective config).
func TestSettings(t *testing.T) {
	c, _, err := Parse([]byte("mode: enforce\nports: [443]\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, _, err = c.Patch([]byte("controller: {ki: 0.3}\nsignals: {cpu_busy: {threshold: 0.8}}"), "live patch")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Setting{}
	for _, s := range c.Settings() {
		got[s.Key] = s
	}
	for _, want := range []Setting{
		{"mode", "enforce", "x.yaml:1"},
		{"ports", "[tcp/443 class normal]", "x.yaml:2"},
		{"controller.ki", "0.3", "live patch:1"},
		{"controller.kp", "0.1", "default"},
		{"controller.response_target", "auto", "default"},
		{"signals.cpu_busy.threshold", "0.8", "live patch:2"},
		{"signals.psi_memory_full.threshold", "0.1", "default"},
		{"action.dscp", "unset", "default"},
		{"exceptions.management", "[tcp/22]", "default"},
		{"metrics.address", "127.0.0.1:9477", "default"},
		{"lb.agent.address", `""`, "default"},
		{"datapath.flow_table_size", "16384", "default"},
	} {
		if got[want.Key] != want {
			t.Errorf("%s: %+v, want %+v", want.Key, got[want.Key], want)
		}
	}
	if n := len(Default().Settings()); n < 45 {
		t.Errorf("%d settings, want every key", n)
	}
}
