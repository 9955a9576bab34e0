package daemon

import (
	"testing"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
)

// TestKeepAliveStatus: the tick's request starts on open connections,
// scaled by the response sample, their share of the demand beside the new
// connections, and a port whose counters went back counted from zero.
func TestKeepAliveStatus(t *testing.T) {
	k := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}
	cases := []struct {
		name             string
		prev, cur        loader.Response
		sample           uint32
		newConns         uint64
		reusedS, resetsS float64
		share            float64
	}{
		{"every flow timed", loader.Response{Reused: 100, Resets: 10}, loader.Response{Reused: 400, Resets: 60}, 1, 100, 600, 100, 0.75},
		{"one flow in 4 timed", loader.Response{Reused: 100}, loader.Response{Reused: 150, Resets: 5}, 4, 200, 400, 40, 0.5},
		{"counters went back", loader.Response{Reused: 900}, loader.Response{Reused: 50}, 1, 50, 100, 0, 0.5},
		{"idle", loader.Response{}, loader.Response{}, 1, 0, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := keepAliveDeltas(loader.Stats{Response: map[olc.PortKey]loader.Response{k: tc.cur}},
				loader.Stats{Response: map[olc.PortKey]loader.Response{k: tc.prev}}, []olc.PortKey{k, {Proto: olc.ProtoTCP, Port: 81}}, tc.sample)
			if _, ok := d[olc.PortKey{Proto: olc.ProtoTCP, Port: 81}]; ok || len(d) != 1 {
				t.Fatalf("deltas %v: want the timed port alone", d)
			}
			kt, ok := d[k]
			ka := keepAliveStatus(true, kt, ok, tc.newConns, tc.cur, 0.5)
			if ka == nil || ka.ReusedPerS != tc.reusedS || ka.ResetsPerS != tc.resetsS || ka.ReusedShare != tc.share || !ka.RequestGate {
				t.Errorf("got %+v, want reused %v/s, resets %v/s, share %v", ka, tc.reusedS, tc.resetsS, tc.share)
			}
			if ka.Totals.Reused != tc.cur.Reused {
				t.Errorf("totals %+v, want the cumulative counters", ka.Totals)
			}
		})
	}
	if ka := keepAliveStatus(false, keepAliveTick{}, false, 10, loader.Response{}, 0.5); ka != nil {
		t.Errorf("a port not timed: %+v, want none", ka)
	}
	if d := keepAliveDeltas(loader.Stats{}, loader.Stats{}, []olc.PortKey{k}, 1); d != nil {
		t.Errorf("timing off: %v, want nil", d)
	}
}

// TestChangeKeepAliveCounts: a probability_change record's port group sums
// the request starts on open connections and the request gate's resets of
// the ticks folded into it, scaled by the sample; a port without them
// leaves the fields out.
func TestChangeKeepAliveCounts(t *testing.T) {
	gated, plain := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, olc.PortKey{Proto: olc.ProtoTCP, Port: 5432}
	info := func(k olc.PortKey) portTick {
		if k == gated {
			return portTick{action: "drop", dropped: 3, keepAlive: keepAliveTick{reused: 10, resets: 4, sample: 2}.counts()}
		}
		return portTick{action: "drop", dropped: 1}
	}
	var p pendingChanges
	for _, to := range []float64{0.2, 0.4} {
		p.add([]adaptive.Event{{Port: gated, Class: olc.ClassNormal, From: to - 0.2, To: to},
			{Port: plain, Class: olc.ClassCritical, From: to - 0.2, To: to}}, info)
	}
	args := p.args("enforce")
	var groups []changeGroup
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "ports" {
			groups = args[i+1].([]changeGroup)
		}
	}
	if len(groups) != 2 {
		t.Fatalf("groups %+v, want one per class", groups)
	}
	for _, g := range groups {
		want := [3]uint64{2, 0, 0}
		if g.Ports[0] == gated.String() {
			want = [3]uint64{6, 40, 16}
		}
		if got := [3]uint64{g.Dropped, g.RequestStarts, g.Resets}; got != want {
			t.Errorf("%s: dropped, request starts, resets %v, want %v", g.Ports[0], got, want)
		}
	}
}
