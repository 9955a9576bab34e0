package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// Listener is one TCP socket in LISTEN state, as sock_diag reports it.
type Listener struct {
	// Addr is the bound local address and port; the unspecified address
	// (0.0.0.0 or ::) for a wildcard bind.
	Addr netip.AddrPort
	// Queue is the current accept-queue length (connections established
	// and not yet accepted), the kernel's sk_ack_backlog.
	Queue uint32
	// Backlog is the accept-queue limit, listen(2)'s backlog capped by
	// net.core.somaxconn (sk_max_ack_backlog).
	Backlog uint32
}

// Fill returns Queue ÷ Backlog clamped to [0, 1] (fraction). The kernel
// accepts one connection past the backlog (sk_acceptq_is_full is
// queue > backlog), so a full queue can read backlog+1; with backlog 0, any
// queued connection means full.
func (l Listener) Fill() float64 { return acceptFill(l.Queue, l.Backlog) }

func acceptFill(queue, backlog uint32) float64 {
	if backlog == 0 {
		if queue > 0 {
			return 1
		}
		return 0
	}
	f := float64(queue) / float64(backlog)
	if f > 1 {
		return 1
	}
	return f
}

// Listeners returns every TCP socket in LISTEN state in the caller's network
// namespace, IPv4 and IPv6, read with sock_diag netlink (NETLINK_SOCK_DIAG,
// inet_diag_req_v2 asking for the LISTEN state only). The daemon uses it to
// find ports listening on non-loopback addresses. Errors: the netlink socket
// could not be opened (needs no privilege, but a seccomp policy may forbid
// it) or the kernel answered with an error.
func Listeners() ([]Listener, error) {
	var c listenerCollector
	if _, err := dumpListeners(make([]byte, diagBufSize), &c); err != nil {
		return nil, err
	}
	return c.out, nil
}

type listenerCollector struct{ out []Listener }

func (c *listenerCollector) visit(m diagMsg) {
	c.out = append(c.out, Listener{Addr: m.addrPort(), Queue: m.rqueue, Backlog: m.wqueue})
}

// Wire layout of include/uapi/linux/inet_diag.h and netlink.h.
const (
	nlmsgHdrLen     = unix.SizeofNlMsghdr // 16
	inetDiagReqLen  = 56                  // struct inet_diag_req_v2
	inetDiagMsgLen  = 72                  // struct inet_diag_msg
	tcpListen       = 10                  // TCP_LISTEN in include/net/tcp_states.h
	diagBufSize     = 64 << 10            // netlink dumps are at most 32 KiB per datagram
	nlmFRequestDump = unix.NLM_F_REQUEST | unix.NLM_F_DUMP
)

// diagMsg is the part of one inet_diag_msg the sampler uses.
type diagMsg struct {
	family uint8
	state  uint8
	port   uint16 // host byte order
	addr   [16]byte
	rqueue uint32 // LISTEN: current accept queue
	wqueue uint32 // LISTEN: backlog
}

func (m *diagMsg) addrPort() netip.AddrPort {
	var a netip.Addr
	if m.family == unix.AF_INET {
		a = netip.AddrFrom4([4]byte(m.addr[:4]))
	} else {
		a = netip.AddrFrom16(m.addr)
	}
	return netip.AddrPortFrom(a, m.port)
}

// diagVisitor receives each LISTEN socket of a dump. An interface rather
// than a func value so the per-tick path does not allocate a closure.
type diagVisitor interface{ visit(m diagMsg) }

// buildDiagRequest writes a dump request for TCP sockets of family in LISTEN
// state into b (nlmsgHdrLen+inetDiagReqLen bytes).
func buildDiagRequest(b []byte, family uint8, seq uint32) {
	clear(b)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(nlmsgHdrLen+inetDiagReqLen))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], nlmFRequestDump)
	ne.PutUint32(b[8:], seq)
	r := b[nlmsgHdrLen:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 1<<tcpListen)
}

