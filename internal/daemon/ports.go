package daemon

import (
	"cmp"
	"slices"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/sampler"
)

// discovery is what the last discovery of listening ports found, under
// ports: auto: the listeners the status shows and how many of them found
// no room in the datapath's maps.
type discovery struct {
	listening []uint16 // TCP ports listening on a non-loopback address, as last discovered
	leftOut   int      // discovered ports the last discovery had no room for
	err       error    // the last discovery's error (sock_diag unreadable); nil when it listed the listeners
}

// portSource is the status's word for where cfg's ports come from.
func portSource(cfg *rules.Config) string {
	if cfg.PortsAuto {
		return "auto"
	}
	return "config"
}

// portPolicy is the loader's policy for a configured port under cfg (the
// entry's own, with the global mode and action resolved), with no drop
// probability yet (program writes the one in force).
func portPolicy(cfg *rules.Config, p rules.Port) loader.PortPolicy {
	pp := p.Policy(cfg.Mode, cfg.Action.Kind)
	pp.Caps = loader.PortCaps{Rate: p.StaticCaps.Rate, Burst: p.StaticCaps.Burst, InFlight: p.StaticCaps.InFlight}
	return pp
}

// sourceCaps are cfg's per-port source prefix caps, for the loader.
func sourceCaps(cfg *rules.Config) map[olc.PortKey][]loader.SourceCap {
	m := make(map[olc.PortKey][]loader.SourceCap)
	for _, p := range cfg.Ports {
		for _, s := range p.StaticCaps.Sources {
			m[p.Key] = append(m[p.Key], loader.SourceCap{Prefix: s.Prefix, Rate: s.Rate, Burst: s.Burst})
		}
	}
	return m
}

// capSetter is the part of the loader's datapath that takes source caps
// and ceilings on requests in flight; a datapath without it (tests' fakes)
// enforces no such caps.
type capSetter interface {
	SetSourceCaps(m map[olc.PortKey][]loader.SourceCap) error
	SetInFlightCeilings(m map[olc.PortKey]int, floor float64) error
}

// The loader's datapath is a capSetter: a signature that drifts must not
// turn the caps off unnoticed.
var _ capSetter = (*loader.Datapath)(nil)

// resolvePorts returns the ports cfg protects: the configured list, or under
// ports: auto every TCP port with a listener on a non-loopback address, minus
// exception ports.
func (e *engine) resolvePorts(cfg *rules.Config) []loader.PortPolicy {
	if !cfg.PortsAuto {
		out := make([]loader.PortPolicy, 0, len(cfg.Ports))
		for _, p := range cfg.Ports {
			out = append(out, portPolicy(cfg, p))
		}
		return out
	}
	listeners, err := sampler.Listeners()
	e.found.err = err
	if err != nil {
		e.log.Error("discover listening ports", "err", err)
		e.metrics.sampleErrors.WithLabelValues(sampler.SourceSockDiag).Inc()
		// Keep protecting what was found before rather than nothing.
		var out []loader.PortPolicy
		if e.cfg == nil || !e.cfg.PortsAuto {
			return out // the ports in force were configured, not found
		}
		for _, p := range e.ports {
			if !cfg.ExemptPort(p.Key) {
				p.Mode, p.Action = cfg.Mode, cfg.Action.Kind
				out = append(out, p)
			}
		}
		return out
	}
	e.found.listening = listeningPorts(listeners)
	found := autoPorts(cfg, listeners)
	kept := capPorts(found, e.ports, e.limits.maxPorts)
	if left := len(found) - len(kept); left != e.found.leftOut {
		e.found.leftOut = left
		if left > 0 {
			e.log.Warn("more listening ports than datapath.max_ports: some are not protected (raise max_ports and restart)",
				"listening", len(found), "max_ports", e.limits.maxPorts, "left_out", left)
		}
	}
	return kept
}

