package rules

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader/dpconfig"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/spell"
	sy "github.com/olcd/olcd/internal/strictyaml"
)

// decodeDocument decodes root onto the defaults and validates the result;
// pre are problems found beforehand (nullKeyProblems), reported with the
// decoder's, in line order.
func decodeDocument(root *sy.Node, source string, pre []Problem) (*Config, []Warning, error) {
	d := newChecker(source)
	d.Problems = slices.Clone(pre)
	cfg := defaults()
	cfg.Source = source
	if root != nil {
		d.Struct(root, reflect.ValueOf(cfg).Elem(), "")
	}
	d.validate(cfg)
	if len(d.Problems) > 0 {
		slices.SortStableFunc(d.Problems, func(a, b Problem) int {
			if a.File != b.File {
				return strings.Compare(a.File, b.File)
			}
			return a.Line - b.Line
		})
		return nil, nil, &ValidationError{Problems: d.Problems}
	}
	cfg.doc = root
	return cfg, d.warn(cfg), nil
}

// checker is a decoder of olcd.yaml and the checks of the typed config.
type checker struct {
	*sy.Decoder
	// set marks the signals the document gives a threshold (validate also
	// checks an explicit 0), named those it gives a threshold or off.
	set, named [olc.NumSignals]bool
}

func newChecker(source string) *checker {
	c := &checker{Decoder: codec.NewDecoder(sourceName(source))}
	c.Data, c.Retired = c, retiredKey
	return c
}

// codec holds the types of a Config that decode themselves: the shared
// vocabulary, netip, time, the port lists and entries, the signals and the
// response targets. Switch words ("on", "no") hint at the mode they stand
// for: the edit distance would suggest "off" for "on".
var codec *sy.Codec

func init() { // not a var initializer: the port entries decode through the codec
	codec = sy.NewCodec(map[reflect.Type]sy.DecodeFunc{
		reflect.TypeFor[time.Duration](): sy.Scalar(func(d *sy.Decoder, n *sy.Node, f string, _ reflect.StructField) (time.Duration, bool) {
			return d.Duration(n, f)
		}),
		reflect.TypeFor[netip.Prefix](): sy.Scalar(func(d *sy.Decoder, n *sy.Node, f string, _ reflect.StructField) (netip.Prefix, bool) {
			s, ok := d.Str(n, f)
			if !ok {
				return netip.Prefix{}, false
			}
			return prefix(d, n, f, s)
		}),
		reflect.TypeFor[olc.Mode]():       enumOf(olc.ModeNames(), olc.ParseMode),
		reflect.TypeFor[olc.AttachMode](): enumOf(spell.Names(olc.AttachModes()), olc.ParseAttachMode),
		reflect.TypeFor[olc.Action]():     enumOf(olc.ActionNames(), olc.ParseAction),
		reflect.TypeFor[olc.Proto]():      enumOf([]string{"tcp", "udp"}, olc.ParseProto),
		reflect.TypeFor[olc.Class]():      enumOf(olc.ClassNames(), olc.ParseClass),
		reflect.TypeFor[Port]():           portEntry(Port{PortPolicy: dpconfig.PortPolicy{Key: olc.PortKey{Proto: olc.ProtoTCP}, Class: olc.ClassNormal}}),
		reflect.TypeFor[olc.PortKey]():    portEntry(olc.PortKey{Proto: olc.ProtoTCP}),
		reflect.TypeFor[[]Port]():         portList,
		reflect.TypeFor[Thresholds]():     decodeSignals,
		reflect.TypeFor[adaptive.ResponseTarget](): sy.Scalar(func(d *sy.Decoder, n *sy.Node, f string, _ reflect.StructField) (adaptive.ResponseTarget, bool) {
			return responseTarget(d, n, f)
		}),
	}, map[string]string{
		"on": "enforce", "yes": "enforce", "true": "enforce", "enable": "enforce", "enabled": "enforce", "1": "enforce",
		"no": "off", "false": "off", "disable": "off", "disabled": "off", "none": "off", "0": "off",
	})
}

