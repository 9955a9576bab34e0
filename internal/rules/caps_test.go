package rules

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/loader/dpconfig"
)

// TestFairAndCapsKeys: ports[].fair, fair_prefix4/6 and caps decode onto the
// port, default to none, and bad values are refused at their field.
func TestFairAndCapsKeys(t *testing.T) {
	doc := "ports:\n" +
		"  - port: 80\n" +
		"    fair: true\n" +
		"    fair_prefix4: 24\n" +
		"    fair_prefix6: 48\n" +
		"    caps: {rate: 100, burst: 10, in_flight: 50, sources: [{prefix: 198.51.100.0/24, rate: 5}, {prefix: 2001:db8::1, rate: 2.5, burst: 3}]}\n" +
		"  - 443\n"
	c, _, err := Parse([]byte(doc), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := c.Ports[0]
	want := []SourceCap{
		{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Rate: 5},
		{Prefix: netip.MustParsePrefix("2001:db8::1/128"), Rate: 2.5, Burst: 3},
	}
	if !p.Fair || p.FairPrefix4 != 24 || p.FairPrefix6 != 48 || p.StaticCaps.Rate != 100 || p.StaticCaps.Burst != 10 ||
		p.StaticCaps.InFlight != 50 || len(p.StaticCaps.Sources) != 2 || p.StaticCaps.Sources[0] != want[0] || p.StaticCaps.Sources[1] != want[1] {
		t.Errorf("port 80: %+v", p)
	}
	if q := c.Ports[1]; q.Fair || q.StaticCaps.Rate != 0 || len(q.StaticCaps.Sources) != 0 || q.FairPrefix4 != 0 {
		t.Errorf("port 443: %+v, want no fairness and no caps", q)
	}
	for _, tt := range []struct{ doc, want string }{
		{"ports: [{port: 80, fair: yes}]\n", "ports[0].fair: must be true or false"},
		{"ports: [{port: 80, fair_prefix4: 33}]\n", "ports[0].fair_prefix4: 33 is out of range"},
		{"ports: [{port: 80, fair_prefix6: 0}]\n", "ports[0].fair_prefix6: 0 is out of range"},
		{"ports: [{port: 80, caps: {rate: -1}}]\n", "ports[0].caps.rate: -1 is not a rate"},
		{"ports: [{port: 80, caps: {speed: 1}}]\n", "ports[0].caps.speed"},
		{"ports: [{port: 80, caps: {sources: [{rate: 5}]}}]\n", "ports[0].caps.sources[0].prefix: missing"},
		{"ports: [{port: 80, caps: {sources: [{prefix: 10.0.0.0/8, rate: 0}]}}]\n", "ports[0].caps.sources[0].rate: must be a rate above 0"},
		{"ports: [{port: 80, caps: {sources: [{prefix: 10.0.0.1/8, rate: 1}]}}]\n", "has bits set beyond the prefix length"},
		{"datapath: {response_sample: 0}\nports: [{port: 80, caps: {in_flight: 10}}]\n", "ports[0].caps.in_flight: requests in flight are response timing's count"},
		// The datapath keeps one cap per prefix: the second would win silently.
		{"ports: [{port: 80, caps: {sources: [{prefix: 198.51.100.0/24, rate: 50}, {prefix: 198.51.100.0/24, rate: 60}]}}]\n",
			"x.yaml:1: ports[0].caps.sources[1].prefix: 198.51.100.0/24 is listed twice (also ports[0].caps.sources[0])"},
		{manySources(dpconfig.MaxCapSources + 1), "1025 source caps across the ports, the datapath holds 1024"},
	} {
		_, _, err := Parse([]byte(tt.doc), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.doc, err, tt.want)
		}
	}
}

// manySources returns a config whose two ports have n source caps between
// them, each of its own /32.
func manySources(n int) string {
	var b strings.Builder
	for i, port := range []int{80, 443} {
		fmt.Fprintf(&b, "  - port: %d\n    caps:\n      sources:\n", port)
		for j := i; j < n; j += 2 {
			fmt.Fprintf(&b, "        - {prefix: 10.%d.%d.%d/32, rate: 1}\n", j>>16&255, j>>8&255, j&255)
		}
	}
	return "ports:\n" + b.String()
}
