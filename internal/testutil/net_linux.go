package testutil

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// DocRanges are the documentation ranges (RFC 5737) a test network may use:
// TEST-NET-2 and TEST-NET-3. TEST-NET-1 (192.0.2.0/24) is left out on
// purpose: test machines sit in it themselves (this project's CI uplink is
// 192.0.2.2/24), so a test that assigned it could reach a real network.
var DocRanges = []netip.Prefix{
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
}

// FreeDocRange returns the first of DocRanges that no address or route (in
// any routing table) of the calling thread's network namespace overlaps.
// When none is free, the error names what holds each range: an interface
// left by a killed test run (.ci/run removes ours before the tests) is the
// usual one.
func FreeDocRange() (netip.Prefix, error) {
	type use struct {
		p  netip.Prefix
		by string // "address 198.51.100.1/30 on olov0ed03h", "route … dev …"
	}
	var used []use
	ifname := func(index int) string {
		if l, err := netlink.LinkByIndex(index); err == nil {
			return l.Attrs().Name
		}
		return fmt.Sprintf("ifindex %d", index)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		p := ipNetPrefix(a.IPNet)
		used = append(used, use{p, fmt.Sprintf("address %s on %s", p, ifname(a.LinkIndex))})
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		// The default route (nil or 0.0.0.0/0) overlaps everything and
		// says nothing about what is in use.
		if r.Dst != nil {
			if p := ipNetPrefix(r.Dst); p.Bits() > 0 {
				used = append(used, use{p, fmt.Sprintf("route %s dev %s (table %d)", p, ifname(r.LinkIndex), r.Table)})
			}
		}
	}
	var taken []string
	for _, r := range DocRanges {
		holder := ""
		for _, u := range used {
			if u.p.IsValid() && u.p.Overlaps(r) {
				holder = u.by
				break
			}
		}
		if holder == "" {
			return r, nil
		}
		taken = append(taken, fmt.Sprintf("%s by %s", r, holder))
	}
	return netip.Prefix{}, fmt.Errorf("every documentation range is in use on this host: %s", strings.Join(taken, "; "))
}

func ipNetPrefix(n *net.IPNet) netip.Prefix {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones)
}

