package adaptive_test

import (
	"testing"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/plant"
	"github.com/olcd/olcd/internal/sampler"
)

// The plant of issue 16 (internal/plant): a backend's workers behind a FIFO
// accept queue, real clients (SYN retransmits with the kernel's timeouts,
// clients that give up, 64 closed-loop clients that block), the datapath's
// counts and response times per tick. These tests drive the controller
// with the default parameters plus a port with an auto response target,
// min_pass_rate and (for cpu) a cpu_busy guard, as the harness does.

const clientPort = 18080

// clientController returns the harness's controller: the embedded default
// parameters, the port's auto target, min_pass_rate 0.05 and, as a guard,
// cpu_busy at 0.93.
func clientController(t *testing.T, mutate func(*adaptive.Config)) *adaptive.Controller {
	t.Helper()
	cfg := adaptive.Config{Interval: 500 * time.Millisecond, Params: adaptive.DefaultParams()}
	cfg.Params.MinPassRate = 0.05
	cfg.Thresholds[sampler.CPUBusy] = 0.93
	cfg.Ports = []adaptive.PortConfig{{Key: adaptive.PortKey{Proto: adaptive.ProtoTCP, Port: clientPort},
		Class: adaptive.ClassNormal, Target: adaptive.ResponseTarget{Auto: true}}}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := adaptive.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// drive runs sc under c and returns the result.
func drive(c *adaptive.Controller, sc plant.Scenario) plant.Result {
	key := adaptive.PortKey{Proto: adaptive.ProtoTCP, Port: clientPort}
	return plant.Run(sc, func(o plant.Observation) float64 {
		s := sampler.Snapshot{At: adaptive.TraceOrigin.Add(time.Duration(o.T * float64(time.Second))), Interval: sc.Tick}
		s.Set(sampler.CPUBusy, o.CPUBusy)
		r := adaptive.PortResponse{Samples: uint64(o.Responses), Requests: float64(o.Requests)}
		if o.Responses >= 5 {
			r.Available, r.P95 = true, o.P95
		}
		d := c.Step(s, map[adaptive.PortKey]adaptive.PortStats{key: {
			New: o.New, Retransmits: o.Retransmits, Dropped: o.Dropped, Response: r}})
		return d.Ports[0].DropProbability
	})
}

// threeX is the harness's load: 0.5 C for 10 s, 3 C for 30 s, 0.5 C for 10 s.
func threeX(t float64) float64 {
	switch {
	case t < 10:
		return 0.5
	case t < 40:
		return 3
	}
	return 0.5
}

func TestClientsPlant(t *testing.T) {
	for _, b := range []plant.Backend{plant.CPU, plant.Pool, plant.PHP} {
		for _, k := range []plant.ClientKind{plant.OpenGiveup, plant.OpenRetry, plant.ClosedPool} {
			sc := plant.Scenario{Backend: b, Clients: k, Load: threeX, Pool: 64, LinearTimeouts: 4,
				Seconds: 50, Tick: 500 * time.Millisecond, Seed: 1, Noise: 0.01}
			res := drive(clientController(t, nil), sc)
			st := res.SteadyPart(15, 40)
			g := res.Goodput(10, 40) / res.Capacity
			t.Logf("%s-%s-3x: goodput %.3f C; steady: std(p) %.4f, goodput windows ≥ 0.8 mean %.0f%%, mean %.3f C, p99 %.0f ms",
				b.Name, k, g, st.PStd, 100*st.GoodShare, st.GoodputMean/res.Capacity, st.P99*1000)
		}
	}
}
