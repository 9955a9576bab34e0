package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ConfigMapKey is the key of a Kubernetes ConfigMap's data that holds
// olcd's config: deploy/kubernetes/daemonset.yaml mounts the ConfigMap as
// the directory /etc/olcd and runs olcd on /etc/olcd/olcd.yaml, the file
// this key becomes.
const ConfigMapKey = "olcd.yaml"

// ParseConfigMap parses and validates the olcd config inside a Kubernetes
// ConfigMap (apiVersion v1, kind ConfigMap: deploy/kubernetes/configmap.yaml),
// its data[ConfigMapKey], so that `olcd check-config` takes the file the
// README recommends starting from. isConfigMap is false, and nothing is
// parsed, when data is not a ConfigMap (a YAML document whose top-level
// kind is ConfigMap): the caller then parses it as a config (Parse), which
// also reports a document that does not parse. Problems name source with
// the lines of the ConfigMap itself: a literal block scalar (`olcd.yaml: |`)
// keeps its lines, its content starting on the line after the key. A value
// written another way (quoted, folded) does not, and its problems name
// "source[data.olcd.yaml]" with the lines of the value. A ConfigMap without
// the key, of another apiVersion, or followed by a second document (empty
// ones, a "---" last, are skipped as kubectl skips them) is one problem,
// which names the key expected. The error is a *ValidationError.
func ParseConfigMap(data []byte, source string) (cfg *Config, warns []Warning, isConfigMap bool, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if dec.Decode(&doc) != nil || len(doc.Content) != 1 {
		return nil, nil, false, nil
	}
	root := doc.Content[0]
	_, kind := mapEntry(root, "kind")
	if kind == nil || kind.Kind != yaml.ScalarNode || kind.Value != "ConfigMap" {
		return nil, nil, false, nil
	}
	refuse := func(line int, field, msg, hint string) (*Config, []Warning, bool, error) {
		return nil, nil, true, &ValidationError{Problems: []Problem{{File: source, Line: line, Field: field, Msg: msg, Hint: hint}}}
	}
	if _, v := mapEntry(root, "apiVersion"); v == nil || v.Value != "v1" {
		line, got := kind.Line, "none"
		if v != nil {
			line, got = v.Line, fmt.Sprintf("%q", v.Value)
		}
		return refuse(line, "apiVersion", "a ConfigMap is apiVersion v1, this one "+got, "write apiVersion: v1")
	}
	for {
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil && emptyDocument(&next) {
			// A separator last, or between comments: kubectl skips such
			// a document, and so a manifest often ends with "---".
			continue
		}
		line := 0
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return refuse(line, "", "a second YAML document after the ConfigMap: check-config reads one ConfigMap a file",
			"check each manifest on its own")
	}
	want := fmt.Sprintf("no key %s: the DaemonSet mounts this ConfigMap as /etc/olcd and runs olcd on /etc/olcd/%s", ConfigMapKey, ConfigMapKey)
	dk, d := mapEntry(root, "data")
	if d == nil || d.Kind != yaml.MappingNode {
		line := kind.Line
		if dk != nil {
			line = dk.Line
		}
		return refuse(line, "data", want, "put olcd's config under data: "+ConfigMapKey+": |")
	}
	_, v := mapEntry(d, ConfigMapKey)
	if v == nil {
		var keys []string
		for i := 0; i+1 < len(d.Content); i += 2 {
			keys = append(keys, d.Content[i].Value)
		}
		slices.Sort(keys)
		hint := "the data has no key"
		if len(keys) > 0 {
			hint = "the data's keys: " + strings.Join(keys, ", ")
		}
		return refuse(dk.Line, "data", want, hint)
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		return refuse(v.Line, "data."+ConfigMapKey, "not a string: a ConfigMap's data holds each file's text", "write "+ConfigMapKey+": | and the config below it, indented")
	}
	if strings.TrimSpace(v.Value) == "" {
		// Parse's own words would speak of a file of white space.
		return refuse(v.Line, "data."+ConfigMapKey, "empty: refused, as an empty config file is", "write the settings to change, or {} for every default")
	}
	name, text := source+"[data."+ConfigMapKey+"]", v.Value
	if v.Style&yaml.LiteralStyle != 0 {
		// Blank lines in front put the config's first line where the
		// block's is, the line after the key: every problem's line is
		// then the file's.
		name, text = source, strings.Repeat("\n", v.Line)+v.Value
	}
	cfg, warns, err = Parse([]byte(text), name)
	return cfg, warns, true, err
}

// emptyDocument reports whether doc holds nothing: no node, or the null a
// bare "---" (with comments at most) decodes to, not a written null.
func emptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && n.Value == "" && n.Style == 0
}

// mapEntry returns the key node and the value of key in the mapping n, or
// nils.
func mapEntry(n *yaml.Node, key string) (k, v *yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}
