package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/ranges"
	"github.com/olcd/olcd/internal/spell"
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

// MaxConfigBytes is the largest config file Load reads (4 MiB): far above
// any real config, even one with thousands of exception prefixes.
const MaxConfigBytes = 4 << 20

// ReadFile returns the content of the config file at path (symlinks
// followed). It never blocks on what is not a config: a FIFO would wait for
// a writer for ever, a device may never end, a directory has no content, so
// anything but a regular file is refused, checked before the open and again
// on the open file (opened with O_NONBLOCK, in case a FIFO took the
// file's place in between). Errors: the path cannot be read, is not a
// regular file, or is larger than MaxConfigBytes.
func ReadFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if err := regularFile(path, fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if err := regularFile(path, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("read config %s: larger than %d bytes: not a config file", path, MaxConfigBytes)
	}
	return data, nil
}

// ErrNotRegular is wrapped by ReadFile's error for a path that is not a
// regular file.
var ErrNotRegular = errors.New("not a regular file")

// regularFile refuses what is not a regular file, naming what it is.
func regularFile(path string, fi os.FileInfo) error {
	m := fi.Mode()
	if m.IsRegular() {
		return nil
	}
	what := "a special file"
	switch {
	case m.IsDir():
		what = "a directory"
	case m&os.ModeNamedPipe != 0:
		what = "a FIFO (named pipe)"
	case m&os.ModeSocket != 0:
		what = "a socket"
	case m&os.ModeCharDevice != 0:
		what = "a character device"
	case m&os.ModeDevice != 0:
		what = "a block device"
	}
	return fmt.Errorf("read config %s: %s, %w: not a config file", path, what, ErrNotRegular)
}

// Parse decodes and validates a config document; source names it in
// problems (a path, or "" for the embedded default). Keys absent from the
// document keep their defaults; a `signals` section replaces the default
// signal list as a whole. A document without any setting (no bytes, white
// space or comments only) is refused unless source is "": an empty config
// file is a mistake (a truncated or unfinished write, `: > olcd.yaml`) far
// more often than a request for every default, which `{}` states. The error
// is a *ValidationError.
func Parse(data []byte, source string) (*Config, []Warning, error) {
	origins := map[*yaml.Node]string{}
	name := source
	if name == "" {
		name = "embedded default"
	}
	if source != "" && len(bytes.TrimSpace(data)) == 0 {
		// Before YAML, which refuses a tab as white space.
		return nil, nil, &ValidationError{Problems: []Problem{emptyProblem(source, data)}}
	}
	root, probs := parseDocument(data, name, origins)
	if len(probs) > 0 {
		return nil, nil, &ValidationError{Problems: probs}
	}
	if root == nil && source != "" {
		return nil, nil, &ValidationError{Problems: []Problem{emptyProblem(source, data)}}
	}
	return decodeDocument(root, origins, source, name)
}

// Patch applies a partial document (YAML or JSON, e.g. just
// `signals: {cpu_busy: {threshold: 0.7}}`) onto c and validates the result
// exactly like a file: mappings merge key by key, a null deletes a key (back
// to its default), lists and scalars replace. A patch without any setting
// (empty, comments only, null or {}) is refused. Problems in the patch name
// source and the patch's lines. c is not modified.
func (c *Config) Patch(doc []byte, source string) (*Config, []Warning, error) {
	if source == "" {
		source = "patch"
	}
	origins := make(map[*yaml.Node]string, len(c.origins)+16)
	for n, s := range c.origins {
		origins[n] = s
	}
	root, probs := parseDocument(doc, source, origins)
	if len(probs) > 0 {
		return nil, nil, &ValidationError{Problems: probs}
	}
	if len(pairs(root)) == 0 {
		// Nothing, white space, comments, null or {}: it would be listed
		// as a live override in force while changing nothing (an empty
		// stdin to `olcd set patch -`, a client sending no body).
		return nil, nil, &ValidationError{Problems: []Problem{{File: source,
			Msg:  "the patch holds no setting: it would change nothing",
			Hint: "write the settings to change, e.g. {mode: off}; a null resets one: {controller: {ki: null}}"}}}
	}
	base := c.doc
	if root != nil && mapGet(root, "signals") != nil && mapGet(base, "signals") == nil {
		// The running signals are the defaults, which the document does not
		// spell out: materialise them so the patch changes one signal
		// instead of replacing the list.
		base = withSignals(base, c.Thresholds, origins)
	}
	name := c.Source
	if name == "" {
		name = "embedded default"
	}
	merged := merge(base, root, origins)
	return decodeDocument(merged, reachable(merged, origins), c.Source, name)
}

