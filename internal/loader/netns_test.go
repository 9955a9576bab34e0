package loader

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// testNet is a pair of network namespaces the test creates, joined by a veth
// pair: the server side (where olcd attaches) and the client side. Nothing
// is created in the test process's own namespace, and the names carry the
// pid and a random suffix, so tests running at the same time (here or in
// other packages) never meet.
type testNet struct {
	server, client     netns.NsHandle
	serverIf, clientIf string
	serverIP, clientIP netip.Addr
}

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	requireRoot(t)
	base := fmt.Sprintf("ol%05d%03x", os.Getpid()%100000, rand.IntN(0x1000))
	n := &testNet{
		serverIf: base + "s",
		clientIf: base + "c",
		serverIP: netip.MustParseAddr("10.77.0.1"),
		clientIP: netip.MustParseAddr("10.77.0.2"),
	}
	var err error
	if n.server, err = newNetns(); err != nil {
		t.Fatalf("create server netns: %v", err)
	}
	t.Cleanup(func() { n.server.Close() })
	if n.client, err = newNetns(); err != nil {
		t.Fatalf("create client netns: %v", err)
	}
	t.Cleanup(func() { n.client.Close() })

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: n.serverIf, Namespace: netlink.NsFd(n.server)},
		PeerName:      n.clientIf,
		PeerNamespace: netlink.NsFd(n.client),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("create veth %s/%s: %v", n.serverIf, n.clientIf, err)
	}
	t.Cleanup(func() {
		// Deleting one end deletes both; the namespaces would take it
		// too, but not before every socket in them is gone.
		if h, err := netlink.NewHandleAt(n.server); err == nil {
			if l, err := h.LinkByName(n.serverIf); err == nil {
				h.LinkDel(l)
			}
			h.Close()
		}
	})
	n.configure(t, n.server, n.serverIf, n.serverIP)
	n.configure(t, n.client, n.clientIf, n.clientIP)
	return n
}

// configure brings lo and the interface up with ip/24.
func (n *testNet) configure(t *testing.T, ns netns.NsHandle, ifname string, ip netip.Addr) {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	defer h.Close()
	for _, name := range []string{"lo", ifname} {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == ifname {
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(24, 32)}}
			if err := h.AddrAdd(l, addr); err != nil {
				t.Fatalf("add %s to %s: %v", ip, name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatalf("set %s up: %v", name, err)
		}
	}
}

// newNetns creates an anonymous network namespace: it lives as long as the
// handle (and any socket in it), so a killed test leaves nothing behind.
func newNetns() (netns.NsHandle, error) {
	var ns netns.NsHandle
	err := onThreadIn(netns.None(), func() error {
		var err error
		ns, err = netns.New()
		return err
	})
	return ns, err
}

// onThreadIn runs fn on a locked OS thread switched into ns (or, for
// netns.None(), left where it is and free to be switched by fn), then
// switches back. Netlink sockets, the bpf() attach calls and sockets created
// by fn all belong to ns. If switching back fails the thread is not unlocked,
// so Go retires it rather than reuse it in the wrong namespace.
func onThreadIn(ns netns.NsHandle, fn func() error) error {
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
		err = fn()
		if serr := netns.Set(orig); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("return to the original netns: %w", serr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// inServer runs fn in the server namespace, failing the test on error.
func (n *testNet) inServer(t *testing.T, fn func() error) {
	t.Helper()
	if err := onThreadIn(n.server, fn); err != nil {
		t.Fatal(err)
	}
}

// listen opens a TCP listener in the server namespace that echoes what it
// reads, closed at the end of the test.
func (n *testNet) listen(t *testing.T, port uint16) net.Listener {
	t.Helper()
	return n.listenDelay(t, port, 0)
}

// listenDelay is listen answering each read after delay.
func (n *testNet) listenDelay(t *testing.T, port uint16, delay time.Duration) net.Listener {
	t.Helper()
	var ln net.Listener
	n.inServer(t, func() error {
		var err error
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(n.serverIP, port).String())
		return err
	})
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				for {
					c.SetDeadline(time.Now().Add(10 * time.Second))
					k, err := c.Read(buf)
					if err != nil {
						return
					}
					if delay > 0 {
						time.Sleep(delay)
					}
					if _, err := c.Write(buf[:k]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln
}

// dial connects from the client namespace with a bounded timeout.
func (n *testNet) dial(port uint16, timeout time.Duration) (net.Conn, error) {
	return n.dialAddr(n.serverIP, port, timeout)
}

func (n *testNet) dialAddr(ip netip.Addr, port uint16, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := onThreadIn(n.client, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", netip.AddrPortFrom(ip, port).String(), timeout)
		return err
	})
	return c, err
}

// echo writes a message on c and reads it back, within a deadline.
func echo(c net.Conn, msg string) error {
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	buf := make([]byte, len(msg))
	for got := 0; got < len(buf); {
		k, err := c.Read(buf[got:])
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		got += k
	}
	if string(buf) != msg {
		return fmt.Errorf("echo %q, want %q", buf, msg)
	}
	return nil
}
