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

// node is a document node with its aliases followed and its merge keys
// (`<<: *defaults`) expanded: the yaml.Node as written (kind, tag, value,
// line), the file it came from, and a mapping's pairs or a list's items.
// Merged pairs follow the YAML merge rules: keys written in the mapping win
// over merged ones, and the first merged mapping to give a key wins; they
// keep the lines where they are written.
type node struct {
	*yaml.Node
	file       string
	keys, vals []*node // a mapping's pairs (keys nil for a list)
}

// parseDocument parses one YAML (or JSON) document from source. It returns
// the root mapping, nil for an empty document, and the syntax problems (a
// document that is not a mapping, more than one document, aliases that
// cannot be expanded).
func parseDocument(data []byte, source string) (*node, []Problem) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, extra yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil
	} else if err != nil {
		return nil, []Problem{syntaxProblem(source, data, err)}
	}
	if err := dec.Decode(&extra); err != nil && !errors.Is(err, io.EOF) {
		return nil, []Problem{syntaxProblem(source, data, err)}
	} else if err == nil {
		return nil, []Problem{{File: source, Line: extra.Line, Msg: "more than one YAML document: a config file holds exactly one",
			Hint: "remove the '---' separator and merge the documents"}}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, []Problem{{File: source, Line: root.Line, Msg: "the document must be a mapping of keys (mode:, signals:, …), got " + kindName(&node{Node: root})}}
	}
	if p := checkAliases(root); p != nil {
		p.File = source
		return nil, []Problem{*p}
	}
	return expand(root, source, map[*yaml.Node]*node{}), nil
}

// expand returns the node tree of n, each anchor expanded once (memo) and
// shared by its aliases.
func expand(n *yaml.Node, file string, memo map[*yaml.Node]*node) *node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if e, ok := memo[n]; ok {
		return e
	}
	e := &node{Node: n, file: file}
	memo[n] = e
	if n.Kind == yaml.SequenceNode {
		for _, c := range n.Content {
			e.vals = append(e.vals, expand(c, file, memo))
		}
	}
	if n.Kind != yaml.MappingNode {
		return e
	}
	e.keys = []*node{}
	explicit, merged := map[string]bool{}, map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		explicit[n.Content[i].Value] = !isMergeKey(n.Content[i])
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := expand(n.Content[i], file, memo), expand(n.Content[i+1], file, memo)
		if !isMergeKey(k.Node) {
			e.add(k, v)
			continue
		}
		items := []*node{v}
		if v.Kind == yaml.SequenceNode {
			items = v.vals
		}
		for _, m := range items {
			for j, mk := range m.keys {
				if mk.Kind == yaml.ScalarNode && !explicit[mk.Value] && !merged[mk.Value] {
					merged[mk.Value] = true
					e.add(mk, m.vals[j])
				}
			}
		}
	}
	return e
}

func (n *node) add(k, v *node) { n.keys, n.vals = append(n.keys, k), append(n.vals, v) }

// get returns the value of key in mapping n, or nil.
func (n *node) get(key string) *node {
	if n != nil {
		for i, k := range n.keys {
			if k.Value == key {
				return n.vals[i]
			}
		}
	}
	return nil
}

// isMergeKey reports whether k is YAML's merge key: a plain `<<`, which
// go-yaml tags !!merge (a quoted "<<" is an ordinary key).
func isMergeKey(k *yaml.Node) bool {
	for k.Kind == yaml.AliasNode {
		k = k.Alias
	}
	return k.Kind == yaml.ScalarNode && k.Tag == "!!merge"
}

// maxAliasNodes bounds how many nodes aliases may expand to in one
// document: anchors nested ten deep, each aliased ten times, are ten billion
// nodes ("billion laughs"), which would exhaust memory in a merge or a walk.
// Real configs repeat a few small blocks. go-yaml's own limit applies only
// inside its Decode, without a line, and stops at the first unrelated
// error, so it cannot vouch for a whole document.
const maxAliasNodes = 100000

