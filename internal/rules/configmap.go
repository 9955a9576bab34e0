package rules

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

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
// README recommends starting from. key names the ConfigMap's field the
// config is read from, "data.olcd.yaml" or "binaryData.olcd.yaml"; it is
// empty, and nothing is parsed, when data is not a ConfigMap (a YAML document whose top-level
// kind is ConfigMap): the caller then parses it as a config (Parse), which
// also reports a document that does not parse. Problems name source with
// the lines of the ConfigMap itself: a literal block scalar (`olcd.yaml: |`)
// keeps its lines, its content starting on the line after its `|`. A value
// written another way (quoted, folded) does not, and its problems name
// "source[data.olcd.yaml]" with the lines of the value. A config under
// binaryData (base64), which the kubelet writes as the file too, names
// "source[binaryData.olcd.yaml]" and the decoded text's lines. A ConfigMap
// without the key, of another apiVersion, or followed by a second document
// (empty ones, a "---" last, are skipped as kubectl skips them) is one
// problem, which names the key expected, and so is a List holding
// ConfigMaps (kubectl's `get configmap` without a name). The error is a
// *ValidationError.
func ParseConfigMap(data []byte, source string) (cfg *Config, warns []Warning, key string, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if dec.Decode(&doc) != nil || len(doc.Content) != 1 {
		return nil, nil, "", nil
	}
	root := doc.Content[0]
	_, kind := mapEntry(root, "kind")
	key = "data." + ConfigMapKey
	refuse := func(line int, field, msg, hint string) (*Config, []Warning, string, error) {
		return nil, nil, key, &ValidationError{Problems: []Problem{{File: source, Line: line, Field: field, Msg: msg, Hint: hint}}}
	}
	if n := listedConfigMaps(root, kind); n > 0 {
		return refuse(kind.Line, "kind", fmt.Sprintf("a %s holding %d ConfigMap(s): check-config reads one ConfigMap a file", kind.Value, n),
			"kubectl get configmap olcd -n kube-system -o yaml")
	}
	if kind == nil || kind.Kind != yaml.ScalarNode || kind.Value != "ConfigMap" {
		return nil, nil, "", nil
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
	_, b := mapEntry(root, "binaryData")
	_, v := mapEntry(d, ConfigMapKey)
	_, bv := mapEntry(b, ConfigMapKey)
	field := key
	// kubectl applies the last of two keys, or refuses them: checking the
	// first could pass a config that never runs.
	for _, e := range []struct {
		n          *yaml.Node
		key, field string
	}{{root, "data", "data"}, {root, "binaryData", "binaryData"}, {d, ConfigMapKey, field}, {b, ConfigMapKey, "binaryData." + ConfigMapKey}} {
		if first, again := duplicate(e.n, e.key); again != nil {
			return refuse(again.Line, e.field, fmt.Sprintf("duplicate key (first at line %d)", first.Line), "remove one of them")
		}
	}
	switch {
	case v != nil && bv != nil:
		return refuse(bv.Line, "binaryData."+ConfigMapKey, "under data too: Kubernetes refuses a key in both", "keep the one under data")
	case bv != nil:
		// The kubelet writes binaryData's keys as files too: the
		// config is the decoded value, with its own lines.
		v, field = bv, "binaryData."+ConfigMapKey
		key = field
	case v == nil:
		line := kind.Line
		if dk != nil {
			line = dk.Line
		}
		var hints []string
		if d != nil && d.Kind == yaml.MappingNode {
			hint := "the data has no key"
			if keys := mapKeys(d); len(keys) > 0 {
				hint = "the data's keys: " + strings.Join(keys, ", ")
			}
			hints = append(hints, hint)
		}
		if keys := mapKeys(b); len(keys) > 0 {
			words := "binaryData's keys: "
			if len(hints) > 0 {
				words = "binaryData's: "
			}
			hints = append(hints, words+strings.Join(keys, ", "))
		}
		if len(hints) == 0 {
			hints = append(hints, "put olcd's config under data: "+ConfigMapKey+": |")
		}
		return refuse(line, "data", want, strings.Join(hints, "; "))
	}
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias // its lines are the anchor's, in the same file
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		return refuse(v.Line, field, "not a string: a ConfigMap's data holds each file's text", "write "+ConfigMapKey+": | and the config below it, indented")
	}
	name, text := source+"["+field+"]", v.Value
	if bv != nil {
		raw, err := base64.StdEncoding.DecodeString(v.Value)
		if err != nil {
			return refuse(v.Line, field, "not base64: binaryData holds each file's bytes in base64", "put the config under data: "+ConfigMapKey+": | instead")
		}
		text = string(raw)
	}
	if strings.TrimSpace(text) == "" {
		// Parse's own words would speak of a file of white space.
		return refuse(v.Line, field, "empty: refused, as an empty config file is", "write the settings to change, or {} for every default")
	}
	if bv == nil && v.Style&yaml.LiteralStyle != 0 {
		// Blank lines in front put the config's first line where the
		// block's is, the line after its indicator: every problem's line
		// is then the file's.
		name, text = source, strings.Repeat("\n", blockLine(data, v))+v.Value
	}
	cfg, warns, err = Parse([]byte(text), name)
	return cfg, warns, key, err
}

