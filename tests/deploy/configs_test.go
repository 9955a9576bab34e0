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
	"testing"

	"go.yaml.in/yaml/v3"

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
