package overload

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/olcd/olcd/internal/testutil"
)

// TestNewNet: the harness's network has its host end in the host namespace
// and the client namespace under the name leftovers are swept by; a client
// reaches a listener on the host end, from its own address and from the
// source addresses the fairness test adds, and Close leaves neither behind.
func TestNewNet(t *testing.T) {
	testutil.RequireRoot(t, "creates a network namespace and a veth pair in the host namespace")
	id := newID()
	n, err := newNet(id)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if !leftoverName.MatchString(n.Netns) || !leftoverLink.MatchString(n.HostIf) || !leftoverLink.MatchString(n.ClientIf) {
		t.Errorf("names %s, %s, %s: not the ones the leftover sweep recognises", n.Netns, n.HostIf, n.ClientIf)
	}
	if testutil.DocRanges[0].Contains(n.HostIP) == testutil.DocRanges[1].Contains(n.HostIP) {
		t.Errorf("host address %s is not in one of %v", n.HostIP, testutil.DocRanges)
	}
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(n.HostIP, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if out, err := n.Command("bash", "-c", "exec 3<>/dev/tcp/"+n.HostIP.String()+"/"+strconv.Itoa(port)).CombinedOutput(); err != nil {
		t.Fatalf("client to %s:%d: %v: %s", n.HostIP, port, err, out)
	}

	// Source addresses: on the client's end once each however often
	// asked for, and a client reaches the host from the last.
	addrs, err := n.SourceAddrs(3)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := n.SourceAddrs(3); err != nil || !slices.Equal(again, addrs) {
		t.Fatalf("asked again: %v, %v; want %v", again, err, addrs)
	}
	have, err := exec.Command("ip", "-n", n.Netns, "-o", "addr", "show", "dev", n.ClientIf).Output()
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range addrs {
		if want := n.ClientIP.Next(); i == 0 && a != want {
			t.Errorf("first source address %s, want %s", a, want)
		}
		if k := strings.Count(string(have), " "+a.String()+"/32 "); k != 1 {
			t.Errorf("%s on %s %d times, want once:\n%s", a, n.ClientIf, k, have)
		}
	}
	src := &net.TCPAddr{IP: addrs[2].AsSlice()}
	if err := n.rig.InPeer(func() error {
		c, err := (&net.Dialer{LocalAddr: src, Timeout: 5 * time.Second}).Dial("tcp4", netip.AddrPortFrom(n.HostIP, uint16(port)).String())
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("client from %s: %v", src.IP, err)
	}
	n.Close()
	if _, err := netlink.LinkByName(n.HostIf); err == nil {
		t.Errorf("%s left after Close", n.HostIf)
	}
	if _, err := os.Stat("/run/netns/" + n.Netns); !os.IsNotExist(err) {
		t.Errorf("/run/netns/%s after Close: %v", n.Netns, err)
	}
}
