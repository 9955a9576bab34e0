package rules

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/olcd/olcd/internal/loader/dpconfig"
	sy "github.com/olcd/olcd/internal/strictyaml"
)

// PortCaps are a port's static caps (`ports[].caps`), enforced in the
// datapath beside the adaptive law, the stricter winning
// (loader.PortCaps; docs/config.md, "Caps"). The zero value sets none.
type PortCaps struct {
	// Rate is the most new connections (UDP: requests) per second the
	// port admits, all sources together; 0 (default): no cap.
	Rate float64 `yaml:"rate" range:"[0, 1000000000]"`
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
	Rate float64 `yaml:"rate" range:"[0, 1000000000]"`
	// Burst as PortCaps.Burst.
	Burst int `yaml:"burst" range:"[0, 1000000000]"`
}

// validateCaps checks each port's caps beyond their keys' own shape: a rate
// is a rate, every source cap has a prefix of its own and a rate above 0,
// the ports' source caps fit the datapath's map, and the in-flight ceiling
// has response timing of every flow to count by.
func (d *checker) validateCaps(c *Config) {
	sources := 0
	for _, p := range c.Ports {
		sources += len(p.StaticCaps.Sources)
	}
	if sources > dpconfig.MaxCapSources {
		d.AddAt("ports", fmt.Sprintf("%d source caps across the ports, the datapath holds %d", sources, dpconfig.MaxCapSources), "cap a wider prefix instead of its parts")
	}
	for i, p := range c.Ports {
		at := sy.Join(d.EntryPath("ports", i), "caps")
		caps := p.StaticCaps
		if r := caps.Rate; r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
			d.AddAt(sy.Join(at, "rate"), fmt.Sprintf("%v is not a rate: must be 0 (no cap) or above", r), "")
		}
		if caps.InFlight > 0 && c.Datapath.ResponseSample != 1 {
			d.AddAt(sy.Join(at, "in_flight"), "requests in flight are response timing's count of every flow, and datapath.response_sample is not 1",
				"set datapath.response_sample: 1 (the default)")
		}
		first := map[netip.Prefix]int{}
		for j, sc := range caps.Sources {
			sp := d.EntryPath(sy.Join(at, "sources"), j)
			if !sc.Prefix.IsValid() {
				d.AddAt(sy.Join(sp, "prefix"), "missing", "every source cap needs a prefix, e.g. 198.51.100.0/24")
			} else if k, dup := first[sc.Prefix.Masked()]; dup {
				// The datapath keeps one cap per prefix: one of them would be dropped.
				d.AddAt(sy.Join(sp, "prefix"), fmt.Sprintf("%s is listed twice (also %s)", sc.Prefix, d.EntryPath(sy.Join(at, "sources"), k)), "keep one cap per prefix")
			} else {
				first[sc.Prefix.Masked()] = j
			}
			if !(sc.Rate > 0) || math.IsInf(sc.Rate, 0) {
				d.AddAt(sy.Join(sp, "rate"), fmt.Sprintf("must be a rate above 0 per second, got %v", sc.Rate), "e.g. rate: 50")
			}
		}
	}
}
