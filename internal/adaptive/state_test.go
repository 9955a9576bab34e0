package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// TestStateRoundTrip: a controller restored from another's State sheds
// what it shed, with its capacity and no-load p95, from its first tick.
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
	s := a.Export()
	b := mustNew(t, cfg)
	b.Restore(s, time.Second, d.At)
	got := b.Export()
	if got.Ports[0].DropProbability != s.Ports[0].DropProbability || got.Ports[0].Baseline != s.Ports[0].Baseline ||
		math.Abs(got.Ports[0].Capacity-s.Ports[0].Capacity) > 1e-9 || s.Ports[0].Capacity <= 0 || s.Ports[0].DropProbability <= 0 {
		t.Errorf("restored %+v, exported %+v", got.Ports[0], s.Ports[0])
	}
	if got.Ports[0].CapacityAge < s.Ports[0].CapacityAge+1 {
		t.Errorf("capacity age %v after 1 s, exported %v", got.Ports[0].CapacityAge, s.Ports[0].CapacityAge)
	}
}
