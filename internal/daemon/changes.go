package daemon

import (
	"cmp"
	"slices"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/olc"
)

// maxListedPorts bounds the port names one group of a probability_change
// record lists; the rest are counted ("more"). Every port of a class moves
// together, so at 100 ports the names would be most of the record.
const maxListedPorts = 16

// pendingChanges are the probability changes not yet written to the
// decision log: those of this tick, and of earlier ticks the rate limit
// folded. A port's from is the value last written, its to the latest.
type pendingChanges struct {
	last  adaptive.Event // the latest change: its tick's context
	node  *probChange    // the node-level p, when it changed
	ports map[olc.PortKey]portChange
	ticks int // ticks whose changes are held
	// response is the node's measured queue at the latest change
	// (responseValues), nil when responses are not timed.
	response map[string]any
}

// probChange is a p that moved from one value to another, passing through
// [lo, hi] (over the ticks folded into it).
type probChange struct{ from, to, lo, hi float64 }

func newProbChange(from float64) probChange {
	return probChange{from: from, to: from, lo: from, hi: from}
}

func (c *probChange) set(to float64) { c.to, c.lo, c.hi = to, min(c.lo, to), max(c.hi, to) }

type portChange struct {
	class  olc.Class
	action string // the port's action (drop, reject, mark) at the latest change
	// SYNs the port dropped and rejected in the ticks of its changes.
	dropped, rejected uint64
	// keepAlive: request starts on open connections and those the request
	// gate reset in those ticks (sampled flows, keepalive.go).
	keepAlive keepAliveCounts
	capped    uint64
	probChange
}

// portTick is what a port did in the tick that changed its p.
type portTick struct {
	action                    string
	dropped, rejected, capped uint64
	keepAlive                 keepAliveCounts
}

// changeGroup is the ports of one class that moved from one p to another:
// one entry of a probability_change record's "ports".
type changeGroup struct {
	Class string  `json:"class"`
	From  float64 `json:"from"`
	To    float64 `json:"to"`
	Count int     `json:"count"`
	// Ports names up to maxListedPorts of them ("tcp/80"), lowest first.
	Ports []string `json:"ports"`
	// More counts the ports not named.
	More int `json:"more,omitempty"`
	// Range is the lowest and highest p of the folded ticks (records with
	// folded_ticks only).
	Range *[2]float64 `json:"range,omitempty"`
	// Action is what the ports do to what they shed; Dropped and Rejected
	// count the SYNs they dropped and answered with a reset in the ticks
	// of the change.
	Action   string `json:"action,omitempty"`
	Dropped  uint64 `json:"dropped"`
	Rejected uint64 `json:"rejected"`
	// RequestStarts and Resets count the request starts on open
	// connections, and those the request gate reset, in the ticks of the
	// change (timed ports, scaled by the response sample; absent when
	// none).
	RequestStarts uint64 `json:"request_starts_reused,omitempty"`
	Resets        uint64 `json:"request_resets,omitempty"`
	// Capped counts those of Dropped a static cap refused (reason "cap",
	// ports[].caps), not the adaptive law.
	Capped uint64 `json:"capped,omitempty"`
}

// add merges one tick's probability_change events; info tells what each
// changed port did in the tick (nil: nothing known).
func (p *pendingChanges) add(evs []adaptive.Event, info func(olc.PortKey) portTick) {
	if len(evs) == 0 {
		return
	}
	if p.ports == nil {
		p.ports = map[olc.PortKey]portChange{}
	}
	for _, ev := range evs {
		if ev.Port == (olc.PortKey{}) {
			if p.node == nil {
				c := newProbChange(ev.From)
				p.node = &c
			}
			p.node.set(ev.To)
		} else {
			pc, ok := p.ports[ev.Port]
			if !ok {
				pc = portChange{class: ev.Class, probChange: newProbChange(ev.From)}
			}
			pc.set(ev.To)
			if info != nil {
				t := info(ev.Port)
				pc.action = t.action
				pc.dropped += t.dropped
				pc.rejected += t.rejected
				pc.keepAlive.add(t.keepAlive)
				pc.capped += t.capped
			}
			p.ports[ev.Port] = pc
		}
		p.last = ev
	}
	p.ticks++
}

