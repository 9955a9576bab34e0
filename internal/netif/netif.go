// Package netif picks the interfaces olcd's embedded default protects
// (interfaces: [] in the config): every interface a packet enters the host
// through, each exactly once, and only Ethernet-framed ones.
package netif

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// Default returns, in the links' order, the names of the links the embedded
// default attaches to (see selectInterfaces), and for each link left out
// other than down or loopback ones, the reason.
func Default(links []netlink.Link) (names []string, skipped map[string]string) {
	return selectInterfaces(linkInfos(links))
}

// linkInfos describes the links for selectInterfaces.
func linkInfos(links []netlink.Link) []ifaceInfo {
	byIndex := make(map[int]netlink.Link, len(links))
	for _, l := range links {
		byIndex[l.Attrs().Index] = l
	}
	infos := make([]ifaceInfo, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		info := ifaceInfo{
			name: a.Name, index: a.Index, kind: l.Type(), encap: a.EncapType, parent: a.ParentIndex,
			up: a.Flags&net.FlagUp != 0, loopback: a.Flags&net.FlagLoopback != 0,
		}
		if m, ok := byIndex[a.MasterIndex]; ok && a.MasterIndex != 0 {
			info.masterKind = m.Type()
		}
		infos = append(infos, info)
	}
	return infos
}

// ifaceInfo is what selectInterfaces needs to know of a link.
type ifaceInfo struct {
	name, kind, encap string // kind: netlink link type ("veth", "bridge", "vlan", ...); encap: "ether", "none", ...
	index, parent     int    // parent: the lower device of a vlan/macvlan/ipvlan, else 0
	masterKind        string // link type of the bridge/bond/VRF it is enslaved to, or ""
	up, loopback      bool
}

// selectInterfaces picks, among the links, those the embedded default
// attaches to: up, not loopback, Ethernet-framed (the datapath parses
// Ethernet; an L3 device such as WireGuard or tun hands it IP headers), and
// each packet on exactly one of them. A packet crosses the tc ingress hook
// of a bridge, bond or team port and then of the master, and of a parent
// device and then of its vlan, macvlan or ipvlan child: attaching both would
// count every new connection twice and shed it with twice the probability.
// So ports of those masters are skipped (the master is attached), and so
// are children whose parent is attached. skipped maps each link left out
// (other than down or loopback ones) to the reason.
func selectInterfaces(links []ifaceInfo) (out []string, skipped map[string]string) {
	skipped = map[string]string{}
	chosen := map[int]bool{}
	for _, l := range links {
		switch {
		case !l.up || l.loopback:
		case l.encap != "ether":
			skipped[l.name] = fmt.Sprintf("link type %q has no Ethernet header", l.encap)
		case l.masterKind == "bridge" || l.masterKind == "bond" || l.masterKind == "team" || l.masterKind == "openvswitch":
			skipped[l.name] = fmt.Sprintf("port of a %s, whose master is protected instead", l.masterKind)
		default:
			chosen[l.index] = true
		}
	}
	for _, l := range links {
		if !chosen[l.index] {
			continue
		}
		if stacked(l.kind) && chosen[l.parent] {
			skipped[l.name] = fmt.Sprintf("%s on a protected parent, which sees its packets first", l.kind)
			continue
		}
		out = append(out, l.name)
	}
	return out, skipped
}

// stacked reports whether a link of this kind receives what its parent
// device received, after the parent's tc ingress hook ran.
func stacked(kind string) bool {
	switch kind {
	case "vlan", "macvlan", "macvtap", "ipvlan", "ipvtap":
		return true
	}
	return false
}