// InNetns runs fn on a locked OS thread switched into ns, then switches
// back. Sockets, netlink handles and bpf() attachments fn creates belong to
// ns. With netns.None() the thread stays where it is, free for fn to switch
// (netns.New does). If switching back fails the thread stays locked and
// dies with its goroutine, so no other goroutine inherits the namespace.
func InNetns(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if ns.IsOpen() {
			if err := netns.Set(ns); err != nil {
				errc <- fmt.Errorf("enter netns: %w", err)
				return
			}
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to the original netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// NewNetns creates an anonymous network namespace. It lives as long as the
// handle and any socket in it, so a killed test leaves nothing behind.
func NewNetns() (netns.NsHandle, error) {
	ns := netns.None()
	err := InNetns(netns.None(), func() error {
		var err error
		ns, err = netns.New()
		return err
	})
	return ns, err
}

// newNamedNetns creates a network namespace bound at /run/netns/name, as
// `ip netns add` does, so that commands can be run in it by name.
func newNamedNetns(name string) (netns.NsHandle, error) {
	ns := netns.None()
	err := InNetns(netns.None(), func() error {
		var err error
		ns, err = netns.NewNamed(name)
		return err
	})
	return ns, err
}

// NetOptions configures NewNet and Create.
type NetOptions struct {
	// Named binds the namespaces under /run/netns (Net.Node, Net.Peer), for
	// tests that run commands in them (ip netns exec). Anonymous otherwise.
	Named bool
	// NodeHere keeps the node end in the calling thread's namespace (a
	// harness whose servers and olcd run on the host) instead of a new
	// namespace; Net.Node is then empty.
	NodeHere bool
	// Peer, NodeIf and PeerIf, when set, are used as the peer namespace's
	// name (with Named) and the veth ends' names instead of generated ones:
	// for a harness that recognises its leftovers by name.
	Peer, NodeIf, PeerIf string
	// Bits is the prefix length the ends are configured with, 24 (the
	// default) to 30.
	Bits int
}

// Net is two network namespaces joined by a veth pair: the node (where
// olcd attaches and servers listen) and the peer (where clients run).
// Unless NetOptions.NodeHere, nothing is created in the caller's own
// namespace.
type Net struct {
	// Node and Peer are the namespace names under /run/netns; empty unless
	// NetOptions.Named (Node also with NodeHere).
	Node, Peer string
	// NodeNS and PeerNS are handles to the namespaces, open until Close.
	NodeNS, PeerNS netns.NsHandle
	// NodeIf and PeerIf are the veth ends. Generated names have 11 bytes,
	// so a test can add a few characters for interfaces of its own
	// (IFNAMSIZ is 16).
	NodeIf, PeerIf string
	// NodeIP (.1) and PeerIP (.2) are the ends' addresses, in Prefix.
	NodeIP, PeerIP netip.Addr
	// Prefix is the network of the ends: the first addresses of a free
	// documentation range (FreeDocRange), NetOptions.Bits long.
	Prefix netip.Prefix

	named []string // namespaces bound under /run/netns by Create
}

// NewNet creates the namespaces and the veth pair (Create) and removes them
// in t.Cleanup. Generated names carry a random suffix so tests running at
// once (in any package) never meet. It skips the test when not root.
func NewNet(t testing.TB, opt NetOptions) *Net {
	t.Helper()
	RequireRoot(t, "creates network namespaces and a veth pair")
	n, err := Create(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("remove the test network: %v", err)
		}
	})
	return n
}

// Create creates the namespaces and the veth pair, each end with lo and the
// veth up and addressed. Close removes them; on error nothing is left.
func Create(opt NetOptions) (n *Net, err error) {
	bits := opt.Bits
	if bits == 0 {
		bits = 24
	}
	if bits < 24 || bits > 30 {
		return nil, fmt.Errorf("test network prefix length %d: want 24..30", bits)
	}
	docRange, err := FreeDocRange()
	if err != nil {
		return nil, fmt.Errorf("pick an address range: %w", err)
	}
	id := fmt.Sprintf("%08x", rand.Uint32())
	n = &Net{
		Peer:   opt.Peer,
		NodeIf: cmp.Or(opt.NodeIf, "ot"+id+"n"),
		PeerIf: cmp.Or(opt.PeerIf, "ot"+id+"p"),
		Prefix: netip.PrefixFrom(docRange.Addr(), bits),
		NodeNS: netns.None(),
		PeerNS: netns.None(),
	}
	n.NodeIP = n.Prefix.Addr().Next()
	n.PeerIP = n.NodeIP.Next()
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if opt.NodeHere {
		if n.NodeNS, err = currentNetns(); err != nil {
			return n, err
		}
	} else if n.NodeNS, err = n.newNetns(opt.Named, &n.Node, "olcd-test-"+id+"-node"); err != nil {
		return n, fmt.Errorf("create node netns: %w", err)
	}
	if n.PeerNS, err = n.newNetns(opt.Named, &n.Peer, cmp.Or(opt.Peer, "olcd-test-"+id+"-peer")); err != nil {
		return n, fmt.Errorf("create peer netns: %w", err)
	}
	return n, n.CreateVeth()
}

// newNetns creates a namespace, bound as name (stored in *bound) when named.
func (n *Net) newNetns(named bool, bound *string, name string) (netns.NsHandle, error) {
	if !named {
		return NewNetns()
	}
	ns, err := newNamedNetns(name)
	if err == nil {
		*bound = name
		n.named = append(n.named, name)
	}
	return ns, err
}

