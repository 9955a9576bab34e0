package overload

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/rules"
)

// TestOlcdSettingsFor: what each variant changes in olcd's config, with
// and without the law on the measured queue.
func TestOlcdSettingsFor(t *testing.T) {
	cal := &Calibration{Threshold: 0.9, ResponseThreshold: 0.012}
	cpu := "cgroup_cpu_usage_of_quota: {threshold: 0.900}"
	rt := "response_time_p95: {threshold: 0.0120}"
	for _, tc := range []struct {
		name      string
		targetLaw bool
		target    string
		v         Variant
		want      olcdSettings
	}{
		{"enforce, threshold law", false, "", VariantEnforce, olcdSettings{Mode: "enforce", Signals: []string{rt, cpu}}},
		{"observe, threshold law", false, "", VariantObserve, olcdSettings{Mode: "observe", Signals: []string{rt, cpu}}},
		{"reject, threshold law", false, "", VariantEnforceReject, olcdSettings{Mode: "enforce", Signals: []string{rt, cpu}, Action: "reject"}},
		{"cpu only, threshold law", false, "", VariantEnforceCPU, olcdSettings{Mode: "enforce", Signals: []string{cpu}}},
		{"enforce, target law, default target", true, "", VariantEnforce, olcdSettings{Mode: "enforce"}},
		{"enforce, target law, knee target", true, "knee", VariantEnforce, olcdSettings{Mode: "enforce", Controller: []string{"response_target: 0.0120"}}},
		{"reject, target law", true, "", VariantEnforceReject, olcdSettings{Mode: "enforce", Action: "reject"}},
		{"cpu only, target law", true, "knee", VariantEnforceCPU, olcdSettings{Mode: "enforce", Signals: []string{cpu}, Controller: []string{"response_target: off"}}},
	} {
		h := &Harness{targetLaw: tc.targetLaw, opt: Options{ResponseTarget: tc.target}}
		got := h.olcdSettingsFor(tc.v, cal)
		if got.Mode != tc.want.Mode || got.Action != tc.want.Action || !slices.Equal(got.Signals, tc.want.Signals) || !slices.Equal(got.Controller, tc.want.Controller) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestCapsChanges: a phase's caps become a patch of the work port's entry
// (workPortEntry's keys, the config file's), with the rates at the
// calibrated capacity, the heavy client's address as a host prefix; a phase with the caps of
// the one before patches nothing, one without caps after caps removes them.
// Each patch is a config olcd's rules accept with those caps.
func TestCapsChanges(t *testing.T) {
	heavy := netip.MustParseAddr("198.51.100.2")
	sc := Scenario{Phases: []ScenarioPhase{
		{Name: "none", Duration: time.Second},
		{Name: "port", Duration: 2 * time.Second, Caps: &PhaseCaps{Rate: 0.6}},
		{Name: "same", Duration: time.Second, Caps: &PhaseCaps{Rate: 0.6}},
		{Name: "all", Duration: time.Second, Caps: &PhaseCaps{HeavyRate: 0.4, InFlight: 100 * time.Millisecond, ResponseTarget: "500ms"}},
		{Name: "off", Duration: time.Second},
	}}
	got, err := capsChanges(sc, olcdSettings{Fair: true}, 180, heavy)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		phase string
		at    time.Duration
		doc   string
		caps  rules.PortCaps
	}{
		{"port", time.Second, "ports: [{caps: {rate: 108}, fair: true, port: 18080, proto: tcp}]\n", rules.PortCaps{Rate: 108}},
		{"all", 4 * time.Second, "ports: [{caps: {in_flight: 18, sources: [{prefix: 198.51.100.2/32, rate: 72}]}, fair: true, port: 18080, proto: tcp, response_target: 500ms}]\n",
			rules.PortCaps{InFlight: 18, Sources: []rules.SourceCap{{Prefix: netip.MustParsePrefix("198.51.100.2/32"), Rate: 72}}}},
		{"off", 5 * time.Second, "ports: [{fair: true, port: 18080, proto: tcp}]\n", rules.PortCaps{}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d changes, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Phase != w.phase || g.At != w.at || string(g.Doc) != w.doc {
			t.Errorf("change %d: %s at %v: %q; want %s at %v: %q", i, g.Phase, g.At, g.Doc, w.phase, w.at, w.doc)
			continue
		}
		c, _, err := rules.Parse(g.Doc, "patch")
		if err != nil {
			t.Errorf("change %d: %v", i, err)
			continue
		}
		p := c.Ports[0]
		if !p.Fair || p.StaticCaps.Rate != w.caps.Rate || p.StaticCaps.InFlight != w.caps.InFlight || !slices.Equal(p.StaticCaps.Sources, w.caps.Sources) {
			t.Errorf("change %d: parsed as %+v, want fair and caps %+v", i, p, w.caps)
		}
	}
}
