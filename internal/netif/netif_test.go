package netif

import (
	"slices"
	"strings"
	"testing"
)

// TestSelectInterfaces: the embedded default attaches to every interface a
// packet enters the host through exactly once, and only to Ethernet ones.
func TestSelectInterfaces(t *testing.T) {
	eth := func(name string, index int) ifaceInfo {
		return ifaceInfo{name: name, index: index, kind: "device", encap: "ether", up: true}
	}
	with := func(l ifaceInfo, f func(*ifaceInfo)) ifaceInfo { f(&l); return l }
	tests := []struct {
		name    string
		links   []ifaceInfo
		want    []string
		skipped map[string]string // name → a word of the reason
	}{
		{"plain NICs", []ifaceInfo{
			{name: "lo", index: 1, kind: "device", encap: "loopback", up: true, loopback: true},
			eth("eth0", 2), eth("eth1", 3),
			with(eth("eth2", 4), func(l *ifaceInfo) { l.up = false }),
		}, []string{"eth0", "eth1"}, map[string]string{}},
		{"L3 devices", []ifaceInfo{
			eth("eth0", 2),
			{name: "wg0", index: 3, kind: "wireguard", encap: "none", up: true},
			{name: "tunl0", index: 4, kind: "ipip", encap: "ipip", up: true},
		}, []string{"eth0"}, map[string]string{"wg0": "Ethernet", "tunl0": "Ethernet"}},
		{"bridge with ports (docker0 and its veths)", []ifaceInfo{
			eth("eth0", 2),
			with(eth("docker0", 3), func(l *ifaceInfo) { l.kind = "bridge" }),
			with(eth("veth1a", 4), func(l *ifaceInfo) { l.kind, l.masterKind = "veth", "bridge" }),
			with(eth("veth2b", 5), func(l *ifaceInfo) { l.kind, l.masterKind = "veth", "bridge" }),
		}, []string{"eth0", "docker0"}, map[string]string{"veth1a": "bridge", "veth2b": "bridge"}},
		{"bond", []ifaceInfo{
			with(eth("bond0", 2), func(l *ifaceInfo) { l.kind = "bond" }),
			with(eth("eth0", 3), func(l *ifaceInfo) { l.masterKind = "bond" }),
			with(eth("eth1", 4), func(l *ifaceInfo) { l.masterKind = "bond" }),
		}, []string{"bond0"}, map[string]string{"eth0": "bond", "eth1": "bond"}},
		{"vlan and macvlan on a protected parent", []ifaceInfo{
			eth("eth0", 2),
			with(eth("eth0.100", 3), func(l *ifaceInfo) { l.kind, l.parent = "vlan", 2 }),
			with(eth("mv0", 4), func(l *ifaceInfo) { l.kind, l.parent = "macvlan", 2 }),
		}, []string{"eth0"}, map[string]string{"eth0.100": "parent", "mv0": "parent"}},
		{"vlan whose parent is not attached", []ifaceInfo{
			with(eth("eth0", 2), func(l *ifaceInfo) { l.masterKind = "bond" }),
			with(eth("bond0", 3), func(l *ifaceInfo) { l.kind = "bond" }),
			with(eth("bond0.7", 4), func(l *ifaceInfo) { l.kind, l.parent = "vlan", 3 }),
			with(eth("eth9.5", 5), func(l *ifaceInfo) { l.kind, l.parent = "vlan", 99 }),
		}, []string{"bond0", "eth9.5"}, map[string]string{"eth0": "bond", "bond0.7": "parent"}},
		{"VRF slaves stay (the VRF device has no tc ingress of its own)", []ifaceInfo{
			with(eth("vrf-blue", 2), func(l *ifaceInfo) { l.kind = "vrf" }),
			with(eth("eth0", 3), func(l *ifaceInfo) { l.masterKind = "vrf" }),
		}, []string{"vrf-blue", "eth0"}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, skipped := selectInterfaces(tt.links)
			if !slices.Equal(got, tt.want) {
				t.Errorf("selected %q, want %q", got, tt.want)
			}
			if len(skipped) != len(tt.skipped) {
				t.Errorf("skipped %v, want %v", skipped, tt.skipped)
			}
			for name, word := range tt.skipped {
				if !strings.Contains(skipped[name], word) {
					t.Errorf("%s skipped for %q, want a reason mentioning %q", name, skipped[name], word)
				}
			}
		})
	}
}