// args renders the record: the context of the latest tick, the node's
// change, the ports grouped by class and values, and how many earlier
// ticks' changes were folded into it.
func (p *pendingChanges) args(mode string) []any {
	ev := p.last
	args := []any{
		"at", ev.At,
		"reason", ev.Reason,
		"pressure", round4(ev.Pressure),
		"drop_probability", round4(ev.DropProbability),
		"mode", mode,
		"signals", signalValues(ev.Signals),
	}
	if !ev.OverloadSince.IsZero() {
		args = append(args, "overload_since", ev.OverloadSince)
	}
	if p.response != nil {
		args = append(args, "response_time", p.response)
	}
	if p.node != nil {
		node := map[string]any{"from": round4(p.node.from), "to": round4(p.node.to)}
		if p.ticks > 1 {
			node["range"] = [2]float64{round4(p.node.lo), round4(p.node.hi)}
		}
		args = append(args, "node", node)
	}
	type groupKey struct {
		class            olc.Class
		action           string
		from, to, lo, hi float64
	}
	keys := slices.SortedFunc(func(yield func(olc.PortKey) bool) {
		for k := range p.ports {
			if !yield(k) {
				return
			}
		}
	}, func(a, b olc.PortKey) int {
		return cmp.Or(cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
	})
	var groups []changeGroup
	index := map[groupKey]int{}
	for _, k := range keys {
		pc := p.ports[k]
		gk := groupKey{pc.class, pc.action, round4(pc.from), round4(pc.to), round4(pc.lo), round4(pc.hi)}
		i, ok := index[gk]
		if !ok {
			i = len(groups)
			index[gk] = i
			groups = append(groups, changeGroup{Class: pc.class.String(), Action: pc.action, From: gk.from, To: gk.to, Ports: []string{}})
			if p.ticks > 1 {
				groups[i].Range = &[2]float64{gk.lo, gk.hi}
			}
		}
		g := &groups[i]
		g.Count++
		g.Dropped += pc.dropped
		g.Rejected += pc.rejected
		g.RequestStarts += pc.keepAlive.reused
		g.Resets += pc.keepAlive.resets
		g.Capped += pc.capped
		if len(g.Ports) < maxListedPorts {
			g.Ports = append(g.Ports, k.String())
		} else {
			g.More++
		}
	}
	if len(groups) > 0 {
		args = append(args, "ports", groups)
	}
	if p.ticks > 1 {
		args = append(args, "folded_ticks", p.ticks-1)
	}
	return args
}

// recordChanges offers the pending changes, with this tick's events, to
// the decision log; what its rate limit refuses stays pending.
func (e *engine) recordChanges(evs []adaptive.Event) {
	e.changes.add(evs, e.portTick)
	if len(evs) > 0 {
		e.changes.response = responseValues(&e.last.snap)
	}
	if e.changes.ticks == 0 {
		return
	}
	if e.dlog.RecordChange(e.changes.args(e.cfg.Mode.String())...) {
		e.changes = pendingChanges{}
		return
	}
	if len(evs) > 0 {
		e.metrics.decisionsFolded.WithLabelValues("probability_change").Inc()
	}
}

// portTick tells what the protected port k did in the last tick.
func (e *engine) portTick(k olc.PortKey) portTick {
	for _, p := range e.ports {
		if p.Key == k {
			dl := e.last.deltas[k]
			return portTick{action: p.Action.String(), dropped: dl.Dropped, rejected: dl.Rejected, capped: dl.Capped,
				keepAlive: e.last.keepAlive[k].counts()}
		}
	}
	return portTick{}
}
