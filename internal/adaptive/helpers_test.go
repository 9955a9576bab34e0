package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/trace"
)

// sig is one signal value (or threshold) of a hand-made tick.
type sig struct {
	s olc.Signal
	v float64
}

// seconds converts seconds to a Duration, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// snap returns a snapshot at trace.Origin + t seconds with the given values
// and a 500 ms interval.
func snap(t float64, vals ...sig) olc.Snapshot {
	s := olc.Snapshot{At: trace.Origin.Add(seconds(t)), Interval: 500 * time.Millisecond}
	for _, v := range vals {
		s.Set(v.s, v.v)
	}
	return s
}

// cfgWith returns a controller config with default params and the given
// thresholds.
func cfgWith(th ...sig) Config {
	cfg := Config{Interval: 500 * time.Millisecond, Params: DefaultParams()}
	for _, x := range th {
		cfg.Thresholds[x.s] = x.v
	}
	return cfg
}

func mustNew(t *testing.T, cfg Config) *Controller {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// onePort returns the step of a controller of cfg protecting key alone
// with target tgt: one 0.5 s tick of st.
func onePort(t *testing.T, cfg Config, key olc.PortKey, tgt ResponseTarget) func(st PortStats) Decision {
	t.Helper()
	cfg.Ports = []PortConfig{{Key: key, Class: olc.ClassNormal, Target: tgt}}
	c := mustNew(t, cfg)
	at := 0.0
	return func(st PortStats) Decision {
		at += 0.5
		return c.Step(snap(at), map[olc.PortKey]PortStats{key: st})
	}
}

// run feeds cpu_busy values (NaN: unavailable) one per 500 ms tick and
// returns the decisions.
func run(c *Controller, busy ...float64) []Decision {
	out := make([]Decision, len(busy))
	for i, b := range busy {
		s := snap(float64(i) * 0.5)
		if !math.IsNaN(b) {
			s.Set(olc.CPUBusy, b)
		}
		out[i] = c.Step(s, nil)
	}
	return out
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// FirstP returns the drop probability a first attempt meets (0..1): d's
// DropProbability, but 0 under retransmits last, where first attempts all
// pass. Exported for the adaptive_test package's tests.
func FirstP(d PortDecision) float64 {
	if d.Retransmits == olc.RetransmitsLast {
		return 0
	}
	return d.DropProbability
}
