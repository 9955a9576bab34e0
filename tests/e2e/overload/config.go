package overload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The recommended configs (README, "Configure"; docs/config.md, "The
// recommended configs in the suite"): every olcd a harness starts runs one
// of them, with only what the run must set substituted (olcdConfigData).
// Paths are relative to the repository.
const (
	// ConfigBareMetal is the single-node harness's (Options.Config's
	// default): a server that clients reach directly.
	ConfigBareMetal = "deploy/examples/bare-metal.yaml"
	// ConfigHAProxy is the load-balancer test's nodes'.
	ConfigHAProxy = "deploy/examples/haproxy.yaml"
	// ConfigKubernetes is the enforce ConfigMap: its data key olcd.yaml
	// is the config.
	ConfigKubernetes = "deploy/kubernetes/configmap-enforce.yaml"
)

// defaultInterval is olcd's tick when the config does not set one
// (deploy/olcd.yaml): a run whose Options.OlcdInterval is this writes no
// interval.
const defaultInterval = 500 * time.Millisecond

// olcdConfigData is what a run sets in the recommended config it starts
// from. The zero value of a field leaves the file's setting, except where
// said.
type olcdConfigData struct {
	// By names the harness that wrote the file, on its first line.
	By string
	// Base is the recommended config, relative to the repository
	// (ConfigBareMetal, ConfigHAProxy, ConfigKubernetes).
	Base string
	// Mode is the global mode ("observe", "enforce").
	Mode string
	// Iface is the one interface olcd attaches to: the run's veth, in
	// place of the file's interfaces (always written).
	Iface string
	// Interval is olcd's tick (0 or 500ms: the file's).
	Interval time.Duration
	// Signals are the signals section's lines, "name: {threshold: x}"
	// each (nil: the file's, the default guards; a comparison variant
	// sets its own).
	Signals []string
	// Controller are controller keys, "key: value" each, set over the
	// file's.
	Controller []string
	// Cgroup is the backend's cgroup, written only when a cgroup_*
	// signal is among Signals (no default guard reads one).
	Cgroup string
	// Port is the protected port, in place of the file's ports (always
	// written); HealthPort the health check's port, added to the file's
	// exceptions.ports.
	Port, HealthPort int
	// RequestGate and Fair are the work port's request_gate and fair.
	RequestGate, Fair bool
	// Action is action.kind ("": the file's).
	Action string
	// Metrics is metrics.address ("": off; always written, so that no
	// run listens on the node's 9477).
	Metrics string
	// Socket is admin.socket, DecisionLog decision_log (always written;
	// launchOlcd sets both in the run's directory).
	Socket, DecisionLog string
	// Selection is datapath.selection ("": the file's).
	Selection string
	// Agent is lb.agent.address: the node's address for a file with an
	// lb agent; "" turns a file's agent off (a variant without it).
	Agent string
	// PinDir is olcd's --pin-dir ("": unpinned); not in the file.
	PinDir string
}

// repoRoot finds the repository from the working directory: the nearest
// directory above it with olcd's go.mod (tests run in their package's
// directory, make demo at the root).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		f, err := os.Open(filepath.Join(d, "go.mod"))
		if err == nil {
			line, _ := bufio.NewReader(f).ReadString('\n')
			f.Close()
			if strings.TrimSpace(line) == "module github.com/olcd/olcd" {
				return d, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no olcd repository (go.mod of github.com/olcd/olcd) at or above %s: the harness reads the recommended configs from it", dir)
		}
	}
}

// recommended returns the olcd config of a recommended file: the file
// itself, or a ConfigMap's data key olcd.yaml.
func recommended(base string) ([]byte, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, base)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var probe struct {
		Kind string            `yaml:"kind"`
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if probe.Kind != "ConfigMap" {
		return b, nil
	}
	doc, ok := probe.Data["olcd.yaml"]
	if !ok {
		return nil, fmt.Errorf("%s: a ConfigMap without the data key olcd.yaml", path)
	}
	return []byte(doc), nil
}

