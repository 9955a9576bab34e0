package olc

import (
	"encoding"
	"encoding/json"
	"go/parser"
	"go/token"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// textValue is a type of this package as encoding sees it.
type textValue interface {
	encoding.TextMarshaler
	String() string
}

// TestTextRoundTrip: every valid value marshals to its String and parses
// back to itself, through UnmarshalText and through JSON.
func TestTextRoundTrip(t *testing.T) {
	var all []textValue
	for _, m := range []Mode{ModeOff, ModeObserve, ModeEnforce} {
		all = append(all, m)
	}
	for _, a := range []Action{ActionDrop, ActionMark, ActionReject} {
		all = append(all, a)
	}
	for _, r := range []Retransmits{RetransmitsAsFirst, RetransmitsShed, RetransmitsLast} {
		all = append(all, r)
	}
	for _, m := range AttachModes() {
		all = append(all, m)
	}
	for _, p := range []Proto{ProtoTCP, ProtoUDP} {
		all = append(all, p)
	}
	for c := range NumClasses {
		all = append(all, c)
	}
	for _, s := range Signals() {
		all = append(all, s)
	}
	for u := UnitFraction; u <= UnitRequests; u++ {
		all = append(all, u)
	}
	all = append(all, PortKey{Proto: ProtoTCP, Port: 443}, PortKey{Proto: ProtoUDP, Port: 65535})
	for _, v := range all {
		text, err := v.MarshalText()
		if err != nil || string(text) != v.String() {
			t.Errorf("%T %v: MarshalText = %q, %v; want %q", v, v, text, err, v.String())
			continue
		}
		js, err := json.Marshal(v)
		if err != nil {
			t.Errorf("%T %v: json: %v", v, v, err)
			continue
		}
		var back textValue
		switch v.(type) {
		case Mode:
			var x Mode
			err, back = json.Unmarshal(js, &x), x
		case Action:
			var x Action
			err, back = json.Unmarshal(js, &x), x
		case Retransmits:
			var x Retransmits
			err, back = json.Unmarshal(js, &x), x
		case AttachMode:
			var x AttachMode
			err, back = json.Unmarshal(js, &x), x
		case Proto:
			var x Proto
			err, back = json.Unmarshal(js, &x), x
		case Class:
			var x Class
			err, back = json.Unmarshal(js, &x), x
		case Signal:
			var x Signal
			err, back = json.Unmarshal(js, &x), x
		case Unit:
			var x Unit
			err, back = json.Unmarshal(js, &x), x
		case PortKey:
			var x PortKey
			err, back = json.Unmarshal(js, &x), x
		}
		if err != nil || back != v {
			t.Errorf("%T %s: round trip through %s = %v, %v", v, v, js, back, err)
		}
	}
}

// TestTextStrict: an unknown text is an error naming it and what is
// accepted; a value outside its type's range does not marshal.
func TestTextStrict(t *testing.T) {
	for _, c := range []struct {
		name string
		u    encoding.TextUnmarshaler
		text string
		want []string
	}{
		{"mode", new(Mode), "on", []string{`unknown mode "on"`, "want off, observe or enforce"}},
		{"mode case", new(Mode), "Enforce", []string{`"Enforce"`}},
		{"action", new(Action), "refuse", []string{`unknown action "refuse"`, "want drop, mark or reject"}},
		{"retransmits", new(Retransmits), "drop", []string{`unknown retransmit rule "drop"`, "want as-first, shed or last"}},
		{"attach", new(AttachMode), "tcx", []string{`unknown attach mode "tcx"`, "want auto, tc, xdp, xdp-native or xdp-generic"}},
		{"attach empty", new(AttachMode), "", []string{`unknown attach mode ""`}},
		{"proto", new(Proto), "sctp", []string{`unknown protocol "sctp"`, "want tcp or udp"}},
		{"class", new(Class), "best_effort", []string{`unknown class "best_effort"`, "want critical, normal or best-effort"}},
		{"signal", new(Signal), "cpu_bussy", []string{`unknown signal "cpu_bussy"`, "cpu_busy", "inflight_requests"}},
		{"unit", new(Unit), "percent", []string{`unknown unit "percent"`, "fraction"}},
		{"port key no slash", new(PortKey), "443", []string{`port "443"`, "proto/port"}},
		{"port key proto", new(PortKey), "icmp/1", []string{`unknown protocol "icmp"`}},
		{"port key zero", new(PortKey), "tcp/0", []string{"1..65535"}},
		{"port key big", new(PortKey), "udp/65536", []string{"1..65535"}},
	} {
		err := c.u.UnmarshalText([]byte(c.text))
		if err == nil {
			t.Errorf("%s: %q accepted", c.name, c.text)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", c.name, err, w)
			}
		}
	}
	for _, v := range []encoding.TextMarshaler{Mode(3), Action(3), Retransmits(3), AttachMode(""), AttachMode("tcx"), Proto(1), Class(3), NumSignals, Unit(9),
		PortKey{}, PortKey{Proto: 1, Port: 80}} {
		if text, err := v.MarshalText(); err == nil {
			t.Errorf("%T %v: MarshalText = %q, want an error", v, v, text)
		}
	}
}