// currentNetns returns a handle to the calling goroutine's namespace as
// Go's threads have it: that of the thread the process started on.
func currentNetns() (netns.NsHandle, error) {
	ns := netns.None()
	err := InNetns(netns.None(), func() error {
		var err error
		ns, err = netns.Get()
		return err
	})
	return ns, err
}

// Close deletes the veth pair and the namespaces Create made, and closes
// the handles. Safe after a failed Create and more than once.
func (n *Net) Close() error {
	var errs []error
	if n.NodeNS.IsOpen() {
		// Deleting one end deletes both; the namespaces would take it
		// too, but only once every socket in them is gone, and a node end
		// in the caller's namespace stays.
		if h, err := netlink.NewHandleAt(n.NodeNS); err == nil {
			if l, err := h.LinkByName(n.NodeIf); err == nil {
				if err := h.LinkDel(l); err != nil {
					errs = append(errs, fmt.Errorf("delete %s: %w", n.NodeIf, err))
				}
			}
			h.Close()
		}
	}
	for _, ns := range []*netns.NsHandle{&n.NodeNS, &n.PeerNS} {
		if ns.IsOpen() {
			ns.Close()
		}
		*ns = netns.None()
	}
	for _, name := range n.named {
		if err := netns.DeleteNamed(name); err != nil {
			errs = append(errs, fmt.Errorf("delete netns %s: %w", name, err))
		}
	}
	n.named = nil
	return errors.Join(errs...)
}

// CreateVeth creates the veth pair, its ends addressed and up, directly
// inside the namespaces. NewNet calls it; a test that deleted the pair calls
// it to create the pair again under the same names.
func (n *Net) CreateVeth() error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: n.NodeIf, Namespace: netlink.NsFd(n.NodeNS)},
		PeerName:      n.PeerIf,
		PeerNamespace: netlink.NsFd(n.PeerNS),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s/%s: %w", n.NodeIf, n.PeerIf, err)
	}
	for _, end := range []struct {
		ns     netns.NsHandle
		ifname string
		ip     netip.Addr
	}{{n.NodeNS, n.NodeIf, n.NodeIP}, {n.PeerNS, n.PeerIf, n.PeerIP}} {
		if err := configure(end.ns, end.ifname, netip.PrefixFrom(end.ip, n.Prefix.Bits())); err != nil {
			return err
		}
	}
	return nil
}

// configure brings lo and ifname in ns up, with addr on ifname.
func configure(ns netns.NsHandle, ifname string, addr netip.Prefix) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink handle: %w", err)
	}
	defer h.Close()
	for _, name := range []string{"lo", ifname} {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("find %s: %w", name, err)
		}
		if name == ifname {
			a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), 32)}}
			if err := h.AddrAdd(l, a); err != nil {
				return fmt.Errorf("add %s to %s: %w", addr, name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", name, err)
		}
	}
	return nil
}

// InNode runs fn in the node namespace (InNetns).
func (n *Net) InNode(fn func() error) error { return InNetns(n.NodeNS, fn) }

// InPeer runs fn in the peer namespace (InNetns).
func (n *Net) InPeer(fn func() error) error { return InNetns(n.PeerNS, fn) }

// ServeTCP listens on port of NodeIP in the node namespace until the test
// ends and answers each read of a connection (up to bufSize bytes) with
// what reply returns for it, nothing when that is nil. A connection idle
// for idle is closed. It returns the listener.
func (n *Net) ServeTCP(t testing.TB, port uint16, bufSize int, idle time.Duration, reply func(in []byte) []byte) net.Listener {
	t.Helper()
	var ln net.Listener
	Must(t, n.InNode(func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(n.NodeIP, port).String())
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	go AcceptAll(ln, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, bufSize)
		for {
			_ = c.SetDeadline(time.Now().Add(idle))
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			if out := reply(buf[:k]); out != nil {
				if _, err := c.Write(out); err != nil {
					return
				}
			}
		}
	})
	return ln
}