// renderConfig writes the run's config: cfg.Base with cfg's settings in
// place of the file's. Its head names the file and every key the run set
// whose value differs from the file's.
func renderConfig(cfg olcdConfigData) ([]byte, error) {
	if cfg.Base == "" {
		return nil, errors.New("olcd config: no recommended config to start from")
	}
	src, err := recommended(cfg.Base)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Base, err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: not a mapping of settings", cfg.Base)
	}
	e := &editor{root: doc.Content[0]}
	if cfg.Mode != "" {
		e.set("mode", cfg.Mode)
	}
	e.set("interfaces", []string{cfg.Iface})
	if cfg.Interval != 0 && cfg.Interval != defaultInterval {
		e.set("interval", cfg.Interval.String())
	}
	if cfg.Signals != nil {
		lines := strings.Join(cfg.Signals, "\n")
		if len(cfg.Signals) == 0 {
			lines = "{}" // no signal: the port's law alone
		}
		e.setYAML("signals", lines)
		for _, s := range cfg.Signals {
			if strings.HasPrefix(strings.TrimSpace(s), "cgroup_") {
				e.set("cgroup", cfg.Cgroup)
				break
			}
		}
	}
	for _, kv := range cfg.Controller {
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			return nil, fmt.Errorf("olcd config: controller setting %q: want key: value", kv)
		}
		e.setYAML("controller."+strings.TrimSpace(k), strings.TrimSpace(v))
	}
	e.set("ports", []any{workPortEntry(cfg.Port, cfg.RequestGate, cfg.Fair)})
	if cfg.HealthPort != 0 {
		e.add("exceptions.ports", map[string]any{"port": cfg.HealthPort, "proto": "tcp"})
	}
	if cfg.Action != "" {
		e.set("action.kind", cfg.Action)
	}
	e.set("metrics.address", cfg.Metrics)
	e.set("admin.socket", cfg.Socket)
	e.set("decision_log", cfg.DecisionLog)
	if cfg.Selection != "" {
		e.set("datapath.selection", cfg.Selection)
	}
	if cfg.Agent != "" || e.lookup("lb.agent.address") != nil {
		e.set("lb.agent.address", cfg.Agent)
	}
	if e.err != nil {
		return nil, fmt.Errorf("olcd config from %s: %w", cfg.Base, e.err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# written by %s from %s; the run sets %s\n", cfg.By, cfg.Base, strings.Join(e.changed, ", "))
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// workPortEntry is the work port's entry of ports: the config file's and
// the one a phase's caps patch (capsPatch) puts in its place.
func workPortEntry(port int, requestGate, fair bool) map[string]any {
	e := map[string]any{"port": port, "proto": "tcp"}
	if requestGate {
		e["request_gate"] = true
	}
	if fair {
		e["fair"] = true
	}
	return e
}

// editor sets keys in a YAML mapping and records those it changed.
type editor struct {
	root    *yaml.Node
	changed []string
	err     error
}

// lookup returns the value at the dotted path, or nil.
func (e *editor) lookup(path string) *yaml.Node {
	n := e.root
	for _, k := range strings.Split(path, ".") {
		n = value(n, k)
		if n == nil {
			return nil
		}
	}
	return n
}

// value returns the value of key in mapping m, or nil.
func value(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// place puts v at the dotted path, creating the mappings on the way, and
// records the path when the value changed.
func (e *editor) place(path string, v *yaml.Node) {
	keys := strings.Split(path, ".")
	m := e.root
	for i, k := range keys {
		if m.Kind != yaml.MappingNode {
			e.err = fmt.Errorf("%s: %s is not a mapping", path, strings.Join(keys[:i], "."))
			return
		}
		cur := value(m, k)
		if i < len(keys)-1 {
			if cur == nil {
				cur = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, cur)
			}
			m = cur
			continue
		}
		if cur != nil && same(cur, v) {
			return
		}
		if cur == nil {
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, v)
		} else {
			v.LineComment = cur.LineComment
			*cur = *v
		}
		e.changed = append(e.changed, path)
	}
}

// set places a Go value.
func (e *editor) set(path string, v any) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		e.err = fmt.Errorf("%s: %w", path, err)
		return
	}
	n.Style = flowStyle(&n)
	e.place(path, &n)
}

// setYAML places a value written in YAML ("{threshold: 0.5}", "0.05", or
// a mapping's lines).
func (e *editor) setYAML(path, src string) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		e.err = fmt.Errorf("%s: %q: %w", path, src, err)
		return
	}
	if len(doc.Content) != 1 {
		e.err = fmt.Errorf("%s: %q is not one YAML value", path, src)
		return
	}
	e.place(path, doc.Content[0])
}

// add appends v to the list at path (creating it).
func (e *editor) add(path string, v any) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		e.err = fmt.Errorf("%s: %w", path, err)
		return
	}
	n.Style = yaml.FlowStyle
	list := e.lookup(path)
	if list == nil || list.Kind != yaml.SequenceNode {
		e.place(path, &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{&n}})
		return
	}
	list.Content = append(list.Content, &n)
	e.changed = append(e.changed, path)
}

// flowStyle writes lists and small mappings on one line, as the shipped
// files do.
func flowStyle(n *yaml.Node) yaml.Style {
	if n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode {
		for _, c := range n.Content {
			c.Style = flowStyle(c)
		}
		return yaml.FlowStyle
	}
	return n.Style
}

// same reports whether two nodes hold the same value.
func same(a, b *yaml.Node) bool {
	if a.Kind != b.Kind || len(a.Content) != len(b.Content) {
		return false
	}
	if a.Kind == yaml.ScalarNode {
		return a.Value == b.Value
	}
	for i := range a.Content {
		if !same(a.Content[i], b.Content[i]) {
			return false
		}
	}
	return true
}
