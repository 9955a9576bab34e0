package rules

import (
	"slices"

	"go.yaml.in/yaml/v3"
)

// PatchPaths returns the field paths a patch document sets, as
// "controller.ki" or "ports" (a list, like any value that is not a
// mapping, is set whole; a null deletes the subtree at its path; an empty
// mapping sets nothing), sorted.
// The daemon keeps one live override per path: a later patch that sets
// every path of an earlier one replaces it. An empty document sets none.
// Errors: a *ValidationError for a document that is not YAML or not a
// mapping.
func PatchPaths(doc []byte) ([]string, error) {
	root, probs := parseDocument(doc, "patch", map[*yaml.Node]string{})
	if len(probs) > 0 {
		return nil, &ValidationError{Problems: probs}
	}
	var out []string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		n = resolve(n)
		if n == nil || n.Kind != yaml.MappingNode {
			out = append(out, path)
			return
		}
		for _, kv := range pairs(n) {
			walk(kv[1], join(path, kv[0].Value))
		}
	}
	if root != nil {
		walk(root, "")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Covers reports whether setting the field path outer also sets inner:
// they are equal, or inner lies in the subtree at outer.
func Covers(outer, inner string) bool {
	return outer == inner || (len(inner) > len(outer) && inner[:len(outer)] == outer && inner[len(outer)] == '.')
}
