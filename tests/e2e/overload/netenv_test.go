package overload

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/olcd/olcd/internal/testutil"
)

// TestNewNet: the harness's network has its host end in the host namespace
// and the client namespace under the name leftovers are swept by; a client
// reaches a listener on the host end, and Close leaves neither behind.
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
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	if out, err := n.Command("bash", "-c", "exec 3<>/dev/tcp/"+n.HostIP.String()+"/"+strconv.Itoa(port)).CombinedOutput(); err != nil {
		t.Fatalf("client to %s:%d: %v: %s", n.HostIP, port, err, out)
	}
	n.Close()
	if _, err := netlink.LinkByName(n.HostIf); err == nil {
		t.Errorf("%s left after Close", n.HostIf)
	}
	if _, err := os.Stat("/run/netns/" + n.Netns); !os.IsNotExist(err) {
		t.Errorf("/run/netns/%s after Close: %v", n.Netns, err)
	}
}
