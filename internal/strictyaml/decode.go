package strictyaml

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/ranges"
	"github.com/olcd/olcd/internal/spell"
)

// DecodeFunc decodes n, the value of field (sf its struct field, whose tags
// apply), into v, a value of one of the caller's types; it reports its
// problems on d and whether it decoded. A value that did not decode keeps
// what it held (the default), unless the type says otherwise.
type DecodeFunc func(d *Decoder, n *Node, v reflect.Value, field string, sf reflect.StructField) bool

// Scalar makes a DecodeFunc of a parser that returns the value: v is set
// when it decoded.
func Scalar[T any](parse func(d *Decoder, n *Node, field string, sf reflect.StructField) (T, bool)) DecodeFunc {
	return func(d *Decoder, n *Node, v reflect.Value, field string, sf reflect.StructField) bool {
		x, ok := parse(d, n, field, sf)
		if ok {
			v.Set(reflect.ValueOf(x).Convert(v.Type()))
		}
		return ok
	}
}

// Codec is the caller's types: the DecodeFunc of each type with a shape of
// its own (a struct among them is a value, not a mapping of keys), the
// synonyms an enum's hint maps a word to ("on" → "enforce"), and the
// schemas read from the struct tags.
type Codec struct {
	types    map[reflect.Type]DecodeFunc
	synonyms map[string]string
	schemas  sync.Map // reflect.Type → *Schema
}

// NewCodec returns a Codec for types and synonyms; neither may change
// afterwards.
func NewCodec(types map[reflect.Type]DecodeFunc, synonyms map[string]string) *Codec {
	return &Codec{types: types, synonyms: synonyms}
}

// Decoder walks documents onto one value, collecting problems instead of
// stopping, and keeps the position of every field path it saw (At).
type Decoder struct {
	codec    *Codec
	fallback string // the source of what the documents do not spell out
	// Problems and Warnings are what Add, AddAt and WarnAt recorded.
	Problems, Warnings []Problem
	// Data is the caller's own state for its DecodeFuncs.
	Data any
	// Retired, when set, names the keys of an earlier schema that are
	// refused with a hint naming what replaced them.
	Retired func(field string) (hint string, ok bool)
	pos     map[string]*Node    // field path → its value's node
	failed  map[string]bool     // the fields that did not decode
	entries map[string][]string // a list's path → its decoded entries' paths
}

// NewDecoder returns a decoder whose problems name fallback for what no
// document spells out (a default).
func (c *Codec) NewDecoder(fallback string) *Decoder {
	return &Decoder{codec: c, fallback: fallback, pos: map[string]*Node{}, failed: map[string]bool{}, entries: map[string][]string{}}
}

// Add records a problem at n (nil: the document as a whole) and marks field
// failed.
func (d *Decoder) Add(n *Node, field, msg, hint string) {
	d.failed[field] = true
	d.Problems = append(d.Problems, d.problemAt(n, field, msg, hint))
}

// SetHint replaces the hint of the last problem recorded.
func (d *Decoder) SetHint(hint string) { d.Problems[len(d.Problems)-1].Hint = hint }

func (d *Decoder) problemAt(n *Node, field, msg, hint string) Problem {
	if n == nil {
		return Problem{File: d.fallback, Field: field, Msg: msg, Hint: hint}
	}
	return Problem{File: n.File, Line: n.Line, Field: field, Msg: msg, Hint: hint}
}

// At returns the node recorded for field, or for its closest recorded
// parent ("ports[2].port" → "ports[2]" → "ports"); nil for none.
func (d *Decoder) At(field string) *Node {
	for f := field; ; {
		if n, ok := d.pos[f]; ok {
			return n
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			return nil
		}
		f = f[:i]
	}
}

// AddAt records a problem at the node of field.
func (d *Decoder) AddAt(field, msg, hint string) { d.Add(d.At(field), field, msg, hint) }

// WarnAt records a warning at the node of field.
func (d *Decoder) WarnAt(field, msg string) {
	d.Warnings = append(d.Warnings, d.problemAt(d.At(field), field, msg, ""))
}

// Failed reports whether field did not decode.
func (d *Decoder) Failed(field string) bool { return d.failed[field] }

// Given reports whether a document sets field.
func (d *Decoder) Given(field string) bool { _, ok := d.pos[field]; return ok }

