package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Node is a document node with its aliases followed and its merge keys
// (`<<: *defaults`) expanded: the yaml.Node as written (kind, tag, value,
// line), the file it came from, and a mapping's pairs or a list's items.
// Merged pairs follow the YAML merge rules: keys written in the mapping win
// over merged ones, and the first merged mapping to give a key wins; they
// keep the lines where they are written.
type Node struct {
	*yaml.Node
	File       string  // the document's source
	Keys, Vals []*Node // a mapping's pairs (Keys nil for a list), or a list's items
}

// Parse parses one YAML (or JSON) document from source. It returns the
// root mapping, nil for an empty document, and the syntax problems: YAML
// syntax (at the line of the mistake), more than one document, a document
// that is not a mapping (its message names the example keys, e.g. "mode:,
// signals:, …"), aliases that cannot be expanded.
func Parse(data []byte, source, example string) (*Node, []Problem) {
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
		return nil, []Problem{{File: source, Line: root.Line, Msg: "the document must be a mapping of keys (" + example + "), got " + KindName(&Node{Node: root})}}
	}
	x := expander{memo: map[*yaml.Node]*Node{}, size: map[*Node]int{}, file: source}
	if e := x.expand(root); x.problem == nil {
		return e, nil
	}
	x.problem.File = source
	return nil, []Problem{*x.problem}
}

// maxAliasNodes bounds how many nodes aliases may expand to in one
// document: anchors nested ten deep, each aliased ten times, are ten billion
// nodes ("billion laughs"), which a decoder or a merge would walk. Real configs repeat a few small blocks. go-yaml's own limit applies
// only inside its Decode, without a line, and stops at the first unrelated
// error, so it cannot vouch for a whole document.
const maxAliasNodes = 100000

// expander builds the node tree of one document: each anchor expanded once
// (memo) and shared by its aliases, whose expanded sizes are added up in
// document order (total), so that the first alias crossing maxAliasNodes is
// the one named. problem is the first alias that cannot be expanded: one
// inside its own anchor, a merge key whose value is not a mapping or a list
// of mappings, or that bound.
type expander struct {
	memo    map[*yaml.Node]*Node
	size    map[*Node]int // expanded nodes under each, capped; absent while expanding
	file    string
	total   int
	problem *Problem
}

func (x *expander) fail(n *yaml.Node, msg, hint string) {
	if x.problem == nil {
		x.problem = &Problem{Line: n.Line, Msg: msg, Hint: hint}
	}
}

func (x *expander) expand(n *yaml.Node) *Node {
	if n.Kind == yaml.AliasNode {
		e := x.expand(n.Alias)
		if s, done := x.size[e]; !done {
			x.fail(n, fmt.Sprintf("alias *%s refers to a node that contains it", n.Value), "an anchor cannot include itself")
		} else if x.total += s; x.total > maxAliasNodes {
			x.fail(n, fmt.Sprintf("aliases expand to more than %d nodes", maxAliasNodes), "write the repeated blocks out, or nest fewer aliases")
		}
		return e
	}
	if e, ok := x.memo[n]; ok {
		return e
	}
	e := &Node{Node: n, File: x.file}
	x.memo[n] = e
	size, explicit, merged := 1, map[string]bool{}, map[string]bool{}
	var kids []*Node
	for i, c := range n.Content {
		if x.problem != nil {
			return e
		}
		k := x.expand(c)
		size = min(size+x.size[k], 1<<40)
		kids = append(kids, k)
		if n.Kind == yaml.MappingNode && i%2 == 0 {
			explicit[k.Value] = explicit[k.Value] || !isMergeKey(k)
		}
	}
	x.size[e] = size
	if n.Kind != yaml.MappingNode {
		e.Vals = kids
		return e
	}
	e.Keys = []*Node{}
	for i := 0; i+1 < len(kids); i += 2 {
		k, v := kids[i], kids[i+1]
		if !isMergeKey(k) {
			e.Add(k, v)
			continue
		}
		items := []*Node{v}
		if v.Kind == yaml.SequenceNode {
			items = v.Vals
		}
		for _, m := range items {
			if m.Kind != yaml.MappingNode {
				x.fail(n.Content[i+1], "<< merges mappings only, got "+KindName(m), "write <<: *anchor, where the anchor is a mapping")
				return e
			}
			for j, mk := range m.Keys { // the first merged mapping to give a key wins
				if mk.Kind == yaml.ScalarNode && !explicit[mk.Value] && !merged[mk.Value] {
					merged[mk.Value] = true
					e.Add(mk, m.Vals[j])
				}
			}
		}
	}
	return e
}

// Add appends the pair k: v to mapping n.
func (n *Node) Add(k, v *Node) { n.Keys, n.Vals = append(n.Keys, k), append(n.Vals, v) }

