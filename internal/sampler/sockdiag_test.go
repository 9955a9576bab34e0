package sampler

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/testutil"
)

// nlMsg builds one netlink message (header + payload, padded to 4 bytes).
func nlMsg(typ uint16, seq uint32, payload []byte) []byte {
	l := nlmsgHdrLen + len(payload)
	b := make([]byte, (l+3)&^3)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(l))
	ne.PutUint16(b[4:], typ)
	ne.PutUint16(b[6:], unix.NLM_F_MULTI)
	ne.PutUint32(b[8:], seq)
	copy(b[nlmsgHdrLen:], payload)
	return b
}

// diagPayload builds an inet_diag_msg.
func diagPayload(family, state uint8, addr netip.Addr, port uint16, rq, wq uint32) []byte {
	p := make([]byte, inetDiagMsgLen)
	p[0], p[1] = family, state
	binary.BigEndian.PutUint16(p[4:], port)
	a := addr.As16()
	if addr.Is4() {
		a4 := addr.As4()
		clear(a[:])
		copy(a[:], a4[:])
	}
	copy(p[8:24], a[:])
	binary.NativeEndian.PutUint32(p[56:], rq)
	binary.NativeEndian.PutUint32(p[60:], wq)
	return p
}

func errnoPayload(e int32) []byte {
	p := make([]byte, 4+nlmsgHdrLen)
	binary.NativeEndian.PutUint32(p, uint32(e))
	return p
}