// EntryPath returns the field path of entry i of the decoded list at path,
// or path[i] when the value was not decoded from a document.
func (d *Decoder) EntryPath(path string, i int) string {
	if paths := d.entries[path]; i < len(paths) {
		return paths[i]
	}
	return fmt.Sprintf("%s[%d]", path, i)
}

// Where renders the position of field for a problem reported at from:
// "line 12" when both come from the same document, "patch:1" when they do
// not (a bare line number would name the wrong file).
func (d *Decoder) Where(field, from string) string {
	n := d.At(field)
	if n == nil {
		return "line 0"
	}
	if f := d.At(from); f == nil || f.File != n.File {
		return fmt.Sprintf("%s:%d", n.File, n.Line)
	}
	return fmt.Sprintf("line %d", n.Line)
}

// Join builds a field path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Mapping walks a mapping node, reporting a node of another kind, duplicate
// keys and unknown keys (with the closest known one; keys nil accepts any),
// and calls fn for each known key. A null node is an empty mapping.
func (d *Decoder) Mapping(n *Node, path string, keys []string, fn func(key string, v *Node, field string)) bool {
	if IsNull(n) {
		return true
	}
	if n.Kind != yaml.MappingNode {
		d.Add(n, path, "must be a mapping (key: value), got "+KindName(n), "")
		return false
	}
	seen := map[string]int{}
	for i, k := range n.Keys {
		if k.Kind != yaml.ScalarNode {
			d.Add(k, path, "keys must be plain names, got "+KindName(k), "")
			continue
		}
		field := Join(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.Add(k, field, fmt.Sprintf("duplicate key (first at line %d)", line), "remove one of them")
			continue
		}
		seen[k.Value] = k.Line
		if !d.Known(k, path, keys) {
			continue
		}
		d.pos[field] = n.Vals[i]
		fn(k.Value, n.Vals[i], field)
	}
	return true
}

// Known reports whether the scalar key k of the mapping at path is one of
// keys (nil accepts any), and records the problem when it is not: a key an
// earlier schema retired (with what replaced it), or an unknown key with the
// closest known one (an invisible character in it is shown). Mapping checks
// each key so; a caller checks here the keys of a document that does not
// reach Mapping (the null-valued keys a file or a patch drops before it).
func (d *Decoder) Known(k *Node, path string, keys []string) bool {
	field := Join(path, k.Value)
	if d.Retired != nil {
		if hint, ok := d.Retired(field); ok {
			d.Add(k, field, "this key was retired", hint)
			return false
		}
	}
	if keys == nil || slices.Contains(keys, k.Value) {
		return true
	}
	hint := "known keys: " + strings.Join(keys, ", ")
	if s := Closest(k.Value, keys); s != "" {
		hint = fmt.Sprintf("did you mean %q?", s)
	}
	shown, msg := field, "unknown key"
	invisible := func(r rune) bool { return !unicode.IsGraphic(r) || (unicode.IsSpace(r) && r != ' ') || r == '\u200b' }
	if strings.IndexFunc(k.Value, invisible) >= 0 {
		// A character that prints as nothing or as a space: show it.
		shown, msg = Join(path, fmt.Sprintf("%q", k.Value)), "unknown key: it holds an invisible or unusual white-space character"
		if s := strings.TrimSpace(strings.Map(func(r rune) rune {
			if invisible(r) {
				return -1
			}
			return r
		}, k.Value)); slices.Contains(keys, s) {
			hint = fmt.Sprintf("did you mean %q?", s)
		}
	}
	d.Add(k, shown, msg, hint)
	return false
}

// List decodes a list node (null is an empty list) into the slice v, each
// item by Value; the items that decoded are kept, with their paths
// (EntryPath).
func (d *Decoder) List(n *Node, v reflect.Value, path string, sf reflect.StructField) bool {
	v.SetZero()
	if IsNull(n) {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		d.Add(n, path, "must be a list, got "+KindName(n), "write [a, b] or one '- item' per line")
		return false
	}
	ok := true
	for i, item := range n.Vals {
		field := fmt.Sprintf("%s[%d]", path, i)
		d.pos[field] = item
		e := reflect.New(v.Type().Elem()).Elem()
		if d.Value(item, e, field, sf) {
			v.Set(reflect.Append(v, e))
			d.entries[path] = append(d.entries[path], field)
		} else {
			ok = false
		}
	}
	return ok
}

