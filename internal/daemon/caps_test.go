package daemon

import (
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"testing"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
)

// capFake is a datapath that takes caps (the loader's capSetter).
type capFake struct {
	*fakeDatapath
	src   map[olc.PortKey][]loader.SourceCap
	ceil  map[olc.PortKey]int
	floor float64
}

func (f *capFake) SetSourceCaps(m map[olc.PortKey][]loader.SourceCap) error { f.src = m; return nil }
func (f *capFake) SetInFlightCeilings(m map[olc.PortKey]int, floor float64) error {
	f.ceil, f.floor = m, floor
	return nil
}

// TestWriteCeilings: the law's ceilings on requests in flight reach the
// datapath with the drop probabilities, with min_pass_rate as the share of
// their refusals that passes; a port without one is written 0 (none), and
// in mode off every port is.
func TestWriteCeilings(t *testing.T) {
	k80, k81 := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, olc.PortKey{Proto: olc.ProtoTCP, Port: 81}
	for _, mode := range []string{"enforce", "off"} {
		c, _, err := rules.Parse([]byte("mode: "+mode+"\nports: [80, 81]\ncontroller: {min_pass_rate: 0.2}\n"), "x.yaml")
		if err != nil {
			t.Fatal(err)
		}
		ctrl, err := adaptive.New(c.ControllerConfig(nil))
		if err != nil {
			t.Fatal(err)
		}
		f := &capFake{fakeDatapath: &fakeDatapath{}}
		e := &engine{dp: f, cfg: c, ctrl: ctrl, log: slog.New(slog.DiscardHandler)}
		e.writeProbabilities(adaptive.Decision{Ports: []adaptive.PortDecision{
			{Key: k80, DropProbability: 0.4, InFlightCeiling: 7}, {Key: k81}}})
		want := map[olc.PortKey]int{k80: 7, k81: 0}
		if mode == "off" {
			want[k80] = 0
		}
		if !maps.Equal(f.ceil, want) || f.floor != 0.2 {
			t.Errorf("mode %s: ceilings %v with floor %v, want %v with 0.2", mode, f.ceil, f.floor, want)
		}
	}
}

// TestPortPolicyFairAndCaps: a port's fairness and caps reach the loader's
// policy, its source caps the loader's list.
func TestPortPolicyFairAndCaps(t *testing.T) {
	c, _, err := rules.Parse([]byte("ports: [{port: 80, fair: true, fair_prefix4: 24, caps: {rate: 100, burst: 5, in_flight: 7, sources: [{prefix: 198.51.100.0/24, rate: 3}]}}, 443]\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := portPolicy(c, c.Ports[0])
	if !p.Fair || p.FairPrefix4 != 24 || p.Caps != (loader.PortCaps{Rate: 100, Burst: 5, InFlight: 7}) {
		t.Errorf("policy %+v", p)
	}
	if q := portPolicy(c, c.Ports[1]); q.Fair || q.Caps != (loader.PortCaps{}) {
		t.Errorf("port 443 policy %+v, want no fairness, no caps", q)
	}
	src := sourceCaps(c)
	k80 := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	if len(src) != 1 || len(src[k80]) != 1 || src[k80][0] != (loader.SourceCap{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Rate: 3}) {
		t.Errorf("source caps %v", src)
	}
}

// TestPortStatsLeaveCappedOut: what a static cap refused and the datapath
// dropped is neither demand nor shed for the law; capped starts that
// passed (observe mode, the mark action) stay demand.
func TestPortStatsLeaveCappedOut(t *testing.T) {
	for _, tt := range []struct {
		name string
		dl   loader.Counters
		want adaptive.PortStats
	}{
		{"enforce, drop", loader.Counters{NewConns: 300, Dropped: 200, Capped: 150, SYNRetransmits: 10},
			adaptive.PortStats{New: 150, Dropped: 50, Retransmits: 10}},
		{"enforce, reject", loader.Counters{NewConns: 300, Dropped: 200, Rejected: 200, Capped: 150},
			adaptive.PortStats{New: 150, Dropped: 50, Rejected: 50}},
		{"the cap alone", loader.Counters{NewConns: 300, Dropped: 150, Capped: 150},
			adaptive.PortStats{New: 150}},
		{"observe", loader.Counters{NewConns: 300, WouldDrop: 200, Capped: 150},
			adaptive.PortStats{New: 300}},
		{"mark", loader.Counters{NewConns: 300, Marked: 200, Capped: 150},
			adaptive.PortStats{New: 300}},
		{"the law's ceiling: its shed, counted apart", loader.Counters{NewConns: 300, Dropped: 100, Ceiled: 40},
			adaptive.PortStats{New: 300, Dropped: 100, Ceiled: 40}},
		{"no cap", loader.Counters{NewConns: 300, Dropped: 200, Rejected: 20, SYNRetransmits: 10},
			adaptive.PortStats{New: 300, Dropped: 200, Rejected: 20, Retransmits: 10}},
	} {
		if got := portStats(tt.dl); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
