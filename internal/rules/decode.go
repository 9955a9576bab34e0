package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/ranges"
	"github.com/olcd/olcd/internal/spell"
)

// decodeDocument decodes root onto the defaults and validates the result.
func decodeDocument(root *node, source string) (*Config, []Warning, error) {
	d := newDecoder(source)
	cfg := defaults()
	cfg.Source = source
	if root != nil {
		d.fields(root, reflect.ValueOf(cfg).Elem(), "", schemaOf(reflect.TypeFor[Config]()))
	}
	d.validate(cfg)
	if len(d.problems) > 0 {
		slices.SortStableFunc(d.problems, func(a, b Problem) int {
			if a.File != b.File {
				return strings.Compare(a.File, b.File)
			}
			return a.Line - b.Line
		})
		return nil, nil, &ValidationError{Problems: d.problems}
	}
	cfg.doc = root
	return cfg, d.warn(cfg), nil
}

// decoder walks one document, collecting problems instead of stopping.
type decoder struct {
	fallback string // the source of what the document does not spell out
	problems []Problem
	warnings []Warning
	// pos maps every field path seen to its value, for the positions of
	// the typed checks in validate.
	pos map[string]*node
	// set marks the signals the document gives a threshold (validate also
	// checks an explicit 0), named those it gives a threshold or off.
	set, named [olc.NumSignals]bool
	// failed marks the fields that did not decode, so that validate skips
	// the cross-checks that would only repeat the mistake.
	failed map[string]bool
	// entries maps a list's path to the paths of its decoded entries,
	// parallel to the typed list.
	entries map[string][]string
}

func newDecoder(source string) *decoder {
	return &decoder{fallback: sourceName(source), pos: map[string]*node{}, failed: map[string]bool{}, entries: map[string][]string{}}
}

// add records a problem at n (nil: the document as a whole).
func (d *decoder) add(n *node, field, msg, hint string) {
	d.failed[field] = true
	d.problems = append(d.problems, d.problemAt(n, field, msg, hint))
}

func (d *decoder) problemAt(n *node, field, msg, hint string) Problem {
	if n == nil {
		return Problem{File: d.fallback, Field: field, Msg: msg, Hint: hint}
	}
	return Problem{File: n.file, Line: n.Line, Field: field, Msg: msg, Hint: hint}
}

