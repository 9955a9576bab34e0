package rules

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/regfile"
	sy "github.com/olcd/olcd/internal/strictyaml"
)

// Load reads and validates the config file at path. The error is a
// *ValidationError listing every problem when the file is invalid (an empty
// file is: see Parse), or a wrapped I/O error when it cannot be read (see
// ReadFile). Warnings list valid but surprising settings.
func Load(path string) (*Config, []Warning, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return Parse(data, path)
}

// example names a few keys in the message for a document that is not a
// mapping.
const example = "mode:, signals:, …"

// MaxConfigBytes is the largest config file Load reads (4 MiB): far above
// any real config, even one with thousands of exception prefixes.
const MaxConfigBytes = 4 << 20

// ReadFile returns the content of the config file at path (symlinks
// followed), refusing without blocking what is not a regular file (a FIFO
// waits for a writer for ever) and what is larger than MaxConfigBytes (see
// regfile.Read).
func ReadFile(path string) ([]byte, error) { return regfile.Read(path, "config", MaxConfigBytes) }

// ErrNotRegular is wrapped by ReadFile's error for a path that is not a
// regular file.
var ErrNotRegular = regfile.ErrNotRegular

// Parse decodes and validates a config document; source names it in
// problems (a path, or "" for the embedded default). Keys absent from the
// document keep their defaults; a `signals` section lists the signals used
// (a default signal it leaves out is off, and a warning says so). A
// document without any setting (no bytes, white space or comments only) is
// refused unless source is "": an empty config file is a truncated or
// unfinished write far more often than a request for every default, which
// `{}` states. The error is a *ValidationError.
func Parse(data []byte, source string) (*Config, []Warning, error) {
	name := sourceName(source)
	if source != "" && len(bytes.TrimSpace(data)) == 0 {
		// Before YAML, which refuses a tab as white space.
		return nil, nil, &ValidationError{Problems: []Problem{emptyProblem(source, data)}}
	}
	root, probs := sy.Parse(data, name, example)
	if len(probs) > 0 {
		return nil, nil, &ValidationError{Problems: probs}
	}
	if root == nil && source != "" {
		return nil, nil, &ValidationError{Problems: []Problem{emptyProblem(source, data)}}
	}
	pre := nullKeyProblems(root, true)
	root, nulls := sy.DropNulls(root, "")
	cfg, warns, err := decodeDocument(root, source, pre)
	if err != nil {
		return nil, nil, err
	}
	cfg.file = root
	return cfg, append(nullWarnings(nulls), warns...), nil
}

// nullWarnings warns of each key a file writes without a value (`key:`,
// `~`, `null`) that is not a section: it means the key's default, as if it
// were left out, which is not an empty list or string (a patch's null
// likewise puts back the file's value). A section without keys (every key
// commented out) is the common way to say "defaults" and is not warned of.
func nullWarnings(nulls []sy.Null) []Warning {
	var out []Warning
	for _, n := range nulls {
		if isSection(n.Field) {
			continue
		}
		out = append(out, Warning{File: n.Key.File, Line: n.Key.Line, Field: n.Field,
			Msg: "no value (null): its default applies, as if the key were left out (write [] for an empty list, \"\" for an empty string, or remove the key)"})
	}
	return out
}

