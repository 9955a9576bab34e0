package loader

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/testutil"
)

// testNet is the shared netns rig (testutil.Net): the node side, where olcd
// attaches, and the peer side, where clients dial from.
type testNet struct{ *testutil.Net }

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	return &testNet{testutil.NewNet(t, testutil.NetOptions{})}
}

// inServer runs fn in the server namespace, failing the test on error.
func (n *testNet) inServer(t *testing.T, fn func() error) {
	t.Helper()
	if err := n.InNode(fn); err != nil {
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
	return n.ServeTCP(t, port, 64, 10*time.Second, func(in []byte) []byte {
		if delay > 0 {
			time.Sleep(delay)
		}
		return in
	})
}

// dial connects from the client namespace with a bounded timeout.
func (n *testNet) dial(port uint16, timeout time.Duration) (net.Conn, error) {
	return n.dialAddr(n.NodeIP, port, timeout)
}

func (n *testNet) dialAddr(ip netip.Addr, port uint16, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := n.InPeer(func() error {
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
