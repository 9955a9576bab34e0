package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// yamlLine finds the line number in a go-yaml syntax error message.
var yamlLine = regexp.MustCompile(`line (\d+)`)

// parseDocument parses one YAML (or JSON) document and records the origin of
// every node in origins. It returns the root mapping, nil for an empty
// document, and the syntax problems (a document that is not a mapping, more
// than one document).
func parseDocument(data []byte, source string, origins map[*yaml.Node]string) (*yaml.Node, []Problem) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, []Problem{syntaxProblem(source, data, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, []Problem{syntaxProblem(source, data, err)}
		}
		return nil, []Problem{{File: source, Line: line, Msg: "more than one YAML document: a config file holds exactly one",
			Hint: "remove the '---' separator and merge the documents"}}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, []Problem{{File: source, Line: root.Line, Msg: "the document must be a mapping of keys (mode:, signals:, …), got " + kindName(root)}}
	}
	record(root, source, origins)
	return root, nil
}

// syntaxProblem turns a go-yaml error into a Problem. go-yaml reports
// parser errors at the start of the enclosing block (and 0-based), which
// points at the wrong line; the first line at which a prefix of the document
// fails with the same message is where the mistake is.
func syntaxProblem(source string, data []byte, err error) Problem {
	msg := trimYAMLPrefix(err.Error())
	p := Problem{File: source, Msg: "yaml syntax: " + msg}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) <= maxLocateLines {
		for n := 1; n <= len(lines); n++ {
			var doc yaml.Node
			perr := yaml.Unmarshal(bytes.Join(lines[:n], nil), &doc)
			if perr != nil && trimYAMLPrefix(perr.Error()) == msg {
				p.Line = n
				return p
			}
		}
	}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
	}
	return p
}

// maxLocateLines bounds the prefix search of syntaxProblem (quadratic in
// the line count); config files are far shorter.
const maxLocateLines = 2000

// yamlPrefix matches go-yaml's "yaml: line N: " prefix.
var yamlPrefix = regexp.MustCompile(`^yaml: (line \d+: )?`)

// trimYAMLPrefix drops go-yaml's "yaml: line N: " prefix, which Problem
// renders itself.
func trimYAMLPrefix(s string) string { return yamlPrefix.ReplaceAllString(s, "") }

// record maps n and every node below it to source.
func record(n *yaml.Node, source string, origins map[*yaml.Node]string) {
	if n == nil {
		return
	}
	if _, ok := origins[n]; ok {
		return // shared through an alias
	}
	origins[n] = source
	for _, c := range n.Content {
		record(c, source, origins)
	}
	if n.Alias != nil {
		record(n.Alias, source, origins)
	}
}

// resolve follows an alias to its anchor.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is an empty value (`key:`, `~`, `null`).
func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// kindName describes a node for "must be X, got Y" messages.
func kindName(n *yaml.Node) string {
	n = resolve(n)
	switch {
	case n == nil || isNull(n):
		return "nothing (null)"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case n.Tag == "!!bool":
		return "the boolean " + n.Value
	}
	return fmt.Sprintf("%q", n.Value)
}

// mapGet returns the value of key in mapping m, or nil.
func mapGet(m *yaml.Node, key string) *yaml.Node {
	m = resolve(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// merge applies patch onto base as a merge patch (RFC 7386 semantics on
// YAML): two mappings merge key by key; a null value in patch deletes the
// key; any other value replaces the base's. Neither input is modified; the
// result shares leaf nodes with them so that origins and lines still apply.
func merge(base, patch *yaml.Node) *yaml.Node {
	base, patch = resolve(base), resolve(patch)
	if patch == nil {
		return base
	}
	if patch.Kind != yaml.MappingNode || base == nil || base.Kind != yaml.MappingNode {
		return dropNulls(patch)
	}
	out := *base
	out.Content = nil
	seen := map[string]bool{}
	for i := 0; i+1 < len(base.Content); i += 2 {
		k, v := base.Content[i], base.Content[i+1]
		pv := mapGet(patch, k.Value)
		seen[k.Value] = pv != nil
		switch {
		case pv == nil:
			out.Content = append(out.Content, k, v)
		case isNull(pv):
			// deleted
		default:
			out.Content = append(out.Content, k, merge(v, pv))
		}
	}
	for i := 0; i+1 < len(patch.Content); i += 2 {
		k, v := patch.Content[i], patch.Content[i+1]
		if seen[k.Value] || isNull(v) {
			continue
		}
		seen[k.Value] = true
		out.Content = append(out.Content, k, dropNulls(v))
	}
	return &out
}

// dropNulls returns n without the null-valued keys of its mappings (a merge
// patch's deletions have nothing to delete in new subtrees).
func dropNulls(n *yaml.Node) *yaml.Node {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return n
	}
	out := *n
	out.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		if isNull(n.Content[i+1]) {
			continue
		}
		out.Content = append(out.Content, n.Content[i], dropNulls(n.Content[i+1]))
	}
	return &out
}