// Get returns the value of key in mapping n, or nil.
func (n *Node) Get(key string) *Node {
	if n != nil {
		for i, k := range n.Keys {
			if k.Value == key {
				return n.Vals[i]
			}
		}
	}
	return nil
}

// isMergeKey reports whether k is YAML's merge key: a plain `<<`, which
// go-yaml tags !!merge (a quoted "<<" is an ordinary key).
func isMergeKey(k *Node) bool { return k.Kind == yaml.ScalarNode && k.Tag == "!!merge" }

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

// IsNull reports whether n is an empty value (`key:`, `~`, `null`).
func IsNull(n *Node) bool { return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") }

// KindName describes a node for "must be X, got Y" messages.
func KindName(n *Node) string {
	switch {
	case IsNull(n):
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

// Merge applies patch onto base as a merge patch (RFC 7386 on YAML, with
// one difference): two mappings merge key by key, and any other value
// replaces the base's; a null puts back under's value at its place, and
// deletes the key where under has none. under is the layer beneath the
// patches (the config file's document), so a null undoes what earlier
// patches set there instead of deleting the file's setting too; RFC 7386's
// deletion is Merge with a nil under. No input is modified; the result
// shares nodes with them, so that files and lines still apply.
func Merge(base, patch, under *Node) *Node {
	switch {
	case patch == nil:
		return base
	case IsNull(patch):
		return under
	case patch.Kind != yaml.MappingNode:
		return patch
	}
	if base == nil || base.Kind != yaml.MappingNode {
		base = &Node{Node: patch.Node, File: patch.File, Keys: []*Node{}}
	}
	if under != nil && under.Kind != yaml.MappingNode {
		under = nil
	}
	out := &Node{Node: base.Node, File: base.File, Keys: []*Node{}}
	seen := map[string]bool{}
	for i, k := range base.Keys {
		seen[k.Value] = true
		v := base.Vals[i]
		if pv := patch.Get(k.Value); pv != nil {
			v = Merge(v, pv, under.Get(k.Value))
		}
		if v != nil {
			out.Add(k, v)
		}
	}
	for i, k := range patch.Keys {
		if seen[k.Value] {
			continue
		}
		seen[k.Value] = true
		if v := Merge(nil, patch.Vals[i], under.Get(k.Value)); v != nil {
			out.Add(k, v)
		}
	}
	return out
}

// Null is a key whose value is null (`key:`, `~`, `null`): its field path
// and the key's node.
type Null struct {
	Field string
	Key   *Node
}

// DropNulls returns n without the null-valued keys of its mappings, at any
// depth (list entries included; a null entry of a list stays, for the
// decoder to refuse), and the keys it dropped: a document that writes a key
// without a value says no more than one that leaves it out.
func DropNulls(n *Node, path string) (*Node, []Null) {
	if n == nil {
		return nil, nil
	}
	var nulls []Null
	switch n.Kind {
	case yaml.MappingNode:
		out := &Node{Node: n.Node, File: n.File, Keys: []*Node{}}
		written := map[string]int{}
		for _, k := range n.Keys {
			written[k.Value]++
		}
		for i, k := range n.Keys {
			field := Join(path, k.Value)
			if IsNull(n.Vals[i]) && written[k.Value] == 1 { // a key written twice stays, for the decoder to refuse
				nulls = append(nulls, Null{Field: field, Key: k})
				continue
			}
			v, sub := DropNulls(n.Vals[i], field)
			out.Add(k, v)
			nulls = append(nulls, sub...)
		}
		return out, nulls
	case yaml.SequenceNode:
		out := &Node{Node: n.Node, File: n.File, Vals: make([]*Node, len(n.Vals))}
		for i, v := range n.Vals {
			var sub []Null
			out.Vals[i], sub = DropNulls(v, fmt.Sprintf("%s[%d]", path, i))
			nulls = append(nulls, sub...)
		}
		return out, nulls
	}
	return n, nil
}

// Duplicates reports every key written twice in one mapping of n, at any
// depth, as Decoder.Mapping does for a whole document: Merge keeps the
// first, so a merge patch would drop the other without a word.
func Duplicates(n *Node, path string) []Problem {
	if n == nil {
		return nil
	}
	var out []Problem
	if n.Kind == yaml.SequenceNode {
		for i, v := range n.Vals {
			out = append(out, Duplicates(v, fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	seen := map[string]int{}
	for i, k := range n.Keys {
		field := Join(path, k.Value)
		if line, dup := seen[k.Value]; dup && k.Kind == yaml.ScalarNode {
			out = append(out, Problem{File: k.File, Line: k.Line, Field: field,
				Msg: fmt.Sprintf("duplicate key (first at line %d)", line), Hint: "remove one of them"})
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, Duplicates(n.Vals[i], field)...)
	}
	return out
}