// reachable returns the origins of the nodes of doc only. Each patch copies
// its base's origins; without pruning, the nodes of every earlier patch
// (long replaced) would be carried along, and a daemon that is patched
// every minute would grow and copy that map for ever.
func reachable(doc *yaml.Node, origins map[*yaml.Node]string) map[*yaml.Node]string {
	out := map[*yaml.Node]string{}
	visited := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil || visited[n] {
			return
		}
		visited[n] = true
		// A mapping merge created has no origin; the decoder's fallback
		// (the config's own file) names it.
		if src, ok := origins[n]; ok {
			out[n] = src
		}
		for _, c := range n.Content {
			walk(c)
		}
		walk(n.Alias)
	}
	walk(doc)
	return out
}

// withSignals returns base with a `signals` mapping holding thresholds.
func withSignals(base *yaml.Node, th [olc.NumSignals]float64, origins map[*yaml.Node]string) *yaml.Node {
	sigs := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for s, v := range th {
		if v <= 0 {
			continue
		}
		inner := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "threshold"},
			{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(v, 'g', -1, 64)},
		}}
		sigs.Content = append(sigs.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: olc.Signal(s).String()}, inner)
	}
	record(sigs, "default", origins)
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if base != nil {
		cp := *resolve(base)
		out = &cp
		out.Content = nil
		for _, kv := range pairs(base) {
			out.Content = append(out.Content, kv[0], kv[1])
		}
	}
	out.Content = append(out.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "signals"}, sigs)
	return out
}

// decodeDocument decodes root onto the defaults and validates the result.
func decodeDocument(root *yaml.Node, origins map[*yaml.Node]string, source, name string) (*Config, []Warning, error) {
	d := newDecoder(origins, name)
	doc := defaultDocument()
	if root != nil {
		d.fields(root, reflect.ValueOf(doc).Elem(), "")
	}
	d.thresholdSet = doc.Signals.set
	cfg := doc.config(source)
	d.validate(cfg)
	if len(d.problems) > 0 {
		sortProblems(d.problems)
		return nil, nil, &ValidationError{Problems: d.problems}
	}
	warnings := d.warn(cfg)
	cfg.doc, cfg.origins = root, origins
	return cfg, warnings, nil
}

// decoder walks one document, collecting problems instead of stopping.
type decoder struct {
	origins  map[*yaml.Node]string
	fallback string
	problems []Problem
	warnings []Warning
	// pos maps every field path seen to its value node, for the positions
	// of the typed checks in validate.
	pos map[string]*yaml.Node
	// thresholdSet marks the signals the document gives a threshold
	// (signalsSection.set).
	thresholdSet [olc.NumSignals]bool
	// failed marks the fields that did not decode, so that validate skips
	// the cross-checks that would only repeat the mistake.
	failed map[string]bool
	// entries maps a list's path to the paths of its decoded entries,
	// parallel to the typed list (an entry that failed to decode is missing
	// from both).
	entries map[string][]string
}

// newDecoder returns a decoder for a document whose nodes came from
// origins; fallback names the source of nodes without one.
func newDecoder(origins map[*yaml.Node]string, fallback string) *decoder {
	return &decoder{origins: origins, fallback: fallback, pos: map[string]*yaml.Node{}, failed: map[string]bool{}, entries: map[string][]string{}}
}

// file returns the source n came from.
func (d *decoder) file(n *yaml.Node) string {
	if s, ok := d.origins[n]; ok {
		return s
	}
	return d.fallback
}

