package daemon

import (
	"net/netip"
	"testing"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
)

// capFake is a datapath that takes caps (the loader's capSetter).
type capFake struct {
	datapath
	src  map[olc.PortKey][]loader.SourceCap
	ceil map[olc.PortKey]int
}

func (f *capFake) SetSourceCaps(m map[olc.PortKey][]loader.SourceCap) error   { f.src = m; return nil }
func (f *capFake) SetInFlightCeilings(m map[olc.PortKey]int, _ float64) error { f.ceil = m; return nil }

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
		{"no cap", loader.Counters{NewConns: 300, Dropped: 200, Rejected: 20, SYNRetransmits: 10},
			adaptive.PortStats{New: 300, Dropped: 200, Rejected: 20, Retransmits: 10}},
	} {
		if got := portStats(tt.dl); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
