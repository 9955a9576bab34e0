package testutil

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestFreeDocRange: the range is one of DocRanges (never TEST-NET-1) and
// overlaps none of the host's addresses.
func TestFreeDocRange(t *testing.T) {
	p, err := FreeDocRange()
	if err != nil {
		t.Skipf("no free range on this host: %v", err)
	}
	if p.Overlaps(netip.MustParsePrefix("192.0.2.0/24")) {
		t.Fatalf("picked %s, inside TEST-NET-1", p)
	}
	known := false
	for _, r := range DocRanges {
		known = known || r == p
	}
	if !known {
		t.Fatalf("picked %s, not one of %v", p, DocRanges)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipNetPrefix(a.IPNet).Overlaps(p) {
			t.Fatalf("picked %s, but %s is on %d", p, a.IPNet, a.LinkIndex)
		}
	}
}

// TestFreeDocRangeTaken: in a namespace whose interface holds an address in
// each documentation range, FreeDocRange fails naming the interface and
// the address that holds each range.
func TestFreeDocRangeTaken(t *testing.T) {
	RequireRoot(t, "creates a network namespace")
	ns, err := NewNetns()
	Must(t, err)
	defer ns.Close()
	err = InNetns(ns, func() error {
		// A veth pair: the kernel the tests run on may have no dummy.
		l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "holder0"}, PeerName: "holder1"}
		if err := netlink.LinkAdd(l); err != nil {
			return err
		}
		for _, r := range DocRanges {
			a := &netlink.Addr{IPNet: &net.IPNet{IP: r.Addr().Next().AsSlice(), Mask: net.CIDRMask(30, 32)}}
			if err := netlink.AddrAdd(l, a); err != nil {
				return err
			}
		}
		_, err := FreeDocRange()
		if err == nil {
			return errors.New("FreeDocRange found a free range")
		}
		for _, want := range []string{"198.51.100.0/24 by address 198.51.100.1/30 on holder0", "203.0.113.0/24 by address 203.0.113.1/30 on holder0"} {
			if !strings.Contains(err.Error(), want) {
				return fmt.Errorf("error %q does not say %q", err.Error(), want)
			}
		}
		return nil
	})
	Must(t, err)
}

// TestNewNet: the peer reaches a listener on the node, and cleanup removes
// the namespaces (named ones from /run/netns) and the veth.
func TestNewNet(t *testing.T) {
	for _, named := range []bool{false, true} {
		var n *Net
		t.Run(map[bool]string{false: "anonymous", true: "named"}[named], func(t *testing.T) {
			n = NewNet(t, NetOptions{Named: named})
			if named != (n.Node != "" && n.Peer != "") {
				t.Fatalf("Named %v: namespaces %q, %q", named, n.Node, n.Peer)
			}
			var ln net.Listener
			Must(t, n.InNode(func() (err error) {
				ln, err = net.Listen("tcp4", netip.AddrPortFrom(n.NodeIP, 0).String())
				return err
			}))
			defer ln.Close()
			var c net.Conn
			Must(t, n.InPeer(func() (err error) {
				c, err = net.DialTimeout("tcp4", ln.Addr().String(), 3*time.Second)
				return err
			}))
			c.Close()
			// The test's own namespace has neither end.
			for _, name := range []string{n.NodeIf, n.PeerIf} {
				if _, err := netlink.LinkByName(name); err == nil {
					t.Errorf("%s is in the test's own namespace", name)
				}
			}
		})
		if n == nil {
			continue
		}
		for _, name := range []string{n.Node, n.Peer} {
			if name == "" {
				continue
			}
			if _, err := os.Stat("/run/netns/" + name); !os.IsNotExist(err) {
				t.Errorf("/run/netns/%s after cleanup: %v", name, err)
			}
		}
	}
}