// enumOf decodes one of words (olc's names for T, or the field's `enum`
// tag) into a T; an `offhint` tag explains why off is not one of them.
func enumOf[T any](words []string, parse func(string) (T, error)) sy.DecodeFunc {
	return sy.Scalar(func(d *sy.Decoder, n *sy.Node, f string, sf reflect.StructField) (T, bool) {
		allowed := words
		if w, ok := sf.Tag.Lookup("enum"); ok {
			allowed = strings.Split(w, ",")
		}
		var x T
		s, ok := d.Enum(n, f, allowed)
		if !ok {
			if h, has := sf.Tag.Lookup("offhint"); has && n.Value == "off" {
				d.SetHint(h)
			}
			return x, false
		}
		x, err := parse(s)
		return x, err == nil
	})
}

// portEntry decodes one entry of a port list onto def (a Port or an
// olc.PortKey with its defaults): a port number, or a mapping with a port.
// Every port list takes both shapes.
func portEntry[T any](def T) sy.DecodeFunc {
	return func(d *sy.Decoder, n *sy.Node, v reflect.Value, field string, _ reflect.StructField) bool {
		x := def
		e := reflect.ValueOf(&x).Elem()
		port := codec.Schema(e.Type()).Fields["port"]
		ok := false
		switch {
		case sy.IsInteger(n):
			ok = d.Value(n, e.FieldByIndex(port.Index), field, port.StructField)
		case n.Kind != yaml.MappingNode:
			ex := map[bool]string{true: "22", false: "443"}[strings.HasPrefix(field, "exceptions")]
			d.Add(n, field, fmt.Sprintf("must be a port number such as %s, or {port: %s, proto: tcp}, got %s", ex, ex, sy.KindName(n)), sy.QuotedNumberHint(n))
		default:
			ok = d.Struct(n, e, field)
			if !d.Given(sy.Join(field, "port")) {
				d.Add(n, sy.Join(field, "port"), "missing", "every entry needs a port number")
				ok = false
			}
		}
		if ok {
			v.Set(e)
		}
		return ok
	}
}

// portList decodes `ports`: auto, or a list of entries.
func portList(d *sy.Decoder, n *sy.Node, v reflect.Value, field string, sf reflect.StructField) bool {
	if n.Kind != yaml.ScalarNode || sy.IsNull(n) {
		return d.List(n, v, field, sf)
	}
	v.SetZero()
	if n.Value != "auto" {
		d.Add(n, field, "must be auto or a list of ports, got "+sy.KindName(n), "write ports: auto, or ports: [{port: 443, proto: tcp}]")
	}
	return n.Value == "auto"
}

// decodeSignals decodes `signals`: each signal's {threshold: x}, or off. A
// section lists the signals used: it starts from none.
func decodeSignals(d *sy.Decoder, n *sy.Node, v reflect.Value, path string, _ reflect.StructField) bool {
	c, t := d.Data.(*checker), v.Addr().Interface().(*Thresholds)
	*t = Thresholds{}
	return d.Mapping(n, path, nil, func(name string, v *sy.Node, field string) {
		sig, err := olc.ParseSignal(name)
		if err != nil {
			unknownSignal(d, v, field, name)
			return
		}
		if v.Kind == yaml.ScalarNode && v.Value == "off" {
			c.named[sig] = true
			return
		}
		if sy.IsNull(v) || v.Kind != yaml.MappingNode {
			d.Add(v, field, "must be a mapping with a threshold, or off, got "+sy.KindName(v), fmt.Sprintf("write %s: {threshold: …}, or %s: off", name, name))
			return
		}
		found := false
		d.Mapping(v, field, []string{"threshold"}, func(_ string, tv *sy.Node, f string) {
			found = true
			if x, ok := threshold(d, sig, tv, f); ok {
				t[sig], c.set[sig], c.named[sig] = x, true, true
			}
		})
		if !found {
			d.Add(v, sy.Join(field, "threshold"), "missing", fmt.Sprintf("write %s: {threshold: …}, or remove the signal", name))
		}
	})
}

