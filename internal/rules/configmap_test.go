package rules

import (
	"encoding/base64"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/olc"
)

// TestParseConfigMap: the olcd config inside a Kubernetes ConfigMap is
// checked with its problems at the ConfigMap file's own lines (a literal
// block's content starts on the line after its key); a ConfigMap without
// the key names the key expected; a document that is not a ConfigMap is
// left to Parse.
func TestParseConfigMap(t *testing.T) {
	shipped, err := os.ReadFile("../../deploy/kubernetes/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const head = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: olcd, namespace: kube-system}\n"
	tests := []struct {
		name  string
		doc   string
		notCM bool // not a ConfigMap: nothing parsed
		// binary: the config is read from binaryData.olcd.yaml, not data.
		binary bool
		mode   olc.Mode // the config's mode, when it is valid
		// problems are the rendered problems, in order; none: valid.
		problems []string
	}{
		{name: "the shipped ConfigMap", doc: string(shipped), mode: olc.ModeObserve},
		{name: "a typo inside, at the file's line", doc: head + "data:\n  olcd.yaml: |\n    # a comment\n    mode: enforce\n    controler: {ki: 1}\n",
			problems: []string{`cm.yaml:8: controler: unknown key (did you mean "controller"?)`}},
		{name: "a blank line first, a duplicate key", doc: head + "data:\n  olcd.yaml: |\n\n    mode: enforce\n    mode: observe\n",
			problems: []string{"cm.yaml:8: mode: duplicate key (first at line 7) (remove one of them)"}},
		// go-yaml gives a node's line as its anchor's or tag's, which may
		// stand on the key's line with the block's indicator below.
		{name: "an anchor, the block below", doc: head + "data:\n  olcd.yaml: &cfg\n    |\n    mode: enforce\n    controler: {}\n",
			problems: []string{`cm.yaml:8: controler: unknown key`}},
		{name: "an anchor, the block below, CRLF", doc: strings.ReplaceAll(head+"data:\n  olcd.yaml: &cfg\n    |\n    mode: enforce\n    controler: {}\n", "\n", "\r\n"),
			problems: []string{`cm.yaml:8: controler: unknown key`}},
		{name: "a tag and a comment, the block below", doc: head + "data:\n  olcd.yaml: !!str # the config\n\n    |-\n    mode: enforce\n    controler: {}\n",
			problems: []string{`cm.yaml:9: controler: unknown key`}},
		{name: "an alias of a block", doc: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  annotations:\n    config: &cfg |\n      mode: enforce\n      controler: {}\ndata:\n  olcd.yaml: *cfg\n",
			problems: []string{`cm.yaml:7: controler: unknown key`}},
		{name: "a quoted value: the value's lines", doc: head + "data:\n  olcd.yaml: \"mode: enforce\\nports: sometimes\\n\"\n",
			problems: []string{`cm.yaml[data.olcd.yaml]:2: ports: `}},
		{name: "without the key", doc: head + "data:\n  config.yaml: |\n    mode: enforce\n",
			problems: []string{"cm.yaml:4: data: no key olcd.yaml: the DaemonSet mounts this ConfigMap as /etc/olcd and runs olcd on /etc/olcd/olcd.yaml (the data's keys: config.yaml)"}},
		{name: "without data", doc: head,
			problems: []string{"cm.yaml:2: data: no key olcd.yaml"}},
		// The kubelet writes binaryData's keys as files too.
		{binary: true, name: "under binaryData", doc: head + "binaryData:\n  olcd.yaml: " + b64("mode: enforce\n") + "\n", mode: olc.ModeEnforce},
		{binary: true, name: "under binaryData, invalid: the value's lines", doc: head + "binaryData:\n  olcd.yaml: " + b64("mode: enforce\ncontroler: {}\n") + "\n",
			problems: []string{`cm.yaml[binaryData.olcd.yaml]:2: controler: unknown key`}},
		{binary: true, name: "under binaryData, not base64", doc: head + "binaryData:\n  olcd.yaml: 'mode: enforce'\n",
			problems: []string{"cm.yaml:5: binaryData.olcd.yaml: not base64"}},
		{binary: true, name: "under binaryData, empty", doc: head + "binaryData:\n  olcd.yaml: ''\n",
			problems: []string{"cm.yaml:5: binaryData.olcd.yaml: empty"}},
		{name: "under data and binaryData", doc: head + "data:\n  olcd.yaml: '{}'\nbinaryData:\n  olcd.yaml: " + b64("{}") + "\n",
			problems: []string{"cm.yaml:7: binaryData.olcd.yaml: under data too"}},
		{name: "other keys in both", doc: head + "data: {b: x, a: y}\nbinaryData: {c: " + b64("z") + "}\n",
			problems: []string{"cm.yaml:4: data: no key olcd.yaml: the DaemonSet mounts this ConfigMap as /etc/olcd and runs olcd on /etc/olcd/olcd.yaml (the data's keys: a, b; binaryData's: c)"}},
		// kubectl would apply one of the two (or refuse both): never check
		// another one than what runs.
		{name: "the key twice", doc: head + "data:\n  olcd.yaml: |\n    mode: enforce\n  olcd.yaml: |\n    mode: enforc\n",
			problems: []string{"cm.yaml:7: data.olcd.yaml: duplicate key (first at line 5) (remove one of them)"}},
		{name: "data twice", doc: head + "data: {olcd.yaml: 'mode: enforce'}\ndata: {olcd.yaml: 'mode: enforc'}\n",
			problems: []string{"cm.yaml:5: data: duplicate key (first at line 4) (remove one of them)"}},
		{name: "an empty value", doc: head + "data:\n  olcd.yaml: |\n\n",
			problems: []string{"cm.yaml:5: data.olcd.yaml: empty"}},
		{name: "another apiVersion", doc: "apiVersion: v2\nkind: ConfigMap\ndata: {olcd.yaml: '{}'}\n",
			problems: []string{`cm.yaml:1: apiVersion: a ConfigMap is apiVersion v1, this one "v2"`}},
		{name: "a second document", doc: head + "data: {olcd.yaml: '{}'}\n---\nkind: DaemonSet\n",
			problems: []string{"cm.yaml:6: a second YAML document after the ConfigMap"}},
		// kubectl skips empty documents: a manifest may end with its separator.
		{name: "a separator last", doc: head + "data:\n  olcd.yaml: |\n    mode: enforce\n---\n", mode: olc.ModeEnforce},
		{name: "empty documents after it", doc: head + "data: {olcd.yaml: 'mode: enforce'}\n---\n# end\n---\n", mode: olc.ModeEnforce},
		{name: "a second document after an empty one", doc: head + "data: {olcd.yaml: '{}'}\n---\n---\nkind: DaemonSet\n",
			problems: []string{"cm.yaml:7: a second YAML document after the ConfigMap"}},
		// kubectl get configmap -o yaml without a name: the ConfigMap is
		// an item of a List, which Parse refused for its keys
		// (apiVersion, items, kind, metadata: unknown key).
		{name: "a List of ConfigMaps", doc: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  data:\n    olcd.yaml: |\n      mode: enforce\nmetadata: {resourceVersion: \"\"}\n",
			problems: []string{"cm.yaml:2: kind: a List holding 1 ConfigMap(s): check-config reads one ConfigMap a file (kubectl get configmap olcd -n kube-system -o yaml)"}},
		{name: "a List of something else", doc: "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret}\n", notCM: true},
		{name: "an olcd config", doc: "mode: enforce\n", notCM: true},
		{name: "another kind", doc: "apiVersion: v1\nkind: Secret\n", notCM: true},
		{name: "not YAML", doc: "mode: [\n", notCM: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, key, err := ParseConfigMap([]byte(tt.doc), "cm.yaml")
			want := "data.olcd.yaml"
			switch {
			case tt.notCM:
				want = ""
			case tt.binary:
				want = "binaryData.olcd.yaml"
			}
			if key != want {
				t.Fatalf("key %q, want %q", key, want)
			}
			if tt.notCM {
				if cfg != nil || err != nil {
					t.Errorf("not a ConfigMap, yet config %v, error %v", cfg, err)
				}
				return
			}
			if len(tt.problems) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Mode != tt.mode {
					t.Errorf("mode %v, want %v", cfg.Mode, tt.mode)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v, want a *ValidationError", err)
			}
			got := ve.ProblemLines()
			if len(got) != len(tt.problems) {
				t.Fatalf("problems %q, want %d", got, len(tt.problems))
			}
			for i, want := range tt.problems {
				if !strings.HasPrefix(got[i], want) {
					t.Errorf("problem %q, want it to start %q", got[i], want)
				}
			}
		})
	}
}

// b64 is s as a ConfigMap's binaryData holds it.
func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