// add records a problem at node n.
func (d *decoder) add(n *yaml.Node, field, msg, hint string) {
	p := Problem{File: d.fallback, Field: field, Msg: msg, Hint: hint}
	d.failed[field] = true
	if n != nil {
		p.File, p.Line = d.file(n), n.Line
	}
	d.problems = append(d.problems, p)
}

// at returns the node recorded for field, or for its closest recorded
// parent ("ports[2].port" → "ports[2]" → "ports").
func (d *decoder) at(field string) *yaml.Node {
	for f := field; f != ""; {
		if n, ok := d.pos[f]; ok {
			return n
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return nil
}

// addAt records a problem at the node of field.
func (d *decoder) addAt(field, msg, hint string) { d.add(d.at(field), field, msg, hint) }

// warnAt records a warning at the node of field.
func (d *decoder) warnAt(field, msg string) {
	w := Warning{File: d.fallback, Field: field, Msg: msg}
	if n := d.at(field); n != nil {
		w.File, w.Line = d.file(n), n.Line
	}
	d.warnings = append(d.warnings, w)
}

// join builds a field path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapping walks a mapping node, reporting a node of another kind, duplicate
// keys and unknown keys (with the closest known one), and calls fn for each
// known key. A null node is an empty mapping.
func (d *decoder) mapping(n *yaml.Node, path string, keys []string, fn func(key string, v *yaml.Node, field string)) bool {
	n = resolve(n)
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.MappingNode {
		d.add(n, path, "must be a mapping (key: value), got "+kindName(n), "")
		return false
	}
	seen := map[string]int{}
	for _, kv := range pairs(n) {
		k, v := kv[0], kv[1]
		if k.Kind != yaml.ScalarNode {
			d.add(k, path, "keys must be plain names, got "+kindName(k), "")
			continue
		}
		field := join(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.add(k, field, fmt.Sprintf("duplicate key (first at line %d)", line), "remove one of them")
			continue
		}
		seen[k.Value] = k.Line
		if keys != nil && !contains(keys, k.Value) {
			hint := ""
			if s := closest(k.Value, keys); s != "" {
				hint = fmt.Sprintf("did you mean %q?", s)
			} else {
				hint = "known keys: " + strings.Join(keys, ", ")
			}
			d.add(k, field, "unknown key", hint)
			continue
		}
		d.pos[field] = v
		fn(k.Value, v, field)
	}
	return true
}

// seq walks a list node; a null node is an empty list. fn decodes one
// item and reports whether it did; entries records the paths of those
// that did.
func (d *decoder) seq(n *yaml.Node, path string, fn func(item *yaml.Node, field string) bool) bool {
	n = resolve(n)
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		d.add(n, path, "must be a list, got "+kindName(n), "write [a, b] or one '- item' per line")
		return false
	}
	ok := true
	for i, item := range n.Content {
		field := fmt.Sprintf("%s[%d]", path, i)
		item = resolve(item)
		d.pos[field] = item
		if fn(item, field) {
			d.entries[path] = append(d.entries[path], field)
		} else {
			ok = false
		}
	}
	return ok
}

// entryPath returns the field path of entry i of the decoded list at
// path, or path[i] when the config was not decoded from a document.
func (d *decoder) entryPath(path string, i int) string {
	if paths := d.entries[path]; i < len(paths) {
		return paths[i]
	}
	return fmt.Sprintf("%s[%d]", path, i)
}

// str returns a scalar's text; null is "".
func (d *decoder) str(n *yaml.Node, field string) (string, bool) {
	n = resolve(n)
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		d.add(n, field, "must be a string, got "+kindName(n), "")
		return "", false
	}
	return n.Value, true
}

// enum returns a scalar that must be one of values.
func (d *decoder) enum(n *yaml.Node, field string, values []string) (string, bool) {
	s, ok := d.str(n, field)
	if !ok {
		return "", false
	}
	if !contains(values, s) {
		hint := "want " + orList(values)
		if c := suggest(s, values); c != "" && c != s {
			hint = fmt.Sprintf("did you mean %q? want %s", c, orList(values))
		}
		d.add(n, field, fmt.Sprintf("unknown value %q", s), hint)
		return "", false
	}
	return s, true
}

