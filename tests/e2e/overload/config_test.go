package overload

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/rules"
)

// leaves flattens a YAML document to its leaf values by dotted path (a
// list's items as path[i]).
func leaves(t *testing.T, src []byte) map[string]string {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			walk(n.Content[0], path)
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], strings.TrimPrefix(path+"."+n.Content[i].Value, "."))
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		default:
			out[path] = n.Value
		}
	}
	walk(&doc, "")
	return out
}

// TestRenderConfig: each recommended config, rendered for a run, is that
// file with only the run's keys set: it validates, every leaf of the file
// outside the keys the head names is kept, the head names each key whose
// value the run changed, and without a variant's signals the guards are
// the default ones.
func TestRenderConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  olcdConfigData
		set  []string // the head's keys, in order
		want map[string]string
	}{
		{"bare metal, enforce", olcdConfigData{Base: ConfigBareMetal, Mode: "enforce", Iface: "olov1h", Interval: 500 * time.Millisecond,
			Controller: []string{"min_pass_rate: 0.05"}, Port: WorkPort, HealthPort: HealthPort, Socket: "/tmp/s", DecisionLog: "/tmp/d"},
			[]string{"mode", "interfaces", "controller.min_pass_rate", "ports", "exceptions.ports", "metrics.address", "admin.socket", "decision_log"},
			map[string]string{"mode": "enforce", "interfaces[0]": "olov1h", "ports[0].port": "18080", "exceptions.ports[1].port": "18081", "metrics.address": ""}},
		{"bare metal, a comparison's signals and reject", olcdConfigData{Base: ConfigBareMetal, Mode: "enforce", Iface: "olov1h", Interval: time.Second,
			Signals: []string{"cgroup_cpu_usage_of_quota: {threshold: 0.900}"}, Cgroup: "olov-1", Action: "reject", Selection: "random",
			Port: WorkPort, HealthPort: HealthPort, Socket: "/tmp/s", DecisionLog: "/tmp/d", RequestGate: true},
			[]string{"mode", "interfaces", "interval", "signals", "cgroup", "ports", "exceptions.ports", "action.kind", "metrics.address", "admin.socket", "decision_log", "datapath.selection"},
			map[string]string{"signals.cgroup_cpu_usage_of_quota.threshold": "0.900", "cgroup": "olov-1", "ports[0].request_gate": "true", "interval": "1s"}},
		{"HAProxy, agent", olcdConfigData{Base: ConfigHAProxy, Mode: "enforce", Iface: "olov1c", Port: WorkPort, HealthPort: HealthPort,
			Metrics: "198.51.100.2:9477", Socket: "/tmp/s", DecisionLog: "/tmp/d", Agent: "198.51.100.2:9478"},
			[]string{"mode", "interfaces", "ports", "exceptions.ports", "metrics.address", "admin.socket", "decision_log", "lb.agent.address"},
			map[string]string{"lb.agent.address": "198.51.100.2:9478", "exceptions.ports[0].port": "8081", "exceptions.ports[1].port": "18081"}},
		{"HAProxy, no agent", olcdConfigData{Base: ConfigHAProxy, Mode: "enforce", Iface: "olov1c", Port: WorkPort, HealthPort: HealthPort,
			Socket: "/tmp/s", DecisionLog: "/tmp/d"},
			[]string{"mode", "interfaces", "ports", "exceptions.ports", "metrics.address", "admin.socket", "decision_log", "lb.agent.address"},
			map[string]string{"lb.agent.address": ""}},
		{"Kubernetes, enforce as shipped", olcdConfigData{Base: ConfigKubernetes, Mode: "enforce", Iface: "olov1h", Port: WorkPort, HealthPort: HealthPort,
			Socket: "/tmp/s", DecisionLog: "/tmp/d"},
			[]string{"interfaces", "ports", "exceptions.ports", "metrics.address", "admin.socket", "decision_log"},
			map[string]string{"mode": "enforce", "heartbeat.stale_after": "5s", "exceptions.ports[4].port": "18081"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderConfig(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			head, _, _ := strings.Cut(string(out), "\n")
			if want := "# written by  from " + tc.cfg.Base + "; the run sets " + strings.Join(tc.set, ", "); head != want {
				t.Errorf("head\n%s\nwant\n%s", head, want)
			}
			cfg, _, err := rules.Parse(out, tc.name)
			if err != nil {
				t.Fatalf("does not validate: %v\n%s", err, out)
			}
			if tc.cfg.Signals == nil && cfg.Thresholds != rules.DefaultThresholds() {
				t.Errorf("guards %v, want the default %v", cfg.Thresholds, rules.DefaultThresholds())
			}
			src, err := recommended(tc.cfg.Base)
			if err != nil {
				t.Fatal(err)
			}
			got := leaves(t, out)
			for path, v := range leaves(t, src) {
				if slices.ContainsFunc(tc.set, func(s string) bool {
					return path == s || strings.HasPrefix(path, s+".") || strings.HasPrefix(path, s+"[")
				}) {
					continue
				}
				if got[path] != v {
					t.Errorf("%s: %q, want the file's %q (not a key the run sets)", path, got[path], v)
				}
			}
			for path, v := range tc.want {
				if got[path] != v {
					t.Errorf("%s = %q, want %q\n%s", path, got[path], v, out)
				}
			}
		})
	}
}

// TestRenderConfigErrors: a file that is not there, or a controller
// setting that is not key: value, is an error naming it.
func TestRenderConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  olcdConfigData
		want string
	}{
		{olcdConfigData{Base: "deploy/examples/none.yaml"}, "none.yaml"},
		{olcdConfigData{Base: ConfigBareMetal, Controller: []string{"min_pass_rate 0.05"}}, `controller setting "min_pass_rate 0.05"`},
		{olcdConfigData{}, "no recommended config"},
	} {
		if _, err := renderConfig(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}