// listedConfigMaps counts the ConfigMaps among the items of root when it
// is a List (kind, root's) as kubectl prints one for `get configmap`
// without a name: 0 otherwise.
func listedConfigMaps(root, kind *yaml.Node) int {
	if kind == nil || kind.Kind != yaml.ScalarNode || (kind.Value != "List" && kind.Value != "ConfigMapList") {
		return 0
	}
	_, items := mapEntry(root, "items")
	if items == nil || items.Kind != yaml.SequenceNode {
		return 0
	}
	n := 0
	for _, it := range items.Content {
		if _, k := mapEntry(it, "kind"); k != nil && k.Value == "ConfigMap" {
			n++
		}
	}
	return n
}

// blockLine returns the line of the indicator (| or >) of the block scalar
// v, parsed from data: go-yaml's v.Line is where the node starts, its
// anchor or tag when one is written first, and these may end the key's
// line with the indicator on a line below (`olcd.yaml: &cfg`, then `|`).
// Lines end as go-yaml ends them; v.Line where the text between is not
// properties, comments and white space.
func blockLine(data []byte, v *yaml.Node) int {
	lines := yamlLines(data)
	if v.Line < 1 || v.Line > len(lines) {
		return v.Line
	}
	s := lines[v.Line-1]
	for range v.Column - 1 {
		if len(s) == 0 {
			return v.Line
		}
		_, w := utf8.DecodeRune(s)
		s = s[w:]
	}
	for line := v.Line; ; {
		for len(s) > 0 {
			switch s[0] {
			case ' ', '\t':
				s = s[1:]
			case '|', '>':
				return line
			case '#':
				s = nil
			case '&', '!': // an anchor or a tag: up to the next blank
				if i := bytes.IndexAny(s, " \t"); i >= 0 {
					s = s[i:]
				} else {
					s = nil
				}
			default:
				return v.Line
			}
		}
		if line++; line > len(lines) {
			return v.Line
		}
		s = lines[line-1]
	}
}

// yamlLines splits data into lines where go-yaml counts a line break: CR
// LF, CR, LF, NEL, LS and PS.
func yamlLines(data []byte) [][]byte {
	var lines [][]byte
	for {
		i := bytes.IndexAny(data, "\r\n\u0085\u2028\u2029")
		if i < 0 {
			return append(lines, data)
		}
		lines = append(lines, data[:i])
		_, w := utf8.DecodeRune(data[i:])
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			w = 2
		}
		data = data[i+w:]
	}
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

// duplicate returns the first two keys named key in the mapping n, again
// nil when there is one at most.
func duplicate(n *yaml.Node, key string) (first, again *yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i]; {
		case k.Value != key:
		case first == nil:
			first = k
		default:
			return first, k
		}
	}
	return nil, nil
}

// mapKeys returns the keys of the mapping n, sorted; none when n is not a
// mapping.
func mapKeys(n *yaml.Node) []string {
	var keys []string
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			keys = append(keys, n.Content[i].Value)
		}
	}
	slices.Sort(keys)
	return keys
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
