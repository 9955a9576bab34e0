package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// TestStateRoundTrip: a controller restored from another's State sheds
// what it shed, with its capacity, no-load p95, ceiling and the starts at
// the ceiling's start (a closed loop told apart), from its first
// tick.
func TestStateRoundTrip(t *testing.T) {
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	cfg := cfgWith()
	cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: ResponseTarget{Auto: true}}}
	a := mustNew(t, cfg)
	quiet := PortStats{New: 50, Response: PortResponse{Available: true, P95: 0.005, Samples: 50, Requests: 50, Responses: 50}}
	busy := PortStats{New: 300, Dropped: 0, Response: PortResponse{Available: true, P95: 0.2, Samples: 100, Requests: 300, Responses: 100, Inflight: 80}}
	var d Decision
	for i := range 20 {
		st := quiet
		if i >= 10 {
			st = busy
		}
		d = a.Step(snap(float64(i)*0.5), map[olc.PortKey]PortStats{key: st})
	}
	a.ports[0].scale = 0.6 // as a tick whose p95 was the ceiling's left it
	s := a.Export()
	b := mustNew(t, cfg)
	b.Restore(s, time.Second, d.At)
	got := b.Export()
	if got.Ports[0].DropProbability != s.Ports[0].DropProbability || got.Ports[0].Baseline != s.Ports[0].Baseline ||
		got.Ports[0].InFlightCeiling != s.Ports[0].InFlightCeiling || s.Ports[0].InFlightCeiling <= 0 || got.Ports[0].CeilingShare != 0.6 ||
		got.Ports[0].OnsetRate != s.Ports[0].OnsetRate || s.Ports[0].OnsetRate <= 0 ||
		math.Abs(got.Ports[0].Capacity-s.Ports[0].Capacity) > 1e-9 || s.Ports[0].Capacity <= 0 || s.Ports[0].DropProbability <= 0 {
		t.Errorf("restored %+v, exported %+v", got.Ports[0], s.Ports[0])
	}
	// A state without the share (an earlier build), or with one no build
	// writes, holds the ceiling at N*.
	for _, share := range []float64{0, 1.5, -1} {
		s.Ports[0].CeilingShare = share
		c := mustNew(t, cfg)
		if c.Restore(s, time.Second, d.At); c.Export().Ports[0].CeilingShare != 1 {
			t.Errorf("share %v restored as %v, want 1", share, c.Export().Ports[0].CeilingShare)
		}
	}
	if got.Ports[0].CapacityAge < s.Ports[0].CapacityAge+1 {
		t.Errorf("capacity age %v after 1 s, exported %v", got.Ports[0].CapacityAge, s.Ports[0].CapacityAge)
	}
}

// TestRestoreRetransmitRule: a port restored under retransmits last keeps
// its p past the bound (it applies to retransmits alone) and its rule, and
// so does a reload after it; one under shed is clamped to the bound; a rule
// no build writes reads as as-first.
func TestRestoreRetransmitRule(t *testing.T) {
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	cfg := cfgWith()
	cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: ResponseTarget{Seconds: 0.05}}}
	for _, tc := range []struct {
		rule     olc.Retransmits
		p, wantP float64
		wantRule olc.Retransmits
	}{
		{olc.RetransmitsLast, 0.99, 0.99, olc.RetransmitsLast},
		{olc.RetransmitsShed, 0.99, cfg.Params.Bound(), olc.RetransmitsShed},
		{7, 0.5, 0.5, olc.RetransmitsAsFirst},
	} {
		c := mustNew(t, cfg)
		c.Restore(State{Ports: []PortState{{Key: key, DropProbability: tc.p, QueueOverload: true, Target: 0.05, Retransmits: tc.rule}}}, time.Second, snap(0).At)
		got := c.Export().Ports[0]
		if math.Abs(got.DropProbability-tc.wantP) > 1e-9 || got.Retransmits != tc.wantRule {
			t.Errorf("restored %s at %.2f: %s at %.3f, want %s at %.3f", tc.rule, tc.p, got.Retransmits, got.DropProbability, tc.wantRule, tc.wantP)
		}
		if err := c.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		if again := c.Export().Ports[0]; again.DropProbability != got.DropProbability || again.Retransmits != got.Retransmits {
			t.Errorf("reloaded %s at %.3f: %s at %.3f", got.Retransmits, got.DropProbability, again.Retransmits, again.DropProbability)
		}
	}
}

// TestRestoreNodeLaw: the node's p comes back with its overload; a p
// without one (a state no build writes) is not restored, so the law is
// never left shedding while it believes it is not.
func TestRestoreNodeLaw(t *testing.T) {
	for _, tc := range []struct {
		over       bool
		p, wantP   float64
		wantOverOn bool
	}{
		{true, 0.4, 0.4, true},
		{false, 0.4, 0, false},
		{true, 0, 0, false},
	} {
		c := mustNew(t, cfgWith())
		c.Restore(State{DropProbability: tc.p, Overloaded: tc.over}, time.Second, snap(0).At)
		if got := c.Export(); math.Abs(got.DropProbability-tc.wantP) > 1e-9 || got.Overloaded != tc.wantOverOn || c.Shedding() != tc.wantOverOn {
			t.Errorf("restored p %.2f overloaded %v: p %.3f overloaded %v shedding %v, want %.3f %v", tc.p, tc.over,
				got.DropProbability, got.Overloaded, c.Shedding(), tc.wantP, tc.wantOverOn)
		}
	}
}
