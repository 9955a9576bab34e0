package rules

import (
	"fmt"
	"math"
	"net/netip"
	"reflect"
)

// PortCaps are a port's static caps (`ports[].caps`), enforced in the
// datapath beside the adaptive law, the stricter winning
// (loader.PortCaps; docs/config.md, "Caps"). The zero value sets none.
type PortCaps struct {
	// Rate is the most new connections (UDP: requests) per second the
	// port admits, all sources together; 0 (default): no cap.
	Rate float64 `yaml:"rate"`
	// Burst is how many above Rate may come at once; 0 (default): a
	// tenth of a second's worth.
	Burst int `yaml:"burst" range:"[0, 1000000000]"`
	// InFlight is the most requests in flight the port may have (response
	// timing's count); at it, new work is refused until it falls. 0
	// (default): no ceiling. Needs datapath.response_sample 1.
	InFlight int `yaml:"in_flight" range:"[0, 1000000000]"`
	// Sources are ceilings for known heavy callers, each a prefix with its
	// own rate: `{prefix: 198.51.100.0/24, rate: 50}`.
	Sources []SourceCap `yaml:"sources"`
}

// SourceCap is one entry of ports[].caps.sources.
type SourceCap struct {
	// Prefix is the source prefix (a bare address is a host prefix).
	Prefix netip.Prefix `yaml:"prefix"`
	// Rate is its most new connections per second to the port, > 0.
	Rate float64 `yaml:"rate"`
	// Burst as PortCaps.Burst.
	Burst int `yaml:"burst" range:"[0, 1000000000]"`
}

// decodeYAML decodes one `{prefix, rate, burst}` of caps.sources.
func (c *SourceCap) decodeYAML(d *decoder, n *node, field string) bool {
	ok := d.fields(n, reflect.ValueOf(c).Elem(), field, schemaOf(reflect.TypeFor[SourceCap]()))
	if _, has := d.pos[join(field, "prefix")]; ok && !has {
		d.add(n, join(field, "prefix"), "missing", "every source cap needs a prefix, e.g. 198.51.100.0/24")
		ok = false
	}
	if _, has := d.pos[join(field, "rate")]; ok && (!has || !(c.Rate > 0) || math.IsInf(c.Rate, 0)) {
		d.add(n, join(field, "rate"), fmt.Sprintf("must be a rate above 0 per second, got %v", c.Rate), "e.g. rate: 50")
		ok = false
	}
	return ok
}

// validateCaps checks each port's caps beyond their keys' own shape.
func (d *decoder) validateCaps(c *Config) {
	for i, p := range c.Ports {
		at := join(d.entryPath("ports", i), "caps")
		if r := p.Caps.Rate; r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
			d.addAt(join(at, "rate"), fmt.Sprintf("%v is not a rate: must be 0 (no cap) or above", r), "")
		}
		if p.Caps.InFlight > 0 && c.Datapath.ResponseSample != 1 {
			d.addAt(join(at, "in_flight"), "requests in flight are response timing's count of every flow, and datapath.response_sample is not 1",
				"set datapath.response_sample: 1 (the default)")
		}
	}
}
