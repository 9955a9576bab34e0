// Package ranges declares the valid range of a numeric setting once, in a
// struct tag next to the field, and checks values against it:
//
//	Ki  float64       `yaml:"ki" range:"(0, 2]"`
//	Max int           `yaml:"max" range:"[1, 10]" hint:"2 is the default"`
//	On  time.Duration `yaml:"on" range:"[10ms, 1s]" off:"0"`
//	Age time.Duration `yaml:"age" range:"[1s, ∞)"`
//
// A parenthesis is an open bound, a bracket a closed one; "∞" has no bound.
// Durations are written as time.ParseDuration reads them. `off` names one
// more accepted value outside the range (a switch-off). `suggest:"percent"`
// adds a hint for a fraction written as a percentage (80 for 0.8). The
// config decoder (internal/rules) and the packages' own Validate read the
// same tags, so a range is never written twice.
package ranges

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Range is the parsed `range` tag of one field.
type Range struct {
	// Lo and Hi are the bounds, in the field's unit (nanoseconds for a
	// time.Duration); Hi is +Inf for "∞".
	Lo, Hi float64
	// LoOpen and HiOpen mark bounds that are excluded.
	LoOpen, HiOpen bool
	// Off is one more accepted value when HasOff (the `off` tag).
	Off    float64
	HasOff bool
	// Text is the range as written in the tag, e.g. "(0, 2]".
	Text string
	// Hint is the `hint` tag: how to fix a value outside the range.
	Hint string
	// Percent is set by `suggest:"percent"`.
	Percent bool

	dur bool
}

var durationType = reflect.TypeFor[time.Duration]()

// Of returns the range declared on f, and false when f has no `range` tag.
// A malformed tag is a programming error and panics.
func Of(f reflect.StructField) (Range, bool) {
	text, ok := f.Tag.Lookup("range")
	if !ok {
		return Range{}, false
	}
	r := Range{Text: text, Hint: f.Tag.Get("hint"), Percent: f.Tag.Get("suggest") == "percent", dur: f.Type == durationType}
	s := strings.TrimSpace(text)
	if len(s) < 5 || !strings.ContainsAny(s[:1], "[(") || !strings.ContainsAny(s[len(s)-1:], "])") {
		panic(fmt.Sprintf("ranges: field %s: malformed range %q", f.Name, text))
	}
	r.LoOpen, r.HiOpen = s[0] == '(', s[len(s)-1] == ')'
	lo, hi, ok := strings.Cut(s[1:len(s)-1], ",")
	if !ok {
		panic(fmt.Sprintf("ranges: field %s: malformed range %q", f.Name, text))
	}
	r.Lo, r.Hi = r.bound(f, lo), r.bound(f, hi)
	if off, ok := f.Tag.Lookup("off"); ok {
		r.Off, r.HasOff = r.bound(f, off), true
	}
	return r, true
}

// bound parses one bound of f's range.
func (r Range) bound(f reflect.StructField, s string) float64 {
	s = strings.TrimSpace(s)
	if s == "∞" {
		return math.Inf(1)
	}
	if r.dur {
		d, err := time.ParseDuration(s)
		if err != nil {
			panic(fmt.Sprintf("ranges: field %s: bound %q: %v", f.Name, s, err))
		}
		return float64(d)
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic(fmt.Sprintf("ranges: field %s: bound %q: %v", f.Name, s, err))
	}
	return x
}

// Contains reports whether x lies in the range (or is the off value). NaN
// and ±Inf never do.
func (r Range) Contains(x float64) bool {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return false
	case r.HasOff && x == r.Off:
		return true
	}
	return !(x < r.Lo || x > r.Hi || (r.LoOpen && x == r.Lo) || (r.HiOpen && x == r.Hi))
}

// IntText renders the range of an integer field as "lo..hi".
func (r Range) IntText() string { return fmt.Sprintf("%d..%d", int64(r.Lo), int64(r.Hi)) }

// Problem returns what is wrong with v (a value of the field's type) and a
// hint, or "" when v lies in the range.
func (r Range) Problem(v reflect.Value) (msg, hint string) {
	var x float64
	switch {
	case v.CanInt():
		x = float64(v.Int())
	case v.CanUint():
		x = float64(v.Uint())
	default:
		x = v.Float()
	}
	if r.Contains(x) {
		return "", ""
	}
	hint = r.Hint
	switch {
	case r.dur && math.IsInf(r.Hi, 1):
		lo, _, _ := strings.Cut(strings.TrimSpace(r.Text[1:]), ",")
		msg = fmt.Sprintf("%v is below %s", time.Duration(v.Int()), lo)
	case r.dur:
		msg = fmt.Sprintf("%v is outside %s", time.Duration(v.Int()), r.Text)
	case v.CanInt() || v.CanUint():
		msg = fmt.Sprintf("%v is out of range: must be %s", v.Interface(), r.IntText())
	default:
		msg = fmt.Sprintf("%g is outside %s", x, r.Text)
		if r.Percent && x > 1 && x <= 100 {
			hint = fmt.Sprintf("looks like percent; did you mean %g?", x/100)
		}
	}
	return msg, hint
}

// Problem is one field outside its range.
type Problem struct {
	// Key is the field's yaml key (its Go name without one).
	Key string
	// Msg says what is wrong, e.g. "1.5 is outside [0, 1]".
	Msg string
	// Hint suggests a fix; it may be "".
	Hint string
}

// Check returns a Problem for every field of the struct s (or *s) whose
// value lies outside its declared range, in declaration order.
func Check(s any) []Problem {
	v := reflect.Indirect(reflect.ValueOf(s))
	var out []Problem
	for i := range v.NumField() {
		f := v.Type().Field(i)
		r, ok := Of(f)
		if !ok {
			continue
		}
		if msg, hint := r.Problem(v.Field(i)); msg != "" {
			out = append(out, Problem{Key: Key(f), Msg: msg, Hint: hint})
		}
	}
	return out
}

// Key returns f's yaml key: the name in its `yaml` tag, else its Go name.
func Key(f reflect.StructField) string {
	if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" {
		return name
	}
	return f.Name
}