// capPorts keeps at most max of the discovered ports (all when max <= 0):
// those protected now first, so that a new listener never takes the place
// of one already protected, then the lowest port numbers. The result is
// sorted by port like autoPorts's.
func capPorts(found, current []loader.PortPolicy, max int) []loader.PortPolicy {
	if max <= 0 || len(found) <= max {
		return found
	}
	protected := make(map[olc.PortKey]bool, len(current))
	for _, p := range current {
		protected[p.Key] = true
	}
	kept := make([]loader.PortPolicy, 0, max)
	for _, keepOld := range []bool{true, false} {
		for _, p := range found {
			if len(kept) < max && protected[p.Key] == keepOld {
				kept = append(kept, p)
			}
		}
	}
	slices.SortFunc(kept, func(a, b loader.PortPolicy) int { return cmp.Compare(a.Key.Port, b.Key.Port) })
	return kept
}

// listeningPorts returns the TCP ports with a listener on a non-loopback
// address, sorted, each once: what ports: auto considers.
func listeningPorts(listeners []sampler.Listener) []uint16 {
	var out []uint16
	for _, l := range listeners {
		if port := l.Addr.Port(); !l.Addr.Addr().Unmap().IsLoopback() && port != 0 && !slices.Contains(out, port) {
			out = append(out, port)
		}
	}
	slices.Sort(out)
	return out
}

// exemptListeners returns, under ports: auto, the listening ports left
// unprotected because an exception names them, with the list that does.
func exemptListeners(cfg *rules.Config, listening []uint16) []api.ExemptListener {
	if !cfg.PortsAuto {
		return nil
	}
	var out []api.ExemptListener
	for _, port := range listening {
		key := olc.PortKey{Proto: olc.ProtoTCP, Port: port}
		if why := cfg.ExemptReason(key); why != "" {
			out = append(out, api.ExemptListener{Proto: key.Proto.String(), Port: port, Reason: why})
		}
	}
	return out
}

// autoPorts turns listeners into class-normal TCP ports: a listener on a
// loopback address serves only this host and is never protected, nor is an
// exempt port (exceptions.ports, or a management port such as SSH: an
// operator must reach an overloaded node); port numbers are deduplicated
// across addresses and families.
func autoPorts(cfg *rules.Config, listeners []sampler.Listener) []loader.PortPolicy {
	seen := map[uint16]bool{}
	var out []loader.PortPolicy
	for _, l := range listeners {
		addr := l.Addr.Addr().Unmap()
		port := l.Addr.Port()
		if addr.IsLoopback() || port == 0 || seen[port] {
			continue
		}
		key := olc.PortKey{Proto: olc.ProtoTCP, Port: port}
		if cfg.ExemptPort(key) {
			continue
		}
		seen[port] = true
		out = append(out, loader.PortPolicy{Key: key, Class: olc.ClassNormal, Mode: cfg.Mode, Action: cfg.Action.Kind})
	}
	slices.SortFunc(out, func(a, b loader.PortPolicy) int { return cmp.Compare(a.Key.Port, b.Key.Port) })
	return out
}

func diffPorts(old, cur []loader.PortPolicy) (added, removed []string) {
	has := func(ps []loader.PortPolicy, k olc.PortKey) bool {
		return slices.ContainsFunc(ps, func(p loader.PortPolicy) bool { return p.Key == k })
	}
	for _, p := range cur {
		if !has(old, p.Key) {
			added = append(added, p.Key.String())
		}
	}
	for _, p := range old {
		if !has(cur, p.Key) {
			removed = append(removed, p.Key.String())
		}
	}
	return added, removed
}

func controllerPorts(ports []loader.PortPolicy) []adaptive.PortConfig {
	out := make([]adaptive.PortConfig, len(ports))
	for i, p := range ports {
		out[i] = adaptive.PortConfig{Key: p.Key, Class: p.Class}
	}
	return out
}

func tcpPorts(ports []loader.PortPolicy) []uint16 {
	var out []uint16
	for _, p := range ports {
		if p.Key.Proto == olc.ProtoTCP {
			out = append(out, p.Key.Port)
		}
	}
	return out
}

// portNames renders ports for the log: ["tcp/80", "tcp/443"].
func portNames(ports []loader.PortPolicy) []string {
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = p.Key.String()
	}
	return out
}
