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
	e := &expander{budget: maxAliasNodes, active: map[*yaml.Node]bool{}}
	root = e.expand(root)
	if e.problem != nil {
		e.problem.File = source
		return nil, []Problem{*e.problem}
	}
	record(root, source, origins)
	return root, nil
}

// emptyProblem describes a document that holds no setting.
func emptyProblem(source string, data []byte) Problem {
	msg := "the file is empty"
	switch {
	case len(bytes.TrimSpace(data)) > 0:
		msg = "the file holds no setting (only comments, or an empty document)"
	case len(data) > 0:
		msg = "the file holds only white space"
	}
	return Problem{File: source, Msg: msg + ": refused, so that a truncated or unfinished write never replaces the config",
		Hint: "write the settings to change, or {} for every default"}
}

// maxAliasNodes bounds how many nodes aliases may expand to in one
// document: anchors nested ten deep, each aliased ten times, are ten billion
// nodes ("billion laughs"), which would exhaust memory while merging a patch.
// Real configs repeat a few small blocks.
const maxAliasNodes = 100000

// expander copies a document tree with every alias replaced by a copy of its
// anchor's tree and every merge key (`<<: *defaults`) replaced by the keys it
// merges, so that decoding, patch merging and line numbers deal with plain
// trees only. The copies keep the original nodes' lines: a problem in an
// anchored value names the line where the value is written. An alias inside
// the node it refers to is a problem (go-yaml accepts it; walking it would
// recurse forever), as is expanding beyond maxAliasNodes.
type expander struct {
	budget    int
	aliased   int // > 0 while copying an alias's target
	aliasLine int // line of the outermost alias being copied
	active    map[*yaml.Node]bool
	problem   *Problem
}

// expand returns the expanded copy of n.
func (e *expander) expand(n *yaml.Node) *yaml.Node {
	if e.problem != nil || n == nil {
		return n
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return n
		}
		if e.active[n.Alias] {
			e.problem = &Problem{Line: n.Line, Msg: fmt.Sprintf("alias *%s refers to a node that contains it", n.Value),
				Hint: "an anchor cannot include itself"}
			return n
		}
		if e.aliased == 0 {
			e.aliasLine = n.Line
		}
		e.aliased++
		out := e.expand(n.Alias)
		e.aliased--
		return out
	}
	if e.aliased > 0 {
		if e.budget--; e.budget < 0 {
			e.problem = &Problem{Line: e.aliasLine, Msg: fmt.Sprintf("aliases expand to more than %d nodes", maxAliasNodes),
				Hint: "write the repeated blocks out, or nest fewer aliases"}
			return n
		}
	}
	if len(n.Content) == 0 {
		return n // scalars and empty collections are shared as they are
	}
	e.active[n] = true
	defer delete(e.active, n)
	out := *n
	out.Content = make([]*yaml.Node, 0, len(n.Content))
	if n.Kind != yaml.MappingNode {
		for _, c := range n.Content {
			out.Content = append(out.Content, e.expand(c))
		}
		return &out
	}
	// Keys written in the mapping win over merged ones, and among merged
	// mappings the first to give a key wins (the YAML merge key rules).
	explicit := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := resolve(n.Content[i]); !isMergeKey(k) && k.Kind == yaml.ScalarNode {
			explicit[k.Value] = true
		}
	}
	merged := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !isMergeKey(resolve(k)) {
			out.Content = append(out.Content, e.expand(k), e.expand(v))
			continue
		}
		for _, m := range e.mergeSources(v) {
			for j := 0; j+1 < len(m.Content); j += 2 {
				mk := m.Content[j]
				if mk.Kind != yaml.ScalarNode || explicit[mk.Value] || merged[mk.Value] {
					continue
				}
				merged[mk.Value] = true
				out.Content = append(out.Content, mk, m.Content[j+1])
			}
		}
	}
	return &out
}

// mergeSources returns the expanded mappings a merge key's value names: one
// mapping (usually an alias) or a list of them.
func (e *expander) mergeSources(v *yaml.Node) []*yaml.Node {
	x := e.expand(v)
	if e.problem != nil {
		return nil
	}
	items := []*yaml.Node{x}
	if x.Kind == yaml.SequenceNode {
		items = x.Content
	}
	for _, m := range items {
		if m.Kind != yaml.MappingNode {
			e.problem = &Problem{Line: v.Line, Msg: "<< merges mappings only, got " + kindName(m),
				Hint: "write <<: *anchor, where the anchor is a mapping"}
			return nil
		}
	}
	return items
}

// isMergeKey reports whether k is YAML's merge key: a plain `<<`, which
// go-yaml tags !!merge (a quoted "<<" is an ordinary key).
func isMergeKey(k *yaml.Node) bool {
	return k != nil && k.Kind == yaml.ScalarNode && k.Tag == "!!merge"
}

// syntaxProblem turns a go-yaml error into a Problem. go-yaml reports
// parser errors at the start of the enclosing block (and 0-based), which
// points at the wrong line; the first line at which a prefix of the document
// fails with the same message is where the mistake is. Prefixes fail from
// the mistake on and parse (or fail differently) before it, so a binary
// search finds that line in log₂(lines) parses; a linear scan took seconds
// for a config of two thousand lines (a long exception list).
func syntaxProblem(source string, data []byte, err error) Problem {
	msg := trimYAMLPrefix(err.Error())
	p := Problem{File: source, Msg: "yaml syntax: " + msg}
	lines := bytes.SplitAfter(data, []byte("\n"))
	fails := func(n int) bool {
		var doc yaml.Node
		perr := yaml.Unmarshal(bytes.Join(lines[:n], nil), &doc)
		return perr != nil && trimYAMLPrefix(perr.Error()) == msg
	}
	// lo: a prefix that does not fail so; hi: one that does.
	if lo, hi := 0, len(lines); fails(hi) {
		for hi-lo > 1 {
			if mid := (lo + hi) / 2; fails(mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		p.Line = hi
		return p
	}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
	}
	return p
}

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
func merge(base, patch *yaml.Node, origins map[*yaml.Node]string) *yaml.Node {
	base, patch = resolve(base), resolve(patch)
	if patch == nil {
		return base
	}
	if patch.Kind != yaml.MappingNode || base == nil || base.Kind != yaml.MappingNode {
		return dropNulls(patch, origins)
	}
	out := *base
	out.Content = nil
	keepOrigin(&out, base, origins)
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
			out.Content = append(out.Content, k, merge(v, pv, origins))
		}
	}
	for i := 0; i+1 < len(patch.Content); i += 2 {
		k, v := patch.Content[i], patch.Content[i+1]
		if seen[k.Value] || isNull(v) {
			continue
		}
		seen[k.Value] = true
		out.Content = append(out.Content, k, dropNulls(v, origins))
	}
	return &out
}

// dropNulls returns n without the null-valued keys of its mappings (a merge
// patch's deletions have nothing to delete in new subtrees).
func dropNulls(n *yaml.Node, origins map[*yaml.Node]string) *yaml.Node {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return n
	}
	out := *n
	out.Content = nil
	keepOrigin(&out, n, origins)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if isNull(n.Content[i+1]) {
			continue
		}
		out.Content = append(out.Content, n.Content[i], dropNulls(n.Content[i+1], origins))
	}
	return &out
}

// keepOrigin records for the copy the document its original came from, so
// that a problem found in a merged node names the patch (or file) and line
// the user wrote, not the base config.
func keepOrigin(copy, orig *yaml.Node, origins map[*yaml.Node]string) {
	if src, ok := origins[orig]; ok {
		origins[copy] = src
	}
}