// unknownSignal records that name, the key at n of the signals mapping, is
// not a signal, with the closest one.
func unknownSignal(d *sy.Decoder, n *sy.Node, field, name string) {
	hint := "see docs/config.md for the canonical names"
	if s := spell.Closest(name, spell.Names(olc.Signals())); s != "" {
		hint = fmt.Sprintf("did you mean %q?", s)
	}
	d.Add(n, field, fmt.Sprintf("unknown signal %q", name), hint)
}

// nullKeyProblems checks the keys of doc, a file as written or a patch,
// that have no value (`key:`, `~`, null) against the schema, as the
// decoder checks every other key: DropNulls (a file) and Merge (a patch)
// take them out of the document decoded, where a mistyped `mdoe:` or
// `signals: {cpu_bsy: }` would load as if it were left out. The keys of
// list entries are checked when lists is set (a file's; a patch's lists
// reach their decoders as written, nulls included).
func nullKeyProblems(doc *sy.Node, lists bool) []Problem {
	c := newChecker("")
	c.nullKeys(doc, "", codec.Schema(reflect.TypeFor[Config]()), lists)
	return c.Problems
}

// nullKeys checks the null-valued keys of mapping n, at path, against s,
// and those of its values.
func (c *checker) nullKeys(n *sy.Node, path string, s *sy.Schema, lists bool) {
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i, k := range n.Keys {
		v, field := n.Vals[i], sy.Join(path, k.Value)
		switch {
		case k.Kind != yaml.ScalarNode: // refused by the decoder
		case sy.IsNull(v):
			c.Known(k, path, s.Keys)
		case s.Subs[k.Value] != nil:
			c.nullKeys(v, field, s.Subs[k.Value], lists)
		default:
			if f, ok := s.Fields[k.Value]; ok {
				c.nullValueKeys(v, field, f.Type, lists)
			}
		}
	}
}

// nullValueKeys checks the null-valued keys inside n, the value of field,
// of type t: the signals (keyed by signal name, each a mapping of
// threshold), a list's entries, a mapping of a struct's keys.
func (c *checker) nullValueKeys(n *sy.Node, field string, t reflect.Type, lists bool) {
	switch {
	case t == reflect.TypeFor[Thresholds]():
		if n.Kind != yaml.MappingNode {
			return
		}
		for i, k := range n.Keys {
			v, f := n.Vals[i], sy.Join(field, k.Value)
			switch {
			case k.Kind != yaml.ScalarNode:
			case sy.IsNull(v):
				if _, err := olc.ParseSignal(k.Value); err != nil {
					unknownSignal(c.Decoder, k, f, k.Value)
				}
			case v.Kind == yaml.MappingNode:
				for j, tk := range v.Keys {
					if tk.Kind == yaml.ScalarNode && sy.IsNull(v.Vals[j]) {
						c.Known(tk, f, []string{"threshold"})
					}
				}
			}
		}
	case t.Kind() == reflect.Slice:
		if lists && n.Kind == yaml.SequenceNode {
			for i, item := range n.Vals {
				c.nullValueKeys(item, fmt.Sprintf("%s[%d]", field, i), t.Elem(), lists)
			}
		}
	case t.Kind() == reflect.Struct:
		if s := codec.Schema(t); len(s.Keys) > 0 {
			c.nullKeys(n, field, s, lists)
		}
	}
}

// threshold decodes sig's threshold: a number in the signal's unit; seconds
// may be written as a duration (50ms), and a bare number as a response-time
// threshold beyond any response time olcd acts on is most likely ms.
func threshold(d *sy.Decoder, sig olc.Signal, n *sy.Node, f string) (float64, bool) {
	switch {
	case sig.Unit() == olc.UnitSeconds && n.Kind == yaml.ScalarNode && n.Tag == "!!str" && !sy.NonFinite(n):
		dur, ok := d.Duration(n, f)
		return dur.Seconds(), ok
	case sig == olc.ResponseTimeP50 || sig == olc.ResponseTimeP95 || sig == olc.ResponseTimeP99:
		x, ok := d.Number(n, f, ThresholdRange(sig))
		if ok && x > adaptive.MaxResponseTarget {
			d.Add(n, f, fmt.Sprintf("threshold %g s is above %g s: a bare number is seconds", x, adaptive.MaxResponseTarget), fmt.Sprintf("did you mean %gms?", x))
			return 0, false
		}
		return x, ok
	}
	return d.Number(n, f, ThresholdRange(sig))
}

