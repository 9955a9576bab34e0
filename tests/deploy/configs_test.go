// Package deploy holds the shipped configs to one story (README, "What
// olcd does"): each protected port's p95 response time held at its target
// (controller.response_target: auto) is the primary law, and the default
// resource signals are the guards. Every recommended config — bare metal,
// behind HAProxy, the Kubernetes ConfigMaps — and the installed default
// must validate and say the same, so no file ships a guard (such as a
// cpu_busy threshold) that the docs advise against.
package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
)

// shipped returns every shipped config document by name.
func shipped(t *testing.T) map[string][]byte {
	t.Helper()
	docs := map[string][]byte{}
	files, err := filepath.Glob("../../deploy/examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../deploy/olcd.yaml")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = b
	}
	for _, f := range []string{"configmap.yaml", "configmap-enforce.yaml"} {
		p := filepath.Join("../../deploy/kubernetes", f)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var cm struct {
			Data map[string]string `yaml:"data"`
		}
		if err := yaml.Unmarshal(b, &cm); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		doc, ok := cm.Data["olcd.yaml"]
		if !ok {
			t.Fatalf("%s: no data key olcd.yaml", p)
		}
		docs[p] = []byte(doc)
	}
	if len(docs) < 5 {
		t.Fatalf("found %d shipped configs, want bare metal, HAProxy, the default and two ConfigMaps", len(docs))
	}
	return docs
}

func TestShippedConfigsOneStory(t *testing.T) {
	def := rules.Default()
	for name, doc := range shipped(t) {
		t.Run(filepath.Base(name), func(t *testing.T) {
			cfg, _, err := rules.Parse(doc, name)
			if err != nil {
				t.Fatalf("does not validate: %v", err)
			}
			if !cfg.ResponseTarget.Auto {
				t.Errorf("controller.response_target %+v, want auto: the response-time law per port is primary", cfg.ResponseTarget)
			}
			if cfg.Thresholds != def.Thresholds {
				t.Errorf("thresholds %v differ from the default guards %v: a shipped config keeps the default signals", cfg.Thresholds, def.Thresholds)
			}
		})
	}
}

// TestDefaultGuards: the default guards are the node's memory stall and the
// protected ports' accept queues, and no CPU signal. CPU contention that
// hurts a port shows in the port's own measured queue, which its law reads;
// the node's CPU pressure also reads every neighbour's work: the earlier
// default psi_cpu_some 0.5 held a service at 0.5 C, its p95 within its
// target, at the bound (90-95 % of its SYNs shed) whenever other work on
// the node pushed the pressure past 0.5 (docs/measurements.md §20).
func TestDefaultGuards(t *testing.T) {
	th := rules.DefaultThresholds()
	var got []string
	for s, v := range th {
		if v != 0 {
			got = append(got, olc.Signal(s).String())
		}
	}
	if want := []string{"psi_memory_full", "accept_queue_fill"}; !slices.Equal(got, want) {
		t.Errorf("default guards %v, want %v", got, want)
	}
}