// switchWords are the words people use for a switch. As a mode they are
// ambiguous, and the edit distance would suggest "off" for "on".
var switchWords = map[string]string{
	"on": "enforce", "yes": "enforce", "true": "enforce", "enable": "enforce", "enabled": "enforce", "1": "enforce",
	"no": "off", "false": "off", "disable": "off", "disabled": "off", "none": "off", "0": "off",
}

// suggest returns the value of values that s most plausibly means: the same
// word in other letter case ("TCP"), the mode a switch word stands for
// ("on" → enforce), or the closest by edit distance.
func suggest(s string, values []string) string {
	for _, v := range values {
		if strings.EqualFold(s, v) {
			return v
		}
	}
	if m, ok := switchWords[strings.ToLower(s)]; ok && contains(values, m) {
		return m
	}
	return closest(s, values)
}

// number returns a numeric scalar.
func (d *decoder) number(n *yaml.Node, field string) (float64, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err == nil {
			return v, true
		}
		if i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
			return float64(i), true
		}
		if n.Tag == "!!float" {
			switch strings.ToLower(n.Value) {
			case ".nan":
				return math.NaN(), true
			case ".inf", "+.inf":
				return math.Inf(1), true
			case "-.inf":
				return math.Inf(-1), true
			}
		}
	}
	hint := quotedNumberHint(n)
	if n.Kind == yaml.ScalarNode && strings.HasSuffix(strings.TrimSpace(n.Value), "%") {
		if v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(n.Value), "%"), 64); err == nil {
			hint = fmt.Sprintf("fractions are written 0..1: did you mean %g?", v/100)
		}
	}
	if n.Kind == yaml.ScalarNode && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
		// go-yaml reads 1e400 as text: it is a number, too large for one.
		if _, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64); errors.Is(err, strconv.ErrRange) {
			d.add(n, field, fmt.Sprintf("%s is beyond the range of a number (about ±1.8e308)", n.Value), "")
			return 0, false
		}
	}
	d.add(n, field, "must be a number, got "+kindName(n), hint)
	return 0, false
}

// quotedNumberHint explains a number written as a string ("0.5", '80'): the
// quotes make YAML read text.
func quotedNumberHint(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
		return ""
	}
	if _, err := strconv.ParseFloat(strings.TrimSpace(n.Value), 64); err != nil {
		return ""
	}
	return fmt.Sprintf("remove the quotes: write %s", strings.TrimSpace(n.Value))
}