// TestSignalTable: every signal has a unique canonical name, ParseSignal
// inverts String, and the cgroup signals are the cgroup_ names.
func TestSignalTable(t *testing.T) {
	seen := map[string]Signal{}
	for _, s := range Signals() {
		n := s.String()
		if n == "" || strings.HasPrefix(n, "signal(") {
			t.Errorf("signal %d has no name", s)
		}
		if o, dup := seen[n]; dup {
			t.Errorf("%q names %d and %d", n, o, s)
		}
		seen[n] = s
		if back, err := ParseSignal(n); err != nil || back != s {
			t.Errorf("ParseSignal(%q) = %v, %v", n, back, err)
		}
		if s.IsCgroup() != strings.HasPrefix(n, "cgroup_") {
			t.Errorf("%s: IsCgroup %v", n, s.IsCgroup())
		}
		if s.IsFraction() != (s.Unit() == UnitFraction) {
			t.Errorf("%s: IsFraction %v, unit %s", n, s.IsFraction(), s.Unit())
		}
	}
	if len(seen) != int(NumSignals) {
		t.Errorf("%d names for %d signals", len(seen), NumSignals)
	}
}

// TestSnapshot: Set, Get and Unset, and out-of-range signals ignored.
func TestSnapshot(t *testing.T) {
	var s Snapshot
	if _, ok := s.Get(CPUBusy); ok {
		t.Error("zero snapshot has cpu_busy")
	}
	s.Set(CPUBusy, 0)
	if v, ok := s.Get(CPUBusy); !ok || v != 0 {
		t.Errorf("cpu_busy = %v, %v; want an available 0", v, ok)
	}
	s.Unset(CPUBusy)
	if _, ok := s.Get(CPUBusy); ok {
		t.Error("cpu_busy still available after Unset")
	}
	s.Set(NumSignals, 1)
	s.Unset(NumSignals)
	if _, ok := s.Get(NumSignals); ok {
		t.Error("NumSignals available")
	}
}

func TestPortKey(t *testing.T) {
	k, err := ParsePortKey("udp/53")
	if err != nil || k != (PortKey{Proto: ProtoUDP, Port: 53}) || k.String() != "udp/53" || !k.Valid() {
		t.Errorf("ParsePortKey(udp/53) = %v, %v", k, err)
	}
	if (PortKey{}).Valid() || (PortKey{Proto: ProtoTCP}).Valid() {
		t.Error("zero port valid")
	}
	if s := (PortKey{Proto: 1, Port: 9}).String(); s != "proto(1)/9" {
		t.Errorf("String = %q", s)
	}
}

// TestLeaf: olc imports only the standard library, so every package can
// import it and it builds on any OS.
func TestLeaf(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s: olc imports only the standard library", f, path)
			}
		}
	}
}

// TestUsable covers which samples the controller uses: finite, not
// negative, a fraction at most MaxUsableFraction.
func TestUsable(t *testing.T) {
	for _, tc := range []struct {
		sig  Signal
		v    float64
		want bool
	}{
		{CPUBusy, 0, true},
		{CPUBusy, 1.05, true},
		{CPUBusy, 1.06, false},
		{CPUBusy, -0.01, false},
		{CPUBusy, math.NaN(), false},
		{Load1, 40, true},
		{Load1, math.Inf(1), false},
		{ResponseTimeP95, 2.5, true},
	} {
		if got := tc.sig.Usable(tc.v); got != tc.want {
			t.Errorf("%s.Usable(%v) = %v, want %v", tc.sig, tc.v, got, tc.want)
		}
	}
}