// Str returns a scalar's text; null is "".
func (d *Decoder) Str(n *Node, field string) (string, bool) {
	if IsNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		d.Add(n, field, "must be a string, got "+KindName(n), "")
		return "", false
	}
	return n.Value, true
}

// Enum returns a scalar that must be one of values.
func (d *Decoder) Enum(n *Node, field string, values []string) (string, bool) {
	s, ok := d.Str(n, field)
	if ok && !slices.Contains(values, s) {
		hint := "want " + OrList(values)
		if c := d.suggest(s, values); c != "" && c != s {
			hint = fmt.Sprintf("did you mean %q? want %s", c, OrList(values))
		}
		d.Add(n, field, fmt.Sprintf("unknown value %q", s), hint)
		return "", false
	}
	return s, ok
}

// suggest returns the value of values that s most plausibly means: the same
// word in other letter case ("TCP"), the value a synonym stands for, or the
// closest by edit distance (which would suggest "off" for "on").
func (d *Decoder) suggest(s string, values []string) string {
	for _, v := range values {
		if strings.EqualFold(s, v) {
			return v
		}
	}
	if m, ok := d.codec.synonyms[strings.ToLower(s)]; ok && slices.Contains(values, m) {
		return m
	}
	return Closest(s, values)
}

// Number returns a numeric scalar (YAML's own resolution: 1_000, 0x10 and
// -0, read as 0, are numbers); allowed is the field's range as the user
// should read it ("(0, 2]"; "" when none is known). A number that is not
// finite is refused naming the value as written and allowed, however it is
// spelled: YAML's .nan and .inf, Go's NaN, Inf and Infinity in any case,
// and a number beyond float64 (1e309, which go-yaml reads as text); each is
// the same mistake, so each gets the same problem.
func (d *Decoder) Number(n *Node, field, allowed string) (float64, bool) {
	var v float64
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") && n.Decode(&v) == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
		return v + 0, true // + 0: -0 is 0, in the config and in its messages
	}
	if NonFinite(n) {
		msg := fmt.Sprintf("%s is not a finite number", n.Value)
		if allowed != "" {
			msg += ": must be in " + allowed
		}
		d.Add(n, field, msg, "")
		return 0, false
	}
	hint := QuotedNumberHint(n)
	if pct, ok := strings.CutSuffix(strings.TrimSpace(n.Value), "%"); ok && n.Kind == yaml.ScalarNode {
		if v, err := strconv.ParseFloat(pct, 64); err == nil {
			hint = fmt.Sprintf("fractions are written 0..1: did you mean %g?", v/100)
		}
	}
	d.Add(n, field, "must be a number, got "+KindName(n), hint)
	return 0, false
}

// NonFinite reports whether n is an unquoted number that is not finite:
// .nan, .inf and -.inf (YAML), NaN, Inf, +Infinity, … (Go's spellings, any
// case), or a number beyond the range of float64 such as 1e309 or
// 99999…9e999.
func NonFinite(n *Node) bool {
	if n == nil || n.Kind != yaml.ScalarNode || n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		return false
	}
	var v float64
	if (n.Tag == "!!int" || n.Tag == "!!float") && n.Decode(&v) == nil {
		return math.IsNaN(v) || math.IsInf(v, 0)
	}
	if n.Tag != "!!str" {
		return false
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	return errors.Is(err, strconv.ErrRange) && math.IsInf(v, 0) || err == nil && (math.IsNaN(v) || math.IsInf(v, 0))
}

// QuotedNumberHint explains a number written as a string ("0.5", '80'):
// the quotes make YAML read text.
func QuotedNumberHint(n *Node) string {
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
		return ""
	}
	if _, err := strconv.ParseFloat(strings.TrimSpace(n.Value), 64); err != nil {
		return ""
	}
	return fmt.Sprintf("remove the quotes: write %s", strings.TrimSpace(n.Value))
}