// integer returns an integer scalar within [lo, hi]; hint explains the
// range when the number is outside it.
func (d *decoder) integer(n *yaml.Node, field string, lo, hi int64, hint string) (int64, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!float" && wholeNumber.MatchString(n.Value) {
		// Digits beyond int64, which YAML resolves as a float.
		d.add(n, field, fmt.Sprintf("%s is out of range: must be %d..%d", n.Value, lo, hi), hint)
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.add(n, field, "must be a whole number, got "+kindName(n), quotedNumberHint(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v < lo || v > hi {
		d.add(n, field, fmt.Sprintf("%s is out of range: must be %d..%d", n.Value, lo, hi), hint)
		return 0, false
	}
	return v, true
}

// wholeNumber matches a decimal integer as written in YAML.
var wholeNumber = regexp.MustCompile(`^[-+]?[0-9][0-9_]*$`)

// duration returns a duration scalar such as "500ms" or "2s".
func (d *decoder) duration(n *yaml.Node, field string) (time.Duration, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		d.add(n, field, fmt.Sprintf("duration %s has no unit", n.Value), fmt.Sprintf("write e.g. %sms or %ss", n.Value, n.Value))
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		d.add(n, field, "must be a duration such as 500ms or 2s, got "+kindName(n), "")
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		d.add(n, field, fmt.Sprintf("%q is not a duration", n.Value), "write e.g. 500ms, 2s or 1m")
		return 0, false
	}
	return v, true
}

// boolean returns a true/false scalar.
func (d *decoder) boolean(n *yaml.Node, field string) (bool, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	d.add(n, field, "must be true or false, got "+kindName(n), "")
	return false, false
}

// leaf is a value that decodes itself from one node, with its own shape
// checks and messages (a port list, a response target); it reports whether
// it decoded.
type leaf interface {
	decodeYAML(d *decoder, n *yaml.Node, field string) bool
}

// scalars decode the named types the document holds that are not this
// package's to give methods (the shared vocabulary, netip, time).
var scalars = map[reflect.Type]func(d *decoder, n *yaml.Node, field string) (any, bool){
	reflect.TypeFor[time.Duration](): func(d *decoder, n *yaml.Node, f string) (any, bool) {
		dur, ok := d.duration(n, f)
		return dur, ok
	},
	reflect.TypeFor[netip.Prefix](): func(d *decoder, n *yaml.Node, f string) (any, bool) {
		s, ok := d.str(n, f)
		if !ok {
			return nil, false
		}
		p, ok := d.prefix(n, f, s)
		return p, ok
	},
	reflect.TypeFor[olc.Mode]():       enumOf(olc.ModeNames(), olc.ParseMode),
	reflect.TypeFor[olc.AttachMode](): enumOf(spell.Names(olc.AttachModes()), olc.ParseAttachMode),
	reflect.TypeFor[olc.Action]():     enumOf(olc.ActionNames(), olc.ParseAction),
	reflect.TypeFor[olc.Proto]():      enumOf([]string{"tcp", "udp"}, olc.ParseProto),
	reflect.TypeFor[olc.Class]():      enumOf(olc.ClassNames(), olc.ParseClass),
}

// enumOf decodes one of words (olc's names for T) into a T.
func enumOf[T any](words []string, parse func(string) (T, error)) func(d *decoder, n *yaml.Node, field string) (any, bool) {
	return func(d *decoder, n *yaml.Node, f string) (any, bool) {
		s, ok := d.enum(n, f, words)
		if !ok {
			return nil, false
		}
		x, err := parse(s)
		return x, err == nil
	}
}

// value decodes n into v, the value of field (sf its struct field: tags
// `range` and `enum` apply), and reports whether it did; a value that did
// not keeps what it held (the default).
func (d *decoder) value(n *yaml.Node, v reflect.Value, field string, sf reflect.StructField) bool {
	n = resolve(n)
	if l, ok := v.Addr().Interface().(leaf); ok {
		return l.decodeYAML(d, n, field)
	}
	if dec, ok := scalars[v.Type()]; ok {
		x, ok := dec(d, n, field)
		if ok {
			v.Set(reflect.ValueOf(x))
		}
		return ok
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if !d.value(n, p.Elem(), field, sf) {
			return false
		}
		v.Set(p)
		return true
	case reflect.Struct:
		return d.fields(n, v, field)
	case reflect.Slice:
		v.SetZero()
		return d.seq(n, field, func(item *yaml.Node, f string) bool {
			e := reflect.New(v.Type().Elem()).Elem()
			if !d.value(item, e, f, sf) {
				return false
			}
			v.Set(reflect.Append(v, e))
			return true
		})
	case reflect.String:
		s, ok := "", false
		if words, has := sf.Tag.Lookup("enum"); has {
			s, ok = d.enum(n, field, strings.Split(words, ","))
		} else {
			s, ok = d.str(n, field)
		}
		if ok {
			v.SetString(s)
		}
		return ok
	case reflect.Bool:
		b, ok := d.boolean(n, field)
		if ok {
			v.SetBool(b)
		}
		return ok
	case reflect.Float64:
		x, ok := d.number(n, field)
		if ok {
			v.SetFloat(x)
		}
		return ok
	case reflect.Int, reflect.Int64:
		lo, hi, hint := integerRange(sf, math.MinInt64, math.MaxInt64)
		i, ok := d.integer(n, field, lo, hi, hint)
		if ok {
			v.SetInt(i)
		}
		return ok
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		lo, hi, hint := integerRange(sf, 0, int64(1)<<(8*v.Type().Size())-1)
		i, ok := d.integer(n, field, lo, hi, hint)
		if ok {
			v.SetUint(uint64(i))
		}
		return ok
	}
	panic("rules: cannot decode into " + v.Type().String())
}

// integerRange returns the range sf declares (and its hint), or lo..hi.
func integerRange(sf reflect.StructField, lo, hi int64) (int64, int64, string) {
	if r, ok := ranges.Of(sf); ok {
		return int64(r.Lo), int64(r.Hi), r.Hint
	}
	return lo, hi, ""
}

// fields decodes mapping n onto the struct v strictly: a key that is not one
// of its fields' yaml tags is a problem. It reports whether every key
// decoded.
func (d *decoder) fields(n *yaml.Node, v reflect.Value, path string) bool {
	s := schemaOf(v.Type())
	ok := true
	if !d.mapping(n, path, s.keys, func(key string, vn *yaml.Node, field string) {
		sf := s.fields[key]
		if !d.value(vn, v.FieldByIndex(sf.Index), field, sf) {
			ok = false
		}
	}) {
		ok = false
	}
	return ok
}

// schema lists a struct type's keys: its fields' yaml tags, those of
// `,inline` fields included, in declaration order.
type schema struct {
	keys   []string
	fields map[string]reflect.StructField
}

var schemas sync.Map // reflect.Type → *schema

func schemaOf(t reflect.Type) *schema {
	if s, ok := schemas.Load(t); ok {
		return s.(*schema)
	}
	s := &schema{keys: []string{}, fields: map[string]reflect.StructField{}}
	for _, f := range reflect.VisibleFields(t) {
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || opts == "inline" || !f.IsExported() {
			continue
		}
		s.keys = append(s.keys, name)
		s.fields[name] = f
	}
	schemas.Store(t, s)
	return s
}

// portShorthandHint answers a bare port number in a port list
// (`ports: [8080]`): every entry is a mapping, so that a protocol can be
// given.
func portShorthandHint(item *yaml.Node) string {
	if item.Kind == yaml.ScalarNode && item.Tag == "!!int" {
		return fmt.Sprintf("write {port: %s}, or {port: %s, proto: udp}", item.Value, item.Value)
	}
	return ""
}

// prefix parses a CIDR prefix, or a bare address as a host prefix.
func (d *decoder) prefix(n *yaml.Node, field, s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if addr, zoned, ok := strings.Cut(s, "%"); ok {
		// An IPv6 zone (fe80::1%eth0) names an interface; a prefix cannot
		// hold one, and dropping it silently would exempt the address on
		// every interface.
		zone, bits, hasBits := strings.Cut(zoned, "/")
		if hasBits {
			addr += "/" + bits
		}
		d.add(n, field, fmt.Sprintf("%q has an interface zone %%%s: exceptions apply on every interface", s, zone),
			fmt.Sprintf("write %s", addr))
		return netip.Prefix{}, false
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			d.add(n, field, fmt.Sprintf("%q is not an address or CIDR prefix", s), "write e.g. 10.0.0.0/8, 192.0.2.1 or 2001:db8::/32")
			return netip.Prefix{}, false
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		d.add(n, field, fmt.Sprintf("%q is not a CIDR prefix", s), "write e.g. 10.0.0.0/8 (IPv4 lengths 0..32, IPv6 0..128)")
		return netip.Prefix{}, false
	}
	if m := p.Masked(); m != p {
		d.add(n, field, fmt.Sprintf("%s has bits set beyond the prefix length", s), fmt.Sprintf("did you mean %s?", m))
		return netip.Prefix{}, false
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, true
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// orList renders "a, b or c".
func orList(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// closest returns the candidate nearest to s by edit distance, when it is
// close enough to be a plausible typo.
func closest(s string, candidates []string) string {
	if c := spell.Closest(s, candidates); c != "" {
		return c
	}
	// A truncated name ("min_pass" for "min_pass_rate") is far in edit
	// distance but still the obvious intent.
	for _, c := range candidates {
		if len(s) >= 3 && strings.HasPrefix(c, s) {
			return c
		}
	}
	return ""
}
