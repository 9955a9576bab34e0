package plant

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/trace"
)

// DriveTick is one tick of a driven run: what the plant showed and what
// the controller decided for the port.
type DriveTick struct {
	Observation
	// Port is the port's decision.
	Port adaptive.PortDecision
	// Decision is the whole decision (its reason, events, node p).
	Decision adaptive.Decision
	// Window is true for an onset window's decision between ticks (its
	// counts are the window's), false for a tick's.
	Window bool
}

// Drive runs sc under controller c, which must protect key: each tick's
// observation becomes the snapshot (cpu_busy) and the port's counts and
// response time the daemon hands the controller (the p95 available from
// minSamples responses on, as datapath.response_min_samples), and the
// port's drop probability goes back into the plant. each, when not nil,
// sees every tick.
func Drive(c *adaptive.Controller, sc Scenario, key olc.PortKey, minSamples int, each func(DriveTick)) (Result, error) {
	return DriveRestart(c, sc, key, minSamples, Restart{}, each)
}

// Restart is a restart of the daemon in a driven run: at At (seconds) the
// controller's State is exported (as the daemon's SIGTERM writes its state
// file) and the daemon is gone for Gap seconds, in which the datapath holds
// the drop probability last written and nothing sees the ticks and windows;
// then a new controller of the same config restores the State (Restore, age
// Gap) and gets the ticks and windows from there on. At 0: no restart.
type Restart struct {
	At, Gap float64
	// Restored, when not nil, sees the new controller once it restored.
	Restored func(*adaptive.Controller)
}

// DriveRestart is Drive with the daemon restarted as r says.
func DriveRestart(c *adaptive.Controller, sc Scenario, key olc.PortKey, minSamples int, r Restart, each func(DriveTick)) (Result, error) {
	idx := -1
	for i, pc := range c.Config().Ports {
		if pc.Key == key {
			idx = i
		}
	}
	if idx < 0 {
		return Result{}, fmt.Errorf("drive plant: the controller does not protect %s", key)
	}
	// The datapath treats a retransmitted SYN as the decision's
	// PortDecision.Retransmits asks: every one shed while p > 0, or, with
	// retransmits last, first attempts passing and retransmits at p.
	rule := olc.RetransmitsAsFirst
	retxP, firstP := sc.RetransmitP, sc.FirstP
	sc.RetransmitP = func(p float64) float64 {
		switch {
		case rule == olc.RetransmitsShed && p > 0:
			return 1
		case retxP != nil:
			return retxP(p)
		}
		return p
	}
	sc.FirstP = func(p float64) float64 {
		switch {
		case rule == olc.RetransmitsLast:
			return 0
		case firstP != nil:
			return firstP(p)
		}
		return p
	}
	// The datapath's ceiling on requests in flight: the last decision's,
	// held while the daemon is down.
	ceiling := 0
	sc.Ceiling, sc.CeilingFloor = func() int { return ceiling }, c.Config().Params.MinPassRate
	// gone reports whether the daemon is down at t (the datapath holds
	// its p), and replaces c by the restored controller once the gap is
	// over.
	var saved *adaptive.State
	restarted, held := false, 0.0
	gone := func(t float64) (bool, error) {
		if r.At <= 0 {
			return false, nil
		}
		if saved == nil && t > r.At {
			s := c.Export()
			saved = &s
		}
		switch {
		case saved == nil:
			return false, nil
		case t <= r.At+r.Gap:
			return true, nil
		case !restarted:
			nc, err := adaptive.New(c.Config())
			if err != nil {
				return false, err
			}
			nc.Restore(*saved, time.Duration(r.Gap*float64(time.Second)), at(t))
			c, restarted = nc, true
			if r.Restored != nil {
				r.Restored(nc)
			}
		}
		return false, nil
	}
	var failed error
	// The daemon's onset check between ticks: the window's counts and
	// measured queue, handed to Controller.Onset.
	var between func(Observation) (float64, bool)
	if sc.Window > 0 {
		between = func(o Observation) (float64, bool) {
			if down, err := gone(o.T); down || err != nil {
				failed = cmp.Or(failed, err)
				return 0, false
			}
			at := at(o.T)
			d, ok := c.Onset(at, sc.Window, map[olc.PortKey]adaptive.PortStats{key: {
				New: o.New, Retransmits: o.Retransmits, Dropped: o.Dropped, Ceiled: o.Ceiled,
				Response: adaptive.PortResponse{Samples: uint64(o.Responses), Requests: float64(o.Requests),
					Responses: float64(o.Responses), Inflight: float64(o.Inflight)}}})
			if !ok {
				return 0, false
			}
			if each != nil {
				each(DriveTick{Observation: o, Port: d.Ports[idx], Decision: d, Window: true})
			}
			rule, ceiling = d.Ports[idx].Retransmits, d.Ports[idx].InFlightCeiling
			held = d.Ports[idx].DropProbability
			return d.Ports[idx].DropProbability, true
		}
	}
	res := RunWindows(sc, func(o Observation) float64 {
		if down, err := gone(o.T); down || err != nil {
			failed = cmp.Or(failed, err)
			return held
		}
		s := olc.Snapshot{At: at(o.T), Interval: sc.Tick}
		s.Set(olc.CPUBusy, o.CPUBusy)
		r := adaptive.PortResponse{Samples: uint64(o.Responses), Requests: float64(o.Requests),
			Responses: float64(o.Responses), Inflight: float64(o.Inflight)}
		if o.Responses >= minSamples && o.Responses > 0 {
			r.Available, r.P95, r.Hist = true, o.P95, o.Hist
		}
		d := c.Step(s, map[olc.PortKey]adaptive.PortStats{key: {
			New: o.New, Retransmits: o.Retransmits, Dropped: o.Dropped, Ceiled: o.Ceiled, Response: r}})
		pd := d.Ports[idx]
		rule, ceiling = pd.Retransmits, pd.InFlightCeiling
		if each != nil {
			each(DriveTick{Observation: o, Port: pd, Decision: d})
		}
		held = pd.DropProbability
		return pd.DropProbability
	}, between)
	return res, failed
}