// at returns the node recorded for field, or for its closest recorded
// parent ("ports[2].port" → "ports[2]" → "ports").
func (d *decoder) at(field string) *node {
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

// addAt records a problem at the node of field.
func (d *decoder) addAt(field, msg, hint string) { d.add(d.at(field), field, msg, hint) }

// warnAt records a warning at the node of field.
func (d *decoder) warnAt(field, msg string) {
	d.warnings = append(d.warnings, d.problemAt(d.at(field), field, msg, ""))
}

// join builds a field path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapping walks a mapping node, reporting a node of another kind, duplicate
// keys and unknown keys (with the closest known one; keys nil accepts any),
// and calls fn for each known key. A null node is an empty mapping.
func (d *decoder) mapping(n *node, path string, keys []string, fn func(key string, v *node, field string)) bool {
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.MappingNode {
		d.add(n, path, "must be a mapping (key: value), got "+kindName(n), "")
		return false
	}
	seen := map[string]int{}
	for i, k := range n.keys {
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
		if hint, ok := retiredKey(field); ok {
			d.add(k, field, "this key was retired", hint)
			continue
		}
		if keys != nil && !slices.Contains(keys, k.Value) {
			hint := "known keys: " + strings.Join(keys, ", ")
			if s := closest(k.Value, keys); s != "" {
				hint = fmt.Sprintf("did you mean %q?", s)
			}
			d.add(k, field, "unknown key", hint)
			continue
		}
		d.pos[field] = n.vals[i]
		fn(k.Value, n.vals[i], field)
	}
	return true
}

// seq walks a list node (null is an empty list); fn decodes one item and
// reports whether it did; entries records the paths of those that did.
func (d *decoder) seq(n *node, path string, fn func(item *node, field string) bool) bool {
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		d.add(n, path, "must be a list, got "+kindName(n), "write [a, b] or one '- item' per line")
		return false
	}
	ok := true
	for i, item := range n.vals {
		field := fmt.Sprintf("%s[%d]", path, i)
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
func (d *decoder) str(n *node, field string) (string, bool) {
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
func (d *decoder) enum(n *node, field string, values []string) (string, bool) {
	s, ok := d.str(n, field)
	if ok && !slices.Contains(values, s) {
		hint := "want " + orList(values)
		if c := suggest(s, values); c != "" && c != s {
			hint = fmt.Sprintf("did you mean %q? want %s", c, orList(values))
		}
		d.add(n, field, fmt.Sprintf("unknown value %q", s), hint)
		return "", false
	}
	return s, ok
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
	if m, ok := switchWords[strings.ToLower(s)]; ok && slices.Contains(values, m) {
		return m
	}
	return closest(s, values)
}

// number returns a numeric scalar (YAML's own resolution: 1_000, 0x10,
// .inf and .nan are numbers).
func (d *decoder) number(n *node, field string) (float64, bool) {
	var v float64
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") && n.Decode(&v) == nil {
		return v, true
	}
	hint := quotedNumberHint(n)
	if pct, ok := strings.CutSuffix(strings.TrimSpace(n.Value), "%"); ok && n.Kind == yaml.ScalarNode {
		if v, err := strconv.ParseFloat(pct, 64); err == nil {
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
func quotedNumberHint(n *node) string {
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
		return ""
	}
	if _, err := strconv.ParseFloat(strings.TrimSpace(n.Value), 64); err != nil {
		return ""
	}
	return fmt.Sprintf("remove the quotes: write %s", strings.TrimSpace(n.Value))
}

// integer returns an integer scalar within r (or r's off value); what
// prefixes the message of a number outside it ("port ").
func (d *decoder) integer(n *node, field string, r ranges.Range, what string) (int64, bool) {
	out := fmt.Sprintf("%s is out of range: must be %s", n.Value, r.IntText())
	if n.Kind == yaml.ScalarNode && n.Tag == "!!float" && wholeNumber.MatchString(n.Value) {
		d.add(n, field, out, r.Hint) // digits beyond int64, which YAML resolves as a float
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.add(n, field, "must be a whole number, got "+kindName(n), quotedNumberHint(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err == nil && !r.Contains(float64(v)) {
		out = what + out
	}
	if err != nil || !r.Contains(float64(v)) {
		d.add(n, field, out, r.Hint)
		return 0, false
	}
	return v, true
}

// wholeNumber matches a decimal integer as written in YAML.
var wholeNumber = regexp.MustCompile(`^[-+]?[0-9][0-9_]*$`)

// duration returns a duration scalar such as "500ms" or "2s"; a bare 0 is
// 0 in any unit (where 0 turns a setting off).
func (d *decoder) duration(n *node, field string) (time.Duration, bool) {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!int" && n.Value == "0":
		return 0, true
	case n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float"):
		d.add(n, field, fmt.Sprintf("duration %s has no unit", n.Value), fmt.Sprintf("write e.g. %sms or %ss", n.Value, n.Value))
		return 0, false
	case n.Kind != yaml.ScalarNode || n.Tag != "!!str":
		d.add(n, field, "must be a duration such as 500ms or 2s, got "+kindName(n), "")
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		d.add(n, field, fmt.Sprintf("%q is not a duration", n.Value), "write e.g. 500ms, 2s or 1m")
	}
	return v, err == nil
}

// leaf is a value that decodes itself from one node, with its own shape
// checks and messages; it reports whether it decoded.
type leaf interface {
	decodeYAML(d *decoder, n *node, field string) bool
}

// scalars decode the named types a Config holds that are not this
// package's to give methods (the shared vocabulary, netip, time); sf is the
// field (its tags apply).
var scalars map[reflect.Type]func(d *decoder, n *node, field string, sf reflect.StructField) (any, bool)

func init() { // not a var initializer: portEntry decodes through value, which reads scalars
	scalars = map[reflect.Type]func(d *decoder, n *node, field string, sf reflect.StructField) (any, bool){
		reflect.TypeFor[time.Duration](): func(d *decoder, n *node, f string, _ reflect.StructField) (any, bool) { return d.duration(n, f) },
		reflect.TypeFor[netip.Prefix](): func(d *decoder, n *node, f string, _ reflect.StructField) (any, bool) {
			s, ok := d.str(n, f)
			if !ok {
				return nil, false
			}
			return d.prefix(n, f, s)
		},
		reflect.TypeFor[olc.Mode]():       enumOf(olc.ModeNames(), olc.ParseMode),
		reflect.TypeFor[olc.AttachMode](): enumOf(spell.Names(olc.AttachModes()), olc.ParseAttachMode),
		reflect.TypeFor[olc.Action]():     enumOf(olc.ActionNames(), olc.ParseAction),
		reflect.TypeFor[olc.Proto]():      enumOf([]string{"tcp", "udp"}, olc.ParseProto),
		reflect.TypeFor[olc.Class]():      enumOf(olc.ClassNames(), olc.ParseClass),
		reflect.TypeFor[Port](): func(d *decoder, n *node, f string, _ reflect.StructField) (any, bool) {
			p := Port{Proto: olc.ProtoTCP, Class: olc.ClassNormal}
			ok := d.portEntry(n, f, &p)
			return p, ok
		},
		reflect.TypeFor[olc.PortKey](): func(d *decoder, n *node, f string, _ reflect.StructField) (any, bool) {
			p := portKey{Proto: olc.ProtoTCP}
			ok := d.portEntry(n, f, &p)
			return olc.PortKey{Proto: p.Proto, Port: p.Port}, ok
		},
		reflect.TypeFor[adaptive.ResponseTarget](): func(d *decoder, n *node, f string, _ reflect.StructField) (any, bool) {
			return d.responseTarget(n, f)
		},
	}
}

// enumOf decodes one of words (olc's names for T, or the field's `enum`
// tag) into a T; an `offhint` tag explains why off is not one of them.
func enumOf[T any](words []string, parse func(string) (T, error)) func(*decoder, *node, string, reflect.StructField) (any, bool) {
	return func(d *decoder, n *node, f string, sf reflect.StructField) (any, bool) {
		allowed := words
		if w, ok := sf.Tag.Lookup("enum"); ok {
			allowed = strings.Split(w, ",")
		}
		s, ok := d.enum(n, f, allowed)
		if !ok {
			if h, has := sf.Tag.Lookup("offhint"); has && n.Value == "off" {
				d.problems[len(d.problems)-1].Hint = h
			}
			return nil, false
		}
		x, err := parse(s)
		return x, err == nil
	}
}

// portEntry decodes one entry of a port list into e (a *Port or *portKey,
// its defaults set): a port number, or a mapping with a port. Every port
// list takes both shapes.
func (d *decoder) portEntry(n *node, field string, e any) bool {
	v := reflect.ValueOf(e).Elem()
	sf, _ := v.Type().FieldByName("Port")
	switch {
	case n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float" && wholeNumber.MatchString(n.Value)):
		return d.value(n, v.FieldByIndex(sf.Index), field, sf)
	case n.Kind != yaml.MappingNode:
		ex := map[bool]string{true: "22", false: "443"}[strings.HasPrefix(field, "exceptions")]
		d.add(n, field, fmt.Sprintf("must be a port number such as %s, or {port: %s, proto: tcp}, got %s", ex, ex, kindName(n)), quotedNumberHint(n))
		return false
	}
	ok := d.fields(n, v, field, schemaOf(v.Type()))
	if _, has := d.pos[join(field, "port")]; !has {
		d.add(n, join(field, "port"), "missing", "every entry needs a port number")
		ok = false
	}
	return ok
}

// value decodes n into v, the value of field (sf its struct field: tags
// `range` and `enum` apply), and reports whether it did; a value that did
// not keeps what it held (the default).
func (d *decoder) value(n *node, v reflect.Value, field string, sf reflect.StructField) bool {
	if l, ok := v.Addr().Interface().(leaf); ok {
		return l.decodeYAML(d, n, field)
	}
	if v.Kind() == reflect.Slice {
		v.SetZero()
		if sf.Tag.Get("auto") != "" && n.Kind == yaml.ScalarNode && !isNull(n) {
			if n.Value != "auto" {
				d.add(n, field, "must be auto or a list of ports, got "+kindName(n), "write ports: auto, or ports: [{port: 443, proto: tcp}]")
			}
			return n.Value == "auto"
		}
		return d.seq(n, field, func(item *node, f string) bool {
			e := reflect.New(v.Type().Elem()).Elem()
			ok := d.value(item, e, f, sf)
			if ok {
				v.Set(reflect.Append(v, e))
			}
			return ok
		})
	}
	x, ok := d.scalar(n, v.Type(), field, sf)
	if ok {
		v.Set(reflect.ValueOf(x).Convert(v.Type()))
	}
	return ok
}

// scalar decodes n as a value of type t.
func (d *decoder) scalar(n *node, t reflect.Type, field string, sf reflect.StructField) (any, bool) {
	if dec, ok := scalars[t]; ok {
		return dec(d, n, field, sf)
	}
	switch t.Kind() {
	case reflect.String:
		if words, has := sf.Tag.Lookup("enum"); has {
			return d.enum(n, field, strings.Split(words, ","))
		}
		return d.str(n, field)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
			d.add(n, field, "must be true or false, got "+kindName(n), "")
			return nil, false
		}
		return b, true
	case reflect.Float64:
		return d.number(n, field)
	}
	r, ok := ranges.Of(sf)
	switch {
	case !ok && t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		r = ranges.Range{Hi: float64(uint64(1)<<(8*t.Size()) - 1)} // fwmark: the type's own bounds
	case !ok:
		panic("rules: field " + sf.Name + " needs a range tag")
	}
	return d.integer(n, field, r, map[bool]string{true: "port "}[t.Kind() == reflect.Uint16])
}

// fields decodes mapping n onto the struct v strictly by schema s (a key
// that is not in it is a problem), and reports whether every known key
// decoded.
func (d *decoder) fields(n *node, v reflect.Value, path string, s *schema) bool {
	ok := true
	if !d.mapping(n, path, s.keys, func(key string, vn *node, field string) {
		if sub := s.subs[key]; sub != nil {
			ok = d.fields(vn, v, field, sub) && ok
			return
		}
		f := s.fields[key]
		if !d.value(vn, v.FieldByIndex(f.Index), field, f.StructField) {
			ok = false
		} else if f.sibling != nil {
			v.FieldByIndex(f.sibling).SetBool(f.Tag.Get("auto") == "" || (vn.Kind == yaml.ScalarNode && vn.Value == "auto"))
		}
	}) {
		ok = false
	}
	return ok
}

// schema is a struct type's keys, in declaration order: its fields' yaml
// tags, a dotted tag ("heartbeat.stale_after") or a struct field making a
// nested mapping, an `inline` struct's keys at its own level.
type schema struct {
	keys   []string
	fields map[string]field
	subs   map[string]*schema
}

// field is a key's struct field, its Index from the schema's type, and the
// bool that records it was given (`has:"HasAction"`, or for `auto` that
// its value was auto).
type field struct {
	reflect.StructField
	sibling []int
}

var schemas sync.Map // reflect.Type → *schema

func schemaOf(t reflect.Type) *schema {
	if s, ok := schemas.Load(t); ok {
		return s.(*schema)
	}
	s := &schema{}
	s.build(t, nil)
	schemas.Store(t, s)
	return s
}

func (s *schema) build(t reflect.Type, index []int) {
	for i := range t.NumField() {
		f := t.Field(i)
		f.Index = append(slices.Clone(index), i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case opts == "inline":
			s.build(f.Type, f.Index)
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
		if _, isScalar := scalars[f.Type]; f.Type.Kind() == reflect.Struct && !isScalar {
			target.sub(name).build(f.Type, f.Index)
			continue
		}
		fl := field{StructField: f}
		for _, tag := range []string{"has", "auto"} {
			if sib, ok := t.FieldByName(f.Tag.Get(tag)); ok && f.Tag.Get(tag) != "" {
				fl.sibling = append(slices.Clone(index), sib.Index...)
			}
		}
		target.keys = append(target.keys, name)
		if target.fields == nil {
			target.fields = map[string]field{}
		}
		target.fields[name] = fl
	}
}

// sub returns the nested schema at key, made on first use.
func (s *schema) sub(key string) *schema {
	if s.subs == nil {
		s.subs = map[string]*schema{}
	}
	if s.subs[key] == nil {
		s.subs[key] = &schema{}
		s.keys = append(s.keys, key)
	}
	return s.subs[key]
}

// decodeYAML decodes `signals`: each signal's {threshold: x}, or off. A
// section lists the signals used: it starts from none.
func (t *Thresholds) decodeYAML(d *decoder, n *node, path string) bool {
	*t = Thresholds{}
	return d.mapping(n, path, nil, func(name string, v *node, field string) {
		sig, err := olc.ParseSignal(name)
		if err != nil {
			hint := "see docs/config.md for the canonical names"
			if c := spell.Closest(name, spell.Names(olc.Signals())); c != "" {
				hint = fmt.Sprintf("did you mean %q?", c)
			}
			d.add(v, field, fmt.Sprintf("unknown signal %q", name), hint)
			return
		}
		if v.Kind == yaml.ScalarNode && v.Value == "off" {
			d.named[sig] = true
			return
		}
		if isNull(v) || v.Kind != yaml.MappingNode {
			d.add(v, field, "must be a mapping with a threshold, or off, got "+kindName(v), fmt.Sprintf("write %s: {threshold: …}, or %s: off", name, name))
			return
		}
		found := false
		d.mapping(v, field, []string{"threshold"}, func(_ string, tv *node, f string) {
			found = true
			x, ok := 0.0, false
			switch {
			case sig.Unit() == olc.UnitSeconds && tv.Kind == yaml.ScalarNode && tv.Tag == "!!str":
				var dur time.Duration
				dur, ok = d.duration(tv, f) // seconds may be written as a duration: 50ms
				x = dur.Seconds()
			case sig == olc.ResponseTimeP50 || sig == olc.ResponseTimeP95 || sig == olc.ResponseTimeP99:
				// A bare number is seconds; beyond any response time olcd
				// acts on, 50 is most likely 50 ms.
				if x, ok = d.number(tv, f); ok && x > adaptive.MaxResponseTarget {
					d.add(tv, f, fmt.Sprintf("threshold %g s is above %g s: a bare number is seconds", x, adaptive.MaxResponseTarget), fmt.Sprintf("did you mean %gms?", x))
					ok = false
				}
			default:
				x, ok = d.number(tv, f)
			}
			if ok {
				t[sig], d.set[sig], d.named[sig] = x, true, true
			}
		})
		if !found {
			d.add(v, join(field, "threshold"), "missing", fmt.Sprintf("write %s: {threshold: …}, or remove the signal", name))
		}
	})
}

// responseTarget decodes a response-time target: auto, off, a duration
// (50ms) or seconds (0.05), in (0, 30s].
func (d *decoder) responseTarget(n *node, field string) (adaptive.ResponseTarget, bool) {
	const hint = "write auto, off, or a duration such as 50ms"
	var x float64
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		switch n.Value {
		case "auto":
			return adaptive.ResponseTarget{Auto: true}, true
		case "off":
			return adaptive.ResponseTarget{}, true
		}
		dur, good := d.duration(n, field)
		if !good {
			d.problems[len(d.problems)-1].Hint = hint
			return adaptive.ResponseTarget{}, false
		}
		x = dur.Seconds()
	} else if v, ok := d.number(n, field); ok {
		x = v
	} else {
		return adaptive.ResponseTarget{}, false
	}
	if !(x > 0 && x <= adaptive.MaxResponseTarget) {
		h := hint
		if n.Tag != "!!str" && x > adaptive.MaxResponseTarget && x/1000 <= adaptive.MaxResponseTarget {
			h = fmt.Sprintf("a bare number is seconds: did you mean %gms?", x) // 50 is most likely 50 ms
		}
		d.add(n, field, fmt.Sprintf("response target %v s is out of range: must be in (0, 30s]", x), h)
		return adaptive.ResponseTarget{}, false
	}
	return adaptive.ResponseTarget{Seconds: x}, true
}

// prefix parses a CIDR prefix, or a bare address as a host prefix.
func (d *decoder) prefix(n *node, field, s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if addr, zoned, ok := strings.Cut(s, "%"); ok {
		// An IPv6 zone names an interface; a prefix cannot hold one, and
		// dropping it would exempt the address on every interface.
		zone, bits, hasBits := strings.Cut(zoned, "/")
		if hasBits {
			addr += "/" + bits
		}
		d.add(n, field, fmt.Sprintf("%q has an interface zone %%%s: exceptions apply on every interface", s, zone), "write "+addr)
		return netip.Prefix{}, false
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			d.add(n, field, fmt.Sprintf("%q is not an address or CIDR prefix", s), "write e.g. 10.0.0.0/8, 192.0.2.1 or 2001:db8::/32")
			return netip.Prefix{}, false
		}
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), true
	}
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		d.add(n, field, fmt.Sprintf("%q is not a CIDR prefix", s), "write e.g. 10.0.0.0/8 (IPv4 lengths 0..32, IPv6 0..128)")
		return netip.Prefix{}, false
	case p.Masked() != p:
		d.add(n, field, fmt.Sprintf("%s has bits set beyond the prefix length", s), fmt.Sprintf("did you mean %s?", p.Masked()))
		return netip.Prefix{}, false
	case p.Addr().Is4In6():
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, true
}

// orList renders "a, b or c".
func orList(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// closest returns the candidate nearest to s by edit distance, when it is
// close enough to be a plausible typo, or one s begins ("min_pass" for
// "min_pass_rate", far in edit distance but the obvious intent).
func closest(s string, candidates []string) string {
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