// Integer returns an integer scalar within r (or r's off value); noun
// prefixes the message of a number outside it ("port ").
func (d *Decoder) Integer(n *Node, field string, r ranges.Range, noun string) (int64, bool) {
	out := fmt.Sprintf("%s is out of range: must be %s", n.Value, r.IntText())
	if n.Kind == yaml.ScalarNode && n.Tag == "!!float" && wholeNumber.MatchString(n.Value) {
		d.Add(n, field, out, r.Hint) // digits beyond int64, which YAML resolves as a float
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		got := KindName(n)
		switch {
		case NonFinite(n):
			got = n.Value + ", which is not a finite number" // not "the string"
		case n.Kind == yaml.ScalarNode && n.Tag == "!!float":
			got = n.Value
		}
		d.Add(n, field, fmt.Sprintf("must be a whole number in %s, got %s", r.IntText(), got), QuotedNumberHint(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err == nil && !r.Contains(float64(v)) {
		out = noun + out
	}
	if err != nil || !r.Contains(float64(v)) {
		d.Add(n, field, out, r.Hint)
		return 0, false
	}
	return v, true
}

// wholeNumber matches a decimal integer as written in YAML.
var wholeNumber = regexp.MustCompile(`^[-+]?[0-9][0-9_]*$`)

// IsInteger reports whether n is written as a whole number (one beyond
// int64 included, which YAML resolves as a float).
func IsInteger(n *Node) bool {
	return n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float" && wholeNumber.MatchString(n.Value))
}

// Duration returns a duration scalar such as "500ms" or "2s"; a bare 0 is
// 0 in any unit (where 0 turns a setting off).
func (d *Decoder) Duration(n *Node, field string) (time.Duration, bool) {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!int" && n.Value == "0":
		return 0, true
	case NonFinite(n):
		d.Add(n, field, fmt.Sprintf("must be a duration such as 500ms or 2s, got %s, which is not a finite number", n.Value), "")
		return 0, false
	case n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float"):
		d.Add(n, field, fmt.Sprintf("duration %s has no unit", n.Value), fmt.Sprintf("write e.g. %sms or %ss", n.Value, n.Value))
		return 0, false
	case n.Kind != yaml.ScalarNode || n.Tag != "!!str":
		d.Add(n, field, "must be a duration such as 500ms or 2s, got "+KindName(n), "")
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		d.Add(n, field, fmt.Sprintf("%q is not a duration", n.Value), "write e.g. 500ms, 2s or 1m")
	}
	return v, err == nil
}

// Value decodes n into v, the value of field (sf its struct field: tags
// `range`, `enum` and `noun` apply), and reports whether it did; a value
// that did not keeps what it held (the default). The codec's types decode
// themselves; a slice is a list; a struct a mapping of its fields; a
// string, bool, float64 or integer is a
// scalar of that kind (an integer needs a range tag unless it is unsigned).
func (d *Decoder) Value(n *Node, v reflect.Value, field string, sf reflect.StructField) bool {
	if dec, ok := d.codec.types[v.Type()]; ok {
		return dec(d, n, v, field, sf)
	}
	var x any
	ok := false
	switch t := v.Type(); t.Kind() {
	case reflect.Slice:
		return d.List(n, v, field, sf)
	case reflect.Struct:
		return d.Struct(n, v, field) // a list's entries: {prefix: …, rate: …}
	case reflect.String:
		if words, has := sf.Tag.Lookup("enum"); has {
			x, ok = d.Enum(n, field, strings.Split(words, ","))
		} else {
			x, ok = d.Str(n, field)
		}
	case reflect.Bool:
		var b bool
		if ok = n.Kind == yaml.ScalarNode && n.Tag == "!!bool" && n.Decode(&b) == nil; !ok {
			d.Add(n, field, "must be true or false, got "+KindName(n), "")
		}
		x = b
	case reflect.Float64:
		r, _ := ranges.Of(sf)
		x, ok = d.Number(n, field, r.Text)
	default:
		r, has := ranges.Of(sf)
		switch {
		case !has && t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
			r = ranges.Range{Hi: float64(uint64(1)<<(8*t.Size()) - 1)} // fwmark: the type's own bounds
		case !has:
			panic("strictyaml: field " + sf.Name + " needs a range tag")
		}
		noun := sf.Tag.Get("noun")
		if noun != "" {
			noun += " "
		}
		x, ok = d.Integer(n, field, r, noun)
	}
	if ok {
		v.Set(reflect.ValueOf(x).Convert(v.Type()))
	}
	return ok
}

// Struct decodes mapping n onto the struct v strictly by its schema (a key
// that is not in it is a problem), and reports whether every key decoded.
func (d *Decoder) Struct(n *Node, v reflect.Value, path string) bool {
	return d.fields(n, v, path, d.codec.Schema(v.Type()))
}

func (d *Decoder) fields(n *Node, v reflect.Value, path string, s *Schema) bool {
	ok := true
	if !d.Mapping(n, path, s.Keys, func(key string, vn *Node, field string) {
		if sub := s.Subs[key]; sub != nil {
			ok = d.fields(vn, v, field, sub) && ok
			return
		}
		f := s.Fields[key]
		if !d.Value(vn, v.FieldByIndex(f.Index), field, f.StructField) {
			ok = false
		} else if f.Sibling != nil {
			v.FieldByIndex(f.Sibling).SetBool(f.Tag.Get("auto") == "" || (vn.Kind == yaml.ScalarNode && vn.Value == "auto"))
		}
	}) {
		ok = false
	}
	return ok
}

// Schema is a struct type's keys, in declaration order: its fields' yaml
// tags, a dotted tag ("heartbeat.stale_after") or a struct field making a
// nested mapping, an `inline` struct's keys at its own level (where the
// inline field stands).
type Schema struct {
	Keys   []string
	Fields map[string]Field
	Subs   map[string]*Schema
}

// Field is a key's struct field, its Index from the schema's type, and the
// bool that records it was given (`has:"HasAction"`, or for `auto` that
// its value was auto).
type Field struct {
	reflect.StructField
	Sibling []int
}

// Schema returns the schema of struct type t.
func (c *Codec) Schema(t reflect.Type) *Schema {
	if s, ok := c.schemas.Load(t); ok {
		return s.(*Schema)
	}
	s := &Schema{}
	s.build(c, t, nil, nil)
	c.schemas.Store(t, s)
	return s
}

// build adds the keys of struct t, at index in the schema's type; outer
// finds a sibling field (`has`, `auto`) in the struct that inlines t.
func (s *Schema) build(c *Codec, t reflect.Type, index []int, outer func(string) ([]int, bool)) {
	sibling := func(name string) ([]int, bool) {
		if sib, ok := t.FieldByName(name); ok && name != "" {
			return append(slices.Clone(index), sib.Index...), true
		}
		if outer != nil {
			return outer(name)
		}
		return nil, false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		f.Index = append(slices.Clone(index), i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case opts == "inline":
			s.build(c, f.Type, f.Index, sibling)
			continue
		case name == "" || name == "-" || !f.IsExported():
			continue
		}
		target := s
		parts := strings.Split(name, ".")
		for _, p := range parts[:len(parts)-1] {
			target = target.sub(p)
		}
		name = parts[len(parts)-1]
		if _, own := c.types[f.Type]; f.Type.Kind() == reflect.Struct && !own {
			target.sub(name).build(c, f.Type, f.Index, nil)
			continue
		}
		fl := Field{StructField: f}
		for _, tag := range []string{"has", "auto"} {
			if sib, ok := sibling(f.Tag.Get(tag)); ok {
				fl.Sibling = sib
			}
		}
		target.Keys = append(target.Keys, name)
		if target.Fields == nil {
			target.Fields = map[string]Field{}
		}
		target.Fields[name] = fl
	}
}

// sub returns the nested schema at key, made on first use.
func (s *Schema) sub(key string) *Schema {
	if s.Subs == nil {
		s.Subs = map[string]*Schema{}
	}
	if s.Subs[key] == nil {
		s.Subs[key] = &Schema{}
		s.Keys = append(s.Keys, key)
	}
	return s.Subs[key]
}

// OrList renders "a, b or c".
func OrList(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// Closest returns the candidate nearest to s by edit distance, when it is
// close enough to be a plausible typo, or one s begins ("min_pass" for
// "min_pass_rate", far in edit distance but the obvious intent).
func Closest(s string, candidates []string) string {
	if c := spell.Closest(s, candidates); c != "" {
		return c
	}
	for _, c := range candidates {
		if len(s) >= 3 && strings.HasPrefix(c, s) {
			return c
		}
	}
	return ""
}
