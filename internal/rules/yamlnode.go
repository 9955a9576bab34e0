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
	if p := checkAliases(root); p != nil {
		p.File = source
		return nil, []Problem{*p}
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
// nodes ("billion laughs"), which would exhaust memory while decoding or
// merging a patch. Real configs repeat a few small blocks.
//
// go-yaml limits aliasing only inside its own Decode (decoder.unmarshal,
// about 400,000 alias-driven nodes, without a line), and that walk stops at
// the first unrelated error (a list as a mapping key), so it cannot vouch for
// a whole document; the decoder, merge and PatchPaths walk the node tree
// themselves, so the bound is checked here, once, before any of them.
const maxAliasNodes = 100000

// checkAliases returns the first problem with the aliases of the document
// at root, or nil: an alias inside the node it refers to (go-yaml parses it;
// following it never ends), a merge key (`<<`) whose value is not a mapping
// or a list of mappings, or aliases that expand to more than maxAliasNodes
// nodes, placed at the alias whose expansion crosses the bound. Sizes are
// memoized, so the check is linear in the written document.
func checkAliases(root *yaml.Node) *Problem {
	size := map[*yaml.Node]int{}
	active := map[*yaml.Node]bool{}
	var problem *Problem
	// expanded returns the number of nodes n stands for once its aliases
	// are followed (capped, so that deep nesting cannot overflow).
	var expanded func(n *yaml.Node) int
	expanded = func(n *yaml.Node) int {
		if s, ok := size[n]; ok || problem != nil {
			return s
		}
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			if active[n.Alias] {
				problem = &Problem{Line: n.Line, Msg: fmt.Sprintf("alias *%s refers to a node that contains it", n.Value),
					Hint: "an anchor cannot include itself"}
				return 0
			}
			return expanded(n.Alias)
		}
		active[n] = true
		s := 1
		for i, c := range n.Content {
			if n.Kind == yaml.MappingNode && i%2 == 0 && i+1 < len(n.Content) && isMergeKey(resolve(c)) {
				if m := notMergeable(n.Content[i+1]); m != nil && problem == nil {
					problem = &Problem{Line: n.Content[i+1].Line, Msg: "<< merges mappings only, got " + kindName(m),
						Hint: "write <<: *anchor, where the anchor is a mapping"}
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
			if n.Alias == nil {
				return
			}
			if total += expanded(n.Alias); total > maxAliasNodes && problem == nil {
				problem = &Problem{Line: n.Line, Msg: fmt.Sprintf("aliases expand to more than %d nodes", maxAliasNodes),
					Hint: "write the repeated blocks out, or nest fewer aliases"}
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
	v = resolve(v)
	items := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		items = v.Content
	}
	for _, m := range items {
		if m = resolve(m); m.Kind != yaml.MappingNode {
			return m
		}
	}
	return nil
}

// pairs returns the key/value pairs of mapping n, aliases resolved, with
// its merge keys (`<<: *defaults`) replaced by the pairs they merge: keys
// written in the mapping win over merged ones, and among merged mappings
// the first to give a key wins (the YAML merge key rules). Merged values
// keep the lines where they are written. checkAliases has refused what
// cannot be merged.
func pairs(n *yaml.Node) [][2]*yaml.Node {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	written, merges := make([][2]*yaml.Node, 0, len(n.Content)/2), false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		written = append(written, [2]*yaml.Node{k, resolve(n.Content[i+1])})
		merges = merges || isMergeKey(k)
	}
	if !merges {
		return written
	}
	explicit := map[string]bool{}
	for _, kv := range written {
		if !isMergeKey(kv[0]) && kv[0].Kind == yaml.ScalarNode {
			explicit[kv[0].Value] = true
		}
	}
	out := make([][2]*yaml.Node, 0, len(written))
	merged := map[string]bool{}
	for _, kv := range written {
		if !isMergeKey(kv[0]) {
			out = append(out, kv)
			continue
		}
		items := []*yaml.Node{kv[1]}
		if kv[1].Kind == yaml.SequenceNode {
			items = kv[1].Content
		}
		for _, m := range items {
			for _, mkv := range pairs(m) {
				if mkv[0].Kind != yaml.ScalarNode || explicit[mkv[0].Value] || merged[mkv[0].Value] {
					continue
				}
				merged[mkv[0].Value] = true
				out = append(out, mkv)
			}
		}
	}
	return out
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
		return withTabHint(p, lines)
	}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
	}
	return withTabHint(p, lines)
}

// withTabHint adds the likely fix to a syntax problem on a line indented
// with a tab (an editor's default, pasted from a Makefile): go-yaml says
// only "found character that cannot start any token".
func withTabHint(p Problem, lines [][]byte) Problem {
	if p.Line < 1 || p.Line > len(lines) {
		return p
	}
	line := lines[p.Line-1]
	indent := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]
	if bytes.IndexByte(indent, '\t') >= 0 {
		p.Hint = "the line is indented with a tab: YAML indents with spaces only"
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

// mapGet returns the value of key in mapping m (merge keys included), or
// nil.
func mapGet(m *yaml.Node, key string) *yaml.Node {
	for _, kv := range pairs(m) {
		if kv[0].Value == key {
			return kv[1]
		}
	}
	return nil
}

// merge applies patch onto base as a merge patch (RFC 7386 semantics on
// YAML): two mappings merge key by key; a null value in patch deletes the
// key; any other value replaces the base's. Neither input is modified; the
// result shares leaf nodes with them so that origins and lines still apply.
// The mappings it builds hold their merge keys' pairs written out.
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
	patched := map[string]*yaml.Node{}
	for _, kv := range pairs(patch) {
		if _, dup := patched[kv[0].Value]; !dup {
			patched[kv[0].Value] = kv[1]
		}
	}
	seen := map[string]bool{}
	for _, kv := range pairs(base) {
		k, v := kv[0], kv[1]
		pv := patched[k.Value]
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
	for _, kv := range pairs(patch) {
		k, v := kv[0], kv[1]
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
	for _, kv := range pairs(n) {
		if isNull(kv[1]) {
			continue
		}
		out.Content = append(out.Content, kv[0], dropNulls(kv[1], origins))
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