func TestParseDiag(t *testing.T) {
	lo4 := netip.MustParseAddr("127.0.0.1")
	lo6 := netip.MustParseAddr("::1")
	listen4 := nlMsg(unix.SOCK_DIAG_BY_FAMILY, 1, diagPayload(unix.AF_INET, tcpListen, lo4, 8080, 3, 4))
	listen6 := nlMsg(unix.SOCK_DIAG_BY_FAMILY, 1, diagPayload(unix.AF_INET6, tcpListen, lo6, 443, 0, 128))
	established := nlMsg(unix.SOCK_DIAG_BY_FAMILY, 1, diagPayload(unix.AF_INET, 1, lo4, 8080, 99, 99))
	stale := nlMsg(unix.SOCK_DIAG_BY_FAMILY, 7, diagPayload(unix.AF_INET, tcpListen, lo4, 9, 1, 1))
	done := nlMsg(unix.NLMSG_DONE, 1, []byte{0, 0, 0, 0})
	tests := []struct {
		name   string
		in     []byte
		want   []Listener
		done   bool
		errHas error
	}{
		{name: "two listeners then done", in: slices.Concat(listen4, listen6, done), done: true,
			want: []Listener{{netip.AddrPortFrom(lo4, 8080), 3, 4}, {netip.AddrPortFrom(lo6, 443), 0, 128}}},
		{name: "not listening and other sequence skipped", in: slices.Concat(established, stale, listen4),
			want: []Listener{{netip.AddrPortFrom(lo4, 8080), 3, 4}}},
		{name: "kernel error", in: nlMsg(unix.NLMSG_ERROR, 1, errnoPayload(-int32(syscall.EPERM))), errHas: syscall.EPERM},
		{name: "done with error", in: nlMsg(unix.NLMSG_DONE, 1, errnoPayload(-int32(syscall.ENOBUFS))), done: true, errHas: syscall.ENOBUFS},
		{name: "length past the datagram", in: listen4[:40], errHas: errDiagTruncated},
		{name: "short inet_diag_msg", in: nlMsg(unix.SOCK_DIAG_BY_FAMILY, 1, make([]byte, 20)), errHas: errDiagTruncated},
		{name: "length below the header", in: func() []byte {
			b := slices.Clone(listen4)
			binary.NativeEndian.PutUint32(b, 3)
			return b
		}(), errHas: errDiagTruncated},
		{name: "trailing bytes shorter than a header are ignored", in: slices.Concat(listen4, []byte{1, 2, 3}),
			want: []Listener{{netip.AddrPortFrom(lo4, 8080), 3, 4}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c listenerCollector
			done, err := parseDiag(tc.in, 1, &c)
			if tc.errHas != nil {
				if !errors.Is(err, tc.errHas) {
					t.Fatalf("error %v, want %v", err, tc.errHas)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if done != tc.done {
				t.Errorf("done = %v, want %v", done, tc.done)
			}
			if tc.errHas == nil && !slices.Equal(c.out, tc.want) {
				t.Errorf("got %v, want %v", c.out, tc.want)
			}
		})
	}
}

func TestAcceptFill(t *testing.T) {
	for _, tc := range []struct {
		q, b uint32
		want float64
	}{{0, 4, 0}, {1, 4, 0.25}, {4, 4, 1}, {5, 4, 1}, {0, 0, 0}, {1, 0, 1}} {
		if got := acceptFill(tc.q, tc.b); got != tc.want {
			t.Errorf("fill(%d/%d) = %v, want %v", tc.q, tc.b, got, tc.want)
		}
	}
}

// listenRaw opens a TCP listener with an exact backlog (net.Listen uses
// somaxconn) on a loopback address and an ephemeral or given port. The
// listener never accepts.
func listenRaw(t testing.TB, addr netip.Addr, port uint16, backlog int) uint16 {
	t.Helper()
	var (
		family int
		sa     unix.Sockaddr
	)
	if addr.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(port), Addr: addr.As4()}
	} else {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(port), Addr: addr.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		t.Fatalf("bind %v:%d: %v", addr, port, err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		t.Fatal(err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	switch a := got.(type) {
	case *unix.SockaddrInet4:
		return uint16(a.Port)
	case *unix.SockaddrInet6:
		return uint16(a.Port)
	}
	t.Fatalf("unexpected sockaddr %T", got)
	return 0
}

func dial(t *testing.T, addr netip.Addr, port uint16, timeout time.Duration) (net.Conn, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, port).String(), timeout)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func requireLoopback6(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	l.Close()
}

func TestListenersLive(t *testing.T) {
	requireLoopback6(t)
	lo4, lo6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	p4 := listenRaw(t, lo4, 0, 7)
	p6 := listenRaw(t, lo6, 0, 3)
	if _, err := dial(t, lo6, p6, time.Second); err != nil {
		t.Fatal(err)
	}
	ls, err := Listeners()
	if err != nil {
		t.Fatal(err)
	}
	var found4, found6 bool
	for _, l := range ls {
		switch l.Addr {
		case netip.AddrPortFrom(lo4, p4):
			found4 = l.Backlog == 7 && l.Queue == 0
		case netip.AddrPortFrom(lo6, p6):
			found6 = l.Backlog == 3 && l.Queue == 1
		}
	}
	if !found4 || !found6 {
		t.Fatalf("listeners %v: want 127.0.0.1:%d (backlog 7, queue 0) and [::1]:%d (backlog 3, queue 1)", ls, p4, p6)
	}
}

// A real listener on loopback that never accepts: the accept queue fills
// with each connection until accept_queue_fill is 1.0, and connections past
// the backlog are refused by the kernel, which listen_overflows_per_s shows.
// Bounded: backlog+1 connections that fill the queue, then 3 attempts of at
// most 300 ms each; loopback only.
func TestAcceptQueueFillAndOverflowsLive(t *testing.T) {
	requireRoot(t)
	const backlog = 4
	lo := netip.MustParseAddr("127.0.0.1")
	port := listenRaw(t, lo, 0, backlog)
	s, _ := newLogged(t, Config{Root: "/", TCPPorts: []uint16{port}})
	snap := s.Sample()
	if v, ok := snap.Get(olc.AcceptQueueFill); !ok || v != 0 {
		t.Fatalf("accept_queue_fill = %v (ok %v) with no connection, want 0; errors %v", v, ok, snap.Errors)
	}
	last := 0.0
	for i := 1; i <= backlog+1; i++ {
		if _, err := dial(t, lo, port, 2*time.Second); err != nil {
			t.Fatalf("connection %d of %d: %v", i, backlog+1, err)
		}
		snap = s.Sample()
		v, ok := snap.Get(olc.AcceptQueueFill)
		want := math.Min(float64(i)/backlog, 1)
		if !ok || math.Abs(v-want) > 1e-9 || snap.AcceptQueueFill[port] != v {
			t.Fatalf("after %d connections: accept_queue_fill = %v (ok %v, per port %v), want %v",
				i, v, ok, snap.AcceptQueueFill, want)
		}
		if v < last {
			t.Fatalf("fill went down: %v after %v", v, last)
		}
		last = v
	}
	if last != 1 {
		t.Fatalf("accept_queue_fill reached %v, want 1.0", last)
	}
	refused := 0
	for range 3 {
		if _, err := dial(t, lo, port, 300*time.Millisecond); err != nil {
			refused++
		}
	}
	snap = s.Sample()
	v, ok := snap.Get(olc.ListenOverflowsPerS)
	if !ok || v <= 0 {
		t.Fatalf("listen_overflows_per_s = %v (ok %v) after %d refused connections past the backlog, want > 0; errors %v",
			v, ok, refused, snap.Errors)
	}
	t.Logf("backlog %d: fill 1.0 after %d connections; %d attempts past the backlog timed out; listen_overflows_per_s %.2f",
		backlog, backlog+1, refused, v)
}

// The per-port fill is the largest over the port's listeners, IPv4 and IPv6.
func TestAcceptQueueFillLargestListenerLive(t *testing.T) {
	requireLoopback6(t)
	lo4, lo6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	port := listenRaw(t, lo4, 0, 8)
	listenRaw(t, lo6, port, 2) // same port, different address
	other := listenRaw(t, lo4, 0, 10)
	if _, err := dial(t, lo4, port, time.Second); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := dial(t, lo6, port, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dial(t, lo4, other, time.Second); err != nil {
		t.Fatal(err)
	}
	s, _ := newLogged(t, Config{Root: "/", TCPPorts: []uint16{port, other, 1}}) // port 1: no listener
	snap := s.Sample()
	if got := snap.AcceptQueueFill; len(got) != 2 || got[port] != 1 || math.Abs(got[other]-0.1) > 1e-9 {
		t.Fatalf("per-port fill %v, want {%d: 1 (IPv6 listener 2/2 beats IPv4 1/8), %d: 0.1}", got, port, other)
	}
	if v, _ := snap.Get(olc.AcceptQueueFill); v != 1 {
		t.Fatalf("accept_queue_fill = %v, want the max over ports, 1", v)
	}
	// Changing the ports takes effect on the next tick.
	s.SetTCPPorts([]uint16{other})
	snap = s.Sample()
	if v, _ := snap.Get(olc.AcceptQueueFill); math.Abs(v-0.1) > 1e-9 || len(snap.AcceptQueueFill) != 1 {
		t.Fatalf("after SetTCPPorts: %v %v", v, snap.AcceptQueueFill)
	}
	s.SetTCPPorts(nil)
	snap = s.Sample()
	if _, ok := snap.Get(olc.AcceptQueueFill); ok || snap.AcceptQueueFill != nil {
		t.Fatalf("no ports configured but accept_queue_fill is set: %v", snap.AcceptQueueFill)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t, "cgroup writes, host-wide counters")
}