// at is the time of a plant's t seconds.
func at(t float64) time.Time { return trace.Origin.Add(time.Duration(t * float64(time.Second))) }

// Loads are the harness's load shapes, as multiples of C over time.
var Loads = map[string]func(t float64) float64{
	// 3x: 0.5 C for 10 s, 3 C for 30 s, 0.5 C for 10 s.
	"3x": func(t float64) float64 {
		switch {
		case t < 10:
			return 0.5
		case t < 40:
			return 3
		}
		return 0.5
	},
	// coldstart: idle for 5 s, then 1.5 C for 30 s.
	"coldstart": func(t float64) float64 {
		if t < 5 {
			return 0
		}
		return 1.5
	},
}

// Backends are the plant's backends by name.
var Backends = map[string]Backend{"cpu": CPU, "pool": Pool, "php": PHP, "quota": Quota}

// ParseScenario parses a harness scenario name, <backend>-<clients>-<load>
// (e.g. pool-closed-pool-3x, cpu-open-giveup-coldstart), into a Scenario
// with the harness's settings (64 closed-loop clients, linear SYN timeouts
// 4, 500 ms ticks, the onset check every 50 ms) and the overload phase's bounds (seconds).
func ParseScenario(name string, seed uint64) (sc Scenario, phase [2]float64, err error) {
	i := strings.Index(name, "-")
	j := strings.LastIndex(name, "-")
	if i < 0 || j <= i {
		return sc, phase, fmt.Errorf("scenario %q: want <backend>-<clients>-<load>, e.g. pool-closed-pool-3x", name)
	}
	b, ok := Backends[name[:i]]
	if !ok {
		return sc, phase, fmt.Errorf("scenario %q: unknown backend %q (cpu, pool, php, quota)", name, name[:i])
	}
	k, ok := ParseClientKind(name[i+1 : j])
	if !ok {
		return sc, phase, fmt.Errorf("scenario %q: unknown clients %q (open-giveup, open-retry, closed-pool)", name, name[i+1:j])
	}
	load, ok := Loads[name[j+1:]]
	if !ok {
		return sc, phase, fmt.Errorf("scenario %q: unknown load %q (3x, coldstart)", name, name[j+1:])
	}
	secs, phase := 50.0, [2]float64{10, 40}
	if name[j+1:] == "coldstart" {
		secs, phase = 35, [2]float64{5, 35}
	}
	return Scenario{Backend: b, Clients: k, Load: load, Pool: 64, LinearTimeouts: 4, Seconds: secs,
		Tick: 500 * time.Millisecond, Window: 50 * time.Millisecond, Seed: seed, Noise: 0.01}, phase, nil
}
