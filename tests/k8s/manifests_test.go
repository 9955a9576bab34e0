// Package k8s checks the Kubernetes manifests in deploy/kubernetes: every
// document decodes strictly against the Kubernetes API types (k8s.io/api,
// and the Prometheus Operator's monitoring.coreos.com/v1 types), unknown
// or duplicate fields rejected; the DaemonSet runs with exactly the
// capabilities of systemd/olcd.service; its config, probes, mounts and
// monitoring fit together. Only tests live here, so the Kubernetes modules
// never reach the daemon's binary (TestDaemonHasNoKubernetesDeps).
package k8s

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/olcd/olcd/internal/rules"
)

const (
	manifestDir = "../../deploy/kubernetes"
	unitFile    = "../../systemd/olcd.service"
	rulesFile   = "../../deploy/prometheus/olcd-rules.yaml"
)

// manifests holds every decoded object, by file.
type manifests struct {
	daemonSets  map[string]*appsv1.DaemonSet // by name
	configMaps  map[string]*corev1.ConfigMap
	podMonitors []*monitoringv1.PodMonitor
	promRules   []*monitoringv1.PrometheusRule
	accounts    []*corev1.ServiceAccount
	files       []string // every manifest file, relative to manifestDir
}

// strictDecoder decodes with apimachinery's strict serializer: unknown and
// duplicate fields are errors, field names are case-sensitive.
func strictDecoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// splitYAML returns the documents of a multi-document YAML file.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// load decodes every manifest under deploy/kubernetes.
func load(t *testing.T) *manifests {
	t.Helper()
	dec := strictDecoder(t)
	m := &manifests{daemonSets: map[string]*appsv1.DaemonSet{}, configMaps: map[string]*corev1.ConfigMap{}}
	err := filepath.WalkDir(manifestDir, func(path string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		rel, _ := filepath.Rel(manifestDir, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if de.Name() == "kustomization.yaml" {
			checkKustomization(t, path, data)
			return nil
		}
		m.files = append(m.files, rel)
		for i, doc := range splitYAML(data) {
			obj, gvk, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", rel, i+1, err)
				continue
			}
			switch o := obj.(type) {
			case *appsv1.DaemonSet:
				m.daemonSets[o.Name] = o
			case *corev1.ConfigMap:
				m.configMaps[o.Name] = o
			case *corev1.ServiceAccount:
				m.accounts = append(m.accounts, o)
			case *monitoringv1.PodMonitor:
				m.podMonitors = append(m.podMonitors, o)
			case *monitoringv1.PrometheusRule:
				m.promRules = append(m.promRules, o)
			default:
				t.Errorf("%s: %v is not a kind this test checks", rel, gvk)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// kustomization is the part of kustomize's Kustomization these manifests use.
type kustomization struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Resources  []string `yaml:"resources"`
	Images     []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
}

// checkKustomization decodes a kustomization.yaml strictly and checks that
// it lists every manifest of its directory, and only those.
func checkKustomization(t *testing.T, path string, data []byte) {
	t.Helper()
	var k kustomization
	d := yaml.NewDecoder(bytes.NewReader(data))
	d.KnownFields(true)
	if err := d.Decode(&k); err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s: %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", path, k.APIVersion, k.Kind)
	}
	dir := filepath.Dir(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") && e.Name() != "kustomization.yaml" {
			want = append(want, e.Name())
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("%s lists %v, the directory holds %v", path, got, want)
	}
}

func TestManifestsDecodeStrictly(t *testing.T) {
	m := load(t)
	if len(m.daemonSets) != 2 || len(m.configMaps) != 2 || len(m.podMonitors) != 1 || len(m.promRules) != 1 || len(m.accounts) != 1 {
		t.Fatalf("decoded %d DaemonSets, %d ConfigMaps, %d PodMonitors, %d PrometheusRules, %d ServiceAccounts; want 2, 2, 1, 1, 1",
			len(m.daemonSets), len(m.configMaps), len(m.podMonitors), len(m.promRules), len(m.accounts))
	}
}

// TestStrictDecoderRejects: the decoder this test relies on refuses what
// the API server would.
func TestStrictDecoderRejects(t *testing.T) {
	dec := strictDecoder(t)
	base := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
	for name, doc := range map[string]string{
		"unknown field":         base + "      hostNetwrk: true\n",
		"wrong case":            base + "      HostNetwork: true\n",
		"duplicate field":       base + "      hostNetwork: true\n      hostNetwork: false\n",
		"unknown nested field":  base + "      containers: [{name: c, securityContext: {privilegd: false}}]\n",
		"wrong type":            base + "      hostNetwork: yes-please\n",
		"unknown CRD field":     "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: x}\nspec: {podMetricEndpoints: []}\n",
		"unknown rule field":    "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\nspec: {groups: [{name: g, rules: [{alert: A, expr: up, forr: 1m}]}]}\n",
		"unregistered kind":     "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
		"unknown API version":   "apiVersion: apps/v2\nkind: DaemonSet\nmetadata: {name: x}\n",
		"misspelled kind":       "apiVersion: apps/v1\nkind: Daemonset\nmetadata: {name: x}\n",
		"unknown metadata key":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, label: {a: b}}\n",
		"unknown top-level key": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\nspec: {}\n",
	} {
		if name == "unregistered kind" {
			// corev1 registers Pod: this one must decode, proving the
			// scheme is the real one rather than an empty one that
			// refuses everything.
			if _, _, err := dec.Decode([]byte(doc), nil, nil); err != nil {
				t.Errorf("a valid Pod was refused: %v", err)
			}
			continue
		}
		if _, _, err := dec.Decode([]byte(doc), nil, nil); err == nil {
			t.Errorf("%s: accepted:\n%s", name, doc)
		}
	}
}

// unitCapabilities returns the capabilities of the unit's
// CapabilityBoundingSet and AmbientCapabilities lines, without the CAP_
// prefix, sorted.
func unitCapabilities(t *testing.T) (bounding, ambient []string) {
	t.Helper()
	f, err := os.Open(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		var caps []string
		for _, c := range strings.Fields(val) {
			caps = append(caps, strings.TrimPrefix(c, "CAP_"))
		}
		slices.Sort(caps)
		switch key {
		case "CapabilityBoundingSet":
			bounding = append(bounding, caps...)
		case "AmbientCapabilities":
			ambient = append(ambient, caps...)
		}
	}
	if len(bounding) == 0 || len(ambient) == 0 {
		t.Fatalf("%s: no CapabilityBoundingSet or AmbientCapabilities", unitFile)
	}
	return bounding, ambient
}

// TestDaemonSet checks each DaemonSet against what olcd needs and what the
// systemd unit grants.
func TestDaemonSet(t *testing.T) {
	m := load(t)
	bounding, ambient := unitCapabilities(t)
	if !slices.Equal(bounding, ambient) {
		t.Fatalf("the unit's bounding set %v and ambient set %v differ", bounding, ambient)
	}
	for name, ds := range m.daemonSets {
		t.Run(name, func(t *testing.T) {
			ps := ds.Spec.Template.Spec
			if !ps.HostNetwork {
				t.Error("hostNetwork is false: olcd must attach to the node's interfaces")
			}
			if ps.HostPID || ps.HostIPC {
				t.Error("hostPID/hostIPC set: olcd needs neither")
			}
			if ps.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q, want system-node-critical", ps.PriorityClassName)
			}
			if !slices.ContainsFunc(ps.Tolerations, func(tl corev1.Toleration) bool {
				return tl.Key == "" && tl.Operator == corev1.TolerationOpExists && tl.Effect == ""
			}) {
				t.Errorf("tolerations %+v do not tolerate every taint (operator: Exists, no key, no effect)", ps.Tolerations)
			}
			if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
				t.Error("the rolling update may surge: two olcd would share one node's interfaces")
			}
			if len(ps.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(ps.Containers))
			}
			c := ps.Containers[0]
			sc := c.SecurityContext
			if sc == nil || sc.Capabilities == nil {
				t.Fatal("no securityContext.capabilities")
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Error("privileged: the unit's capabilities are enough")
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Error("allowPrivilegeEscalation not false (the unit has NoNewPrivileges=yes)")
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Error("root filesystem writable (the unit has ProtectSystem=strict)")
			}
			var add []string
			for _, c := range sc.Capabilities.Add {
				add = append(add, string(c))
			}
			slices.Sort(add)
			if !slices.Equal(add, bounding) {
				t.Errorf("capabilities.add %v, the unit grants %v", add, bounding)
			}
			if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("capabilities.drop %v, want [ALL]", sc.Capabilities.Drop)
			}

			// Resources: requested, memory bounded, CPU not throttled.
			req, lim := c.Resources.Requests, c.Resources.Limits
			if req.Cpu().IsZero() || req.Memory().IsZero() {
				t.Errorf("requests %v: want cpu and memory", req)
			}
			if _, ok := lim[corev1.ResourceCPU]; ok {
				t.Error("a CPU limit throttles ticks until the heartbeat goes stale")
			}
			if lim.Memory().Cmp(*req.Memory()) < 0 {
				t.Errorf("memory limit %v below the request %v", lim.Memory(), req.Memory())
			}

			// Probes on the metrics port, liveness on /healthz.
			port := containerPort(t, c, "metrics")
			for what, pr := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				if pr == nil || pr.HTTPGet == nil {
					t.Errorf("%s probe missing or not HTTP", what)
					continue
				}
				if pr.HTTPGet.Port.String() != "metrics" {
					t.Errorf("%s probe on port %s, want the metrics port", what, pr.HTTPGet.Port.String())
				}
				want := "/healthz"
				if what == "readiness" {
					want = "/readyz"
				}
				if pr.HTTPGet.Path != want {
					t.Errorf("%s probe on %s, want %s", what, pr.HTTPGet.Path, want)
				}
			}

			// Mounts: the config directory from the ConfigMap (no subPath,
			// which would never update), the host's cgroup tree.
			vols := map[string]corev1.Volume{}
			for _, v := range ps.Volumes {
				vols[v.Name] = v
			}
			mounts := map[string]corev1.VolumeMount{}
			for _, vm := range c.VolumeMounts {
				mounts[vm.MountPath] = vm
				if vm.SubPath != "" || vm.SubPathExpr != "" {
					t.Errorf("mount %s uses subPath: it would not follow ConfigMap updates", vm.MountPath)
				}
			}
			cfgPath := argAfter(c.Args, "--config")
			cfgMount, ok := mounts[filepath.Dir(cfgPath)]
			if !ok || vols[cfgMount.Name].ConfigMap == nil {
				t.Fatalf("--config %s is not in a ConfigMap volume", cfgPath)
			}
			cm := m.configMaps[vols[cfgMount.Name].ConfigMap.Name]
			if cm == nil {
				t.Fatalf("ConfigMap %s not among the manifests", vols[cfgMount.Name].ConfigMap.Name)
			}
			doc, ok := cm.Data[filepath.Base(cfgPath)]
			if !ok {
				t.Fatalf("ConfigMap %s has no key %s", cm.Name, filepath.Base(cfgPath))
			}
			cfg := checkConfig(t, cm.Name, doc)
			if _, p, _ := strings.Cut(cfg.MetricsAddress, ":"); p != strconv.Itoa(int(port)) {
				t.Errorf("metrics.address %s, but the container's metrics port is %d", cfg.MetricsAddress, port)
			}
			if mounts[filepath.Dir(cfg.AdminSocket)].Name == "" {
				t.Errorf("admin socket %s is on the read-only root filesystem", cfg.AdminSocket)
			}
			if cfg.DecisionLog != "" && mounts[filepath.Dir(cfg.DecisionLog)].Name == "" {
				t.Errorf("decision log %s is on the read-only root filesystem", cfg.DecisionLog)
			}
			cg, ok := mounts["/sys/fs/cgroup"]
			if !ok || vols[cg.Name].HostPath == nil || vols[cg.Name].HostPath.Path != "/sys/fs/cgroup" || !cg.ReadOnly {
				t.Error("the host's /sys/fs/cgroup is not mounted read-only at /sys/fs/cgroup")
			}
			wantMode := "observe"
			if strings.HasSuffix(name, "-enforce") {
				wantMode = "enforce"
			}
			if cfg.Mode.String() != wantMode {
				t.Errorf("config mode %s, want %s", cfg.Mode, wantMode)
			}
		})
	}
}