// checkAliases returns the first problem with the aliases of the document
// at root, or nil: an alias inside the node it refers to, a merge key whose
// value is not a mapping or a list of mappings, or aliases that expand to
// more than maxAliasNodes nodes, placed at the alias whose expansion crosses
// the bound. Sizes are memoized, so the check is linear in the document.
func checkAliases(root *yaml.Node) *Problem {
	size, active := map[*yaml.Node]int{}, map[*yaml.Node]bool{}
	var problem *Problem
	fail := func(n *yaml.Node, msg, hint string) {
		if problem == nil {
			problem = &Problem{Line: n.Line, Msg: msg, Hint: hint}
		}
	}
	var expanded func(n *yaml.Node) int // nodes n stands for, capped
	expanded = func(n *yaml.Node) int {
		if s, ok := size[n]; ok || problem != nil {
			return s
		}
		if n.Kind == yaml.AliasNode {
			if active[n.Alias] {
				fail(n, fmt.Sprintf("alias *%s refers to a node that contains it", n.Value), "an anchor cannot include itself")
				return 0
			}
			return expanded(n.Alias)
		}
		active[n] = true
		s := 1
		for i, c := range n.Content {
			if n.Kind == yaml.MappingNode && i%2 == 0 && i+1 < len(n.Content) && isMergeKey(c) {
				if m := notMergeable(n.Content[i+1]); m != nil {
					fail(n.Content[i+1], "<< merges mappings only, got "+kindName(&node{Node: m}), "write <<: *anchor, where the anchor is a mapping")
				}
			}
			s = min(s+expanded(c), 1<<40)
		}
		delete(active, n)
		size[n] = s
		return s
	}
	// Only what aliases add counts, as the outermost aliases of the written
	// tree are met in document order.
	total := 0
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if problem != nil {
			return
		}
		if n.Kind == yaml.AliasNode {
			if total += expanded(n.Alias); total > maxAliasNodes {
				fail(n, fmt.Sprintf("aliases expand to more than %d nodes", maxAliasNodes), "write the repeated blocks out, or nest fewer aliases")
			}
			return
		}
		expanded(n) // finds cycles and merge keys in what is written once
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(root)
	return problem
}

// notMergeable returns the value a merge key cannot merge (v itself, or an
// item of a list), or nil when v is a mapping or a list of mappings.
func notMergeable(v *yaml.Node) *yaml.Node {
	for v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	items := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		items = v.Content
	}
	for _, m := range items {
		for m.Kind == yaml.AliasNode {
			m = m.Alias
		}
		if m.Kind != yaml.MappingNode {
			return m
		}
	}
	return nil
}

// syntaxProblem turns a go-yaml error into a Problem. go-yaml reports
// parser errors at the start of the enclosing block, which points at the
// wrong line; the first line at which a prefix of the document fails with
// the same message is where the mistake is, found by a binary search in
// log₂(lines) parses (a linear scan took seconds for 2,000 lines).
func syntaxProblem(source string, data []byte, err error) Problem {
	msg := yamlPrefix.ReplaceAllString(err.Error(), "")
	p := Problem{File: source, Msg: "yaml syntax: " + msg}
	lines := bytes.SplitAfter(data, []byte("\n"))
	fails := func(n int) bool {
		var doc yaml.Node
		perr := yaml.Unmarshal(bytes.Join(lines[:n], nil), &doc)
		return perr != nil && yamlPrefix.ReplaceAllString(perr.Error(), "") == msg
	}
	if lo, hi := 0, len(lines); fails(hi) {
		for hi-lo > 1 { // lo does not fail so, hi does
			if mid := (lo + hi) / 2; fails(mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		p.Line = hi
	} else if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
	}
	if p.Line >= 1 && p.Line <= len(lines) {
		// go-yaml says only "found character that cannot start any token".
		line := lines[p.Line-1]
		if bytes.IndexByte(line[:len(line)-len(bytes.TrimLeft(line, " \t"))], '\t') >= 0 {
			p.Hint = "the line is indented with a tab: YAML indents with spaces only"
		}
	}
	return p
}

// yamlPrefix matches go-yaml's "yaml: line N: " prefix, which Problem
// renders itself.
var yamlPrefix, yamlLine = regexp.MustCompile(`^yaml: (line \d+: )?`), regexp.MustCompile(`line (\d+)`)

// isNull reports whether n is an empty value (`key:`, `~`, `null`).
func isNull(n *node) bool { return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") }

// kindName describes a node for "must be X, got Y" messages.
func kindName(n *node) string {
	switch {
	case isNull(n):
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

// merge applies patch onto base as a merge patch (RFC 7386 semantics on
// YAML): two mappings merge key by key; a null deletes the key; any other
// value replaces the base's. Neither input is modified; the result shares
// nodes with them, so that files and lines still apply.
func merge(base, patch *node) *node {
	if patch == nil {
		return base
	}
	if patch.Kind != yaml.MappingNode || base == nil || base.Kind != yaml.MappingNode {
		return dropNulls(patch)
	}
	out := &node{Node: base.Node, file: base.file, keys: []*node{}}
	seen := map[string]bool{}
	for i, k := range base.keys {
		pv := patch.get(k.Value)
		seen[k.Value] = pv != nil
		switch {
		case pv == nil:
			out.add(k, base.vals[i])
		case !isNull(pv):
			out.add(k, merge(base.vals[i], pv))
		}
	}
	for i, k := range patch.keys {
		if !seen[k.Value] && !isNull(patch.vals[i]) {
			seen[k.Value] = true
			out.add(k, dropNulls(patch.vals[i]))
		}
	}
	return out
}

// dropNulls returns n without the null-valued keys of its mappings (a merge
// patch's deletions have nothing to delete in new subtrees).
func dropNulls(n *node) *node {
	if n.Kind != yaml.MappingNode {
		return n
	}
	out := &node{Node: n.Node, file: n.file, keys: []*node{}}
	for i, k := range n.keys {
		if !isNull(n.vals[i]) {
			out.add(k, dropNulls(n.vals[i]))
		}
	}
	return out
}
