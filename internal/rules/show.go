package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/olc"
	sy "github.com/olcd/olcd/internal/strictyaml"
)

// Setting is one key of an effective config (`olcd config show`).
type Setting struct {
	// Key is the dotted path: "controller.ki", "signals.psi_cpu_some.threshold".
	Key string
	// Value is the value in the config's words ("500ms", "auto", "[tcp/22]").
	Value string
	// Origin is "default", or the file and line that set it: the config
	// file's, or a live override's (its Patch source, e.g. "live patch:1").
	Origin string
}

// Settings returns every key of c with its value and origin, in the
// schema's order; signals are listed one per signal with a threshold, and
// a key without a value (action.dscp unset) as "unset".
func (c *Config) Settings() []Setting {
	var out []Setting
	add := func(key, val string) {
		origin := "default"
		if p := c.Locate(key, "", ""); p.Line > 0 {
			origin = fmt.Sprintf("%s:%d", p.File, p.Line)
		}
		out = append(out, Setting{Key: key, Value: val, Origin: origin})
	}
	v := reflect.ValueOf(c).Elem()
	var walk func(s *sy.Schema, path string)
	walk = func(s *sy.Schema, path string) {
		for _, k := range s.Keys {
			key, f := sy.Join(path, k), s.Fields[k]
			switch {
			case s.Subs[k] != nil:
				walk(s.Subs[k], key)
			case f.Type == reflect.TypeFor[Thresholds]():
				for sig, t := range c.Thresholds {
					if t > 0 {
						add(key+"."+olc.Signal(sig).String()+".threshold", fmt.Sprint(t))
					}
				}
			case f.Tag.Get("has") != "" && !v.FieldByIndex(f.Sibling).Bool():
				add(key, "unset")
			case f.Tag.Get("auto") != "" && v.FieldByIndex(f.Sibling).Bool():
				add(key, "auto")
			default:
				add(key, showValue(v.FieldByIndex(f.Index)))
			}
		}
	}
	walk(codec.Schema(reflect.TypeFor[Config]()), "")
	return out
}

// Digest identifies what c sets, whatever its file's comments, key order
// and layout: a hash of its decoded values, the Source path left out (16
// hex digits; "" if they cannot be encoded, which a validated config can).
// Two configs with one Digest run the same.
func (c *Config) Digest() string {
	v := *c
	v.Source, v.doc, v.file = "", nil, nil
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// showValue renders one value in the config's words.
func showValue(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case adaptive.ResponseTarget:
		switch {
		case x.Auto:
			return "auto"
		case x.Seconds > 0:
			return time.Duration(x.Seconds * float64(time.Second)).String()
		}
		return "off"
	case Port:
		s := fmt.Sprintf("%s class %s", x.Key, x.Class)
		if x.Mode != olc.ModeOff {
			s += " mode " + x.Mode.String()
		}
		if x.HasAction {
			s += " action " + x.Action.String()
		}
		if x.HasTarget {
			s += " response_target " + showValue(reflect.ValueOf(x.Target))
		}
		return s
	case string:
		if x == "" {
			return `""`
		}
		return x
	}
	if v.Kind() == reflect.Slice {
		items := make([]string, v.Len())
		for i := range items {
			items[i] = showValue(v.Index(i))
		}
		return "[" + strings.Join(items, ", ") + "]"
	}
	return fmt.Sprint(v.Interface())
}