// checkConfig validates an olcd.yaml with olcd's own parser, and checks
// that what keeps the node reachable is never shed.
func checkConfig(t *testing.T, source, doc string) *rules.Config {
	t.Helper()
	cfg, _, err := rules.Parse([]byte(doc), "ConfigMap "+source)
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", source, err)
	}
	_, mport, _ := strings.Cut(cfg.MetricsAddress, ":")
	for _, want := range []string{"22", mport, "10250"} {
		if !strings.Contains(doc, "{port: "+want+", proto: tcp}") {
			t.Errorf("ConfigMap %s: port %s is not an exception: an overloaded node would shed it", source, want)
		}
	}
	return cfg
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %s", c.Name, name)
	return 0
}

func argAfter(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// TestDaemonSetsAlike: the enforce DaemonSet and ConfigMap are the observe
// ones but for names, selection and mode, so they cannot drift apart.
func TestDaemonSetsAlike(t *testing.T) {
	m := load(t)
	obs, enf := m.daemonSets["olcd"], m.daemonSets["olcd-enforce"]
	if obs == nil || enf == nil {
		t.Fatal("DaemonSets olcd and olcd-enforce expected")
	}
	a, b := obs.Spec.Template.Spec.DeepCopy(), enf.Spec.Template.Spec.DeepCopy()
	a.Affinity, b.Affinity = nil, nil
	for _, ps := range []*corev1.PodSpec{a, b} {
		for i := range ps.Volumes {
			if ps.Volumes[i].ConfigMap != nil {
				ps.Volumes[i].ConfigMap.Name = ""
			}
		}
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("the pod specs of olcd and olcd-enforce differ beyond affinity and ConfigMap name")
	}
	if !reflect.DeepEqual(obs.Spec.UpdateStrategy, enf.Spec.UpdateStrategy) {
		t.Error("the update strategies differ")
	}
	// Together the two cover every Linux node exactly once.
	term := func(ds *appsv1.DaemonSet) corev1.NodeSelectorRequirement {
		for _, r := range ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions {
			if r.Key == "olcd.io/mode" {
				return r
			}
		}
		t.Fatalf("%s: no olcd.io/mode node affinity", ds.Name)
		return corev1.NodeSelectorRequirement{}
	}
	to, te := term(obs), term(enf)
	if to.Operator != corev1.NodeSelectorOpNotIn || te.Operator != corev1.NodeSelectorOpIn || !slices.Equal(to.Values, te.Values) {
		t.Errorf("olcd selects %v, olcd-enforce %v: want NotIn and In of the same values", to, te)
	}
	for _, ds := range []*appsv1.DaemonSet{obs, enf} {
		sel := ds.Spec.Selector.MatchLabels
		for k, v := range sel {
			if ds.Spec.Template.Labels[k] != v {
				t.Errorf("%s: selector %s=%s does not match the pod template", ds.Name, k, v)
			}
		}
	}
	if reflect.DeepEqual(obs.Spec.Selector, enf.Spec.Selector) {
		t.Error("both DaemonSets have the same selector: each would adopt the other's pods")
	}
	co, ce := m.configMaps["olcd"].Data["olcd.yaml"], m.configMaps["olcd-enforce"].Data["olcd.yaml"]
	if strings.Replace(co, "\nmode: observe\n", "\nmode: enforce\n", 1) != ce {
		t.Error("the ConfigMaps olcd and olcd-enforce differ beyond mode")
	}
}

// TestMonitoring: the PodMonitor scrapes both DaemonSets' pods under the
// job the rules select, and the PrometheusRule is olcd-rules.yaml.
func TestMonitoring(t *testing.T) {
	m := load(t)
	pm := m.podMonitors[0]
	for _, ds := range m.daemonSets {
		labels := ds.Spec.Template.Labels
		for k, v := range pm.Spec.Selector.MatchLabels {
			if labels[k] != v {
				t.Errorf("PodMonitor selects %s=%s, which %s's pods lack", k, v, ds.Name)
			}
		}
		if job := labels[pm.Spec.JobLabel]; job != "olcd" {
			t.Errorf("PodMonitor's job for %s is %q, the rules select job=\"olcd\"", ds.Name, job)
		}
		c := ds.Spec.Template.Spec.Containers[0]
		for _, ep := range pm.Spec.PodMetricsEndpoints {
			if ep.Port == nil {
				t.Fatal("PodMonitor endpoint without a port name")
			}
			containerPort(t, c, *ep.Port)
		}
	}

	// The PrometheusRule's groups, as plain YAML, equal the rules file's.
	var file struct {
		Groups []any `yaml:"groups"`
	}
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	prData, err := os.ReadFile(filepath.Join(manifestDir, "monitoring/prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Spec struct {
			Groups []any `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(prData, &pr); err != nil {
		t.Fatal(err)
	}
	if len(file.Groups) == 0 || !reflect.DeepEqual(file.Groups, pr.Spec.Groups) {
		t.Errorf("monitoring/prometheusrule.yaml's groups differ from %s: copy them over", rulesFile)
	}
	if n := len(m.promRules[0].Spec.Groups); n != len(file.Groups) {
		t.Errorf("the PrometheusRule decodes to %d groups, want %d", n, len(file.Groups))
	}
}

// TestDockerfile: the image builds the daemon with the Go the module asks
// for. (docker build itself is not run: no Docker daemon here.)
func TestDockerfile(t *testing.T) {
	df, err := os.ReadFile(filepath.Join(manifestDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	imgVer := regexp.MustCompile(`(?m)^ARG GO_VERSION=(\d+\.\d+)$`).FindSubmatch(df)
	if goVer == nil || imgVer == nil || string(goVer[1]) != string(imgVer[1]) {
		t.Errorf("Dockerfile GO_VERSION %q, go.mod asks for go %q", imgVer, goVer)
	}
	for _, want := range []string{"./cmd/olcd", "CGO_ENABLED=0", "ENTRYPOINT [\"/usr/local/bin/olcd\"]"} {
		if !bytes.Contains(df, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// TestDaemonHasNoKubernetesDeps: the Kubernetes modules this test imports
// stay out of the daemon's binary.
func TestDaemonHasNoKubernetesDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/olcd/olcd/cmd/olcd").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	sc := bufio.NewScanner(io.Reader(bytes.NewReader(out)))
	for sc.Scan() {
		p := sc.Text()
		if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/") || strings.Contains(p, "prometheus-operator") {
			t.Errorf("cmd/olcd depends on %s", p)
		}
	}
}