// ThresholdRange renders the values a threshold of sig may take, in its
// unit: "(0, 1]" for a fraction, "(0, 30s]" for a response time, "(0, ∞)"
// otherwise.
func ThresholdRange(sig olc.Signal) string {
	switch {
	case sig.IsFraction():
		return "(0, 1]"
	case sig == olc.ResponseTimeP50 || sig == olc.ResponseTimeP95 || sig == olc.ResponseTimeP99:
		return fmt.Sprintf("(0, %gs]", adaptive.MaxResponseTarget)
	case sig.Unit() == olc.UnitSeconds:
		return "(0s, ∞)"
	}
	return "(0, ∞)"
}

// responseTarget decodes a response-time target: auto, off, a duration
// (50ms) or seconds (0.05), in (0, 30s].
func responseTarget(d *sy.Decoder, n *sy.Node, field string) (adaptive.ResponseTarget, bool) {
	const hint = "write auto, off, or a duration such as 50ms"
	var x float64
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && !sy.NonFinite(n) {
		switch n.Value {
		case "auto":
			return adaptive.ResponseTarget{Auto: true}, true
		case "off":
			return adaptive.ResponseTarget{}, true
		}
		dur, good := d.Duration(n, field)
		if !good {
			d.SetHint(hint)
			return adaptive.ResponseTarget{}, false
		}
		x = dur.Seconds()
	} else if v, ok := d.Number(n, field, "(0, 30s]"); ok {
		x = v
	} else {
		return adaptive.ResponseTarget{}, false
	}
	if !(x > 0 && x <= adaptive.MaxResponseTarget) {
		h := hint
		if n.Tag != "!!str" && x > adaptive.MaxResponseTarget && x/1000 <= adaptive.MaxResponseTarget {
			h = fmt.Sprintf("a bare number is seconds: did you mean %gms?", x) // 50 is most likely 50 ms
		}
		d.Add(n, field, fmt.Sprintf("response target %v s is out of range: must be in (0, 30s]", x), h)
		return adaptive.ResponseTarget{}, false
	}
	return adaptive.ResponseTarget{Seconds: x}, true
}

// prefix parses a CIDR prefix, or a bare address as a host prefix.
func prefix(d *sy.Decoder, n *sy.Node, field, s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if addr, zoned, ok := strings.Cut(s, "%"); ok {
		// An IPv6 zone names an interface; a prefix cannot hold one, and
		// dropping it would exempt the address on every interface.
		zone, bits, hasBits := strings.Cut(zoned, "/")
		if hasBits {
			addr += "/" + bits
		}
		d.Add(n, field, fmt.Sprintf("%q has an interface zone %%%s: exceptions apply on every interface", s, zone), "write "+addr)
		return netip.Prefix{}, false
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			d.Add(n, field, fmt.Sprintf("%q is not an address or CIDR prefix", s), "write e.g. 10.0.0.0/8, 192.0.2.1 or 2001:db8::/32")
			return netip.Prefix{}, false
		}
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), true
	}
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		d.Add(n, field, fmt.Sprintf("%q is not a CIDR prefix", s), "write e.g. 10.0.0.0/8 (IPv4 lengths 0..32, IPv6 0..128)")
		return netip.Prefix{}, false
	case p.Masked() != p:
		d.Add(n, field, fmt.Sprintf("%s has bits set beyond the prefix length", s), fmt.Sprintf("did you mean %s?", p.Masked()))
		return netip.Prefix{}, false
	case p.Addr().Is4In6():
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, true
}