// isSection reports whether field is a mapping of keys of the schema
// (controller, lb.agent), not a value.
func isSection(field string) bool {
	s := codec.Schema(reflect.TypeFor[Config]())
	for _, key := range strings.Split(field, ".") {
		if s = s.Subs[key]; s == nil {
			return false
		}
	}
	return true
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

// Patch applies a partial document (YAML or JSON, e.g. just
// `signals: {cpu_busy: {threshold: 0.7}}`) onto c and validates the result
// exactly like a File: mappings merge key by key, lists and scalars
// replace, and a null undoes the live patches of its key: the key is back
// to the config file's value, or to its default where the file does not
// set it (as a null in the file means the default). A patch's `signals` change the
// running list (a signal is removed with `off`). A patch without any
// setting (empty, comments only, null or {}) is refused. Problems in the
// patch name source and the patch's lines. c is not modified.
func (c *Config) Patch(doc []byte, source string) (*Config, []Warning, error) {
	if source == "" {
		source = "patch"
	}
	root, probs := sy.Parse(doc, source, example)
	if len(probs) == 0 {
		probs = sy.Duplicates(root, "")
	}
	if len(probs) > 0 {
		return nil, nil, &ValidationError{Problems: probs}
	}
	if root == nil || len(root.Keys) == 0 {
		// It would be listed as a live override while changing nothing (an
		// empty stdin to `olcd set patch -`, a client sending no body).
		return nil, nil, &ValidationError{Problems: []Problem{{File: source,
			Msg:  "the patch holds no setting: it would change nothing",
			Hint: "write the settings to change, e.g. {mode: off}; a null puts back the file's value: {controller: {ki: null}}"}}}
	}
	base := c.doc
	if root.Get("signals") != nil && base.Get("signals") == nil {
		// The running signals are the defaults, which the document does not
		// spell out: written out, the patch changes one signal instead of
		// replacing the list.
		base = withSignals(base, c.Thresholds)
	}
	cfg, warns, err := decodeDocument(sy.Merge(base, root, c.file), c.Source, nullKeyProblems(root, false))
	if err != nil {
		return nil, nil, err
	}
	cfg.file = c.file
	return cfg, warns, nil
}

// withSignals returns base with a `signals` mapping holding thresholds.
func withSignals(base *sy.Node, th Thresholds) *sy.Node {
	scalar := func(tag, v string) *sy.Node {
		return &sy.Node{Node: &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}, File: "default"}
	}
	sigs := &sy.Node{Node: &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, File: "default", Keys: []*sy.Node{}}
	for s, v := range th {
		if v > 0 {
			inner := &sy.Node{Node: sigs.Node, File: "default"}
			inner.Add(scalar("!!str", "threshold"), scalar("!!float", fmt.Sprint(v)))
			sigs.Add(scalar("!!str", olc.Signal(s).String()), inner)
		}
	}
	out := &sy.Node{Node: &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, File: "default", Keys: []*sy.Node{}}
	if base != nil {
		out = &sy.Node{Node: base.Node, File: base.File, Keys: slices.Clone(base.Keys), Vals: slices.Clone(base.Vals)}
	}
	out.Add(scalar("!!str", "signals"), sigs)
	return out
}

// PatchPaths returns the field paths a patch document sets, as
// "controller.ki" or "ports" (a list, like any value that is not a
// mapping, is set whole; a null deletes the subtree at its path; an empty
// mapping sets nothing), sorted. The daemon keeps one live override per
// path: a later patch that sets every path of an earlier one replaces it.
// An empty document sets none. Errors: a *ValidationError for a document
// that is not YAML or not a mapping.
func PatchPaths(doc []byte) ([]string, error) {
	root, probs := sy.Parse(doc, "patch", example)
	if len(probs) > 0 {
		return nil, &ValidationError{Problems: probs}
	}
	var out []string
	var walk func(n *sy.Node, path string)
	walk = func(n *sy.Node, path string) {
		if sy.IsNull(n) || n.Kind != yaml.MappingNode {
			out = append(out, path)
			return
		}
		for i, k := range n.Keys {
			walk(n.Vals[i], sy.Join(path, k.Value))
		}
	}
	if root != nil {
		walk(root, "")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// PatchResetsOnly reports whether every value a patch document writes is a
// null: it only puts keys back to the file's values (Patch). That is not
// always what runs without it: where the file leaves the signals out, the
// running signals are the defaults, and a null deletes one. A caller drops
// such a patch from its live overrides only when the file and the other
// overrides give the same config (Digest). False for a document PatchPaths
// cannot read, or one that sets nothing.
func PatchResetsOnly(doc []byte) bool {
	root, probs := sy.Parse(doc, "patch", example)
	if len(probs) > 0 || root == nil || len(root.Keys) == 0 {
		return false
	}
	_, nulls := sy.DropNulls(root, "")
	paths, _ := PatchPaths(doc)
	return len(nulls) == len(paths)
}

// Covers reports whether setting the field path outer also sets inner:
// they are equal, or inner lies in the subtree at outer.
func Covers(outer, inner string) bool {
	return outer == inner || (len(inner) > len(outer) && inner[:len(outer)] == outer && inner[len(outer)] == '.')
}