// dumpListeners runs one LISTEN dump per address family and passes each
// socket to v. buf is the receive buffer (reused by the sampler). It opens
// and closes its own netlink socket, so a Sampler holds no descriptor.
func dumpListeners(buf []byte, v diagVisitor) ([]byte, error) {
	if len(buf) < diagBufSize {
		buf = make([]byte, diagBufSize)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return buf, fmt.Errorf("open sock_diag netlink socket: %w", err)
	}
	defer unix.Close(fd)
	// A dump that never ends must not hang the tick loop.
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return buf, fmt.Errorf("set sock_diag receive timeout: %w", err)
	}
	var req [nlmsgHdrLen + inetDiagReqLen]byte
	families := [2]uint8{unix.AF_INET, unix.AF_INET6}
	for i, fam := range families {
		seq := uint32(i + 1)
		buildDiagRequest(req[:], fam, seq)
		if _, err := writeRetry(fd, req[:]); err != nil {
			return buf, fmt.Errorf("send sock_diag request (family %d): %w", fam, err)
		}
		for done := false; !done; {
			n, err := readRetry(fd, buf)
			if err != nil {
				return buf, fmt.Errorf("receive sock_diag dump (family %d): %w", fam, err)
			}
			done, err = parseDiag(buf[:n], seq, v)
			if err != nil {
				return buf, fmt.Errorf("sock_diag dump (family %d): %w", fam, err)
			}
		}
	}
	return buf, nil
}

func writeRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Write(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

func readRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// errDiagTruncated reports a message whose length field runs past the datagram.
var errDiagTruncated = errors.New("truncated netlink message")

// parseDiag walks the netlink messages of one datagram and passes every
// inet_diag_msg in LISTEN state to v. Messages with another sequence number
// are skipped (stale replies). done is true at NLMSG_DONE. NLMSG_ERROR
// returns the kernel's errno; a malformed length is an error, never a panic.
func parseDiag(b []byte, seq uint32, v diagVisitor) (done bool, err error) {
	ne := binary.NativeEndian
	var m diagMsg
	for len(b) >= nlmsgHdrLen {
		l := ne.Uint32(b[0:])
		typ := ne.Uint16(b[4:])
		mseq := ne.Uint32(b[8:])
		if l < nlmsgHdrLen || uint64(l) > uint64(len(b)) {
			return false, fmt.Errorf("%w: length %d, %d bytes left", errDiagTruncated, l, len(b))
		}
		payload := b[nlmsgHdrLen:l]
		adv := (int(l) + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if adv > len(b) {
			adv = len(b)
		}
		b = b[adv:]
		if mseq != seq {
			continue
		}
		switch typ {
		case unix.NLMSG_DONE:
			if len(payload) >= 4 {
				if e := int32(ne.Uint32(payload)); e < 0 {
					return true, fmt.Errorf("dump ended with error: %w", syscall.Errno(-e))
				}
			}
			return true, nil
		case unix.NLMSG_ERROR:
			if len(payload) < 4 {
				return false, fmt.Errorf("%w: short error message", errDiagTruncated)
			}
			e := int32(ne.Uint32(payload))
			if e == 0 {
				continue // an ack; dumps do not send one, but it is harmless
			}
			if e > 0 {
				e = -e
			}
			return false, fmt.Errorf("kernel error: %w", syscall.Errno(-e))
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(payload) < inetDiagMsgLen {
				return false, fmt.Errorf("%w: inet_diag_msg of %d bytes", errDiagTruncated, len(payload))
			}
			m.family = payload[0]
			m.state = payload[1]
			if m.state != tcpListen || (m.family != unix.AF_INET && m.family != unix.AF_INET6) {
				continue
			}
			m.port = binary.BigEndian.Uint16(payload[4:])
			copy(m.addr[:], payload[8:24])
			m.rqueue = ne.Uint32(payload[56:])
			m.wqueue = ne.Uint32(payload[60:])
			v.visit(m)
		}
	}
	return false, nil
}
