//go:build linux

package lb

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	delayedACK = func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 0)
		})
		return errors.Join(err, serr)
	}
}

// clientMain runs one burst and writes its clientResult to stdout as JSON.
//
// The clients are one event loop on one thread, as HAProxy's checks are:
// every socket non-blocking, connect() called for each in turn, and
// between two connects whatever is ready is served (a line written as its
// connect completes, an answer read as it comes). A goroutine per client
// would make the client process the slowest part of the run: with 1000 of
// them on this VM's 2 CPUs a line was written 40 ms after its connect
// completed, past the delayed-ACK timer, so no line travelled with the
// handshake's last ACK as HAProxy's does.
//
// Each end of a client's time is a kernel time where the loop's own delay
// would otherwise count: the connect's completion is the time connect()
// was called plus the handshake's round trip (TCP_INFO's RTT, the SYN's
// only sample before any data is sent), and the answer's arrival is its
// segment's receive timestamp (SO_TIMESTAMPNS). A line answered counts from
// the moment before its write: the server cannot answer it sooner.
func clientMain(specJSON string) int {
	var s clientSpec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		fmt.Fprintln(os.Stderr, "client spec:", err)
		return 2
	}
	res, err := runClients(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clients:", err)
		return 2
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 2
	}
	return 0
}

// client is one connection of the burst.
type client struct {
	fd                    int
	state                 int // clientConnecting, clientWaiting, clientDone
	connecting, ready     time.Time
	wrote                 time.Time
	got                   []byte
	err                   string
	latency, sinceConnect time.Duration
}

const (
	clientConnecting = iota
	clientWaiting
	clientDone
)

func runClients(s clientSpec) (clientResult, error) {
	runtime.LockOSThread()
	ap, err := netip.ParseAddrPort(s.Addr)
	if err != nil {
		return clientResult{}, err
	}
	dst := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	var src *unix.SockaddrInet4
	if s.Source != "" {
		a, err := netip.ParseAddr(s.Source)
		if err != nil {
			return clientResult{}, err
		}
		src = &unix.SockaddrInet4{Addr: a.As4()}
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return clientResult{}, err
	}
	defer unix.Close(ep)
	cs := make([]client, s.N)
	for i := range cs {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return clientResult{}, fmt.Errorf("socket %d: %w", i, err)
		}
		cs[i].fd = fd
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			return clientResult{}, err
		}
		if s.DelayedACK {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_QUICKACK, 0); err != nil {
				return clientResult{}, err
			}
		}
		if src != nil {
			if err := unix.Bind(fd, src); err != nil {
				return clientResult{}, fmt.Errorf("bind %s: %w", s.Source, err)
			}
		}
	}
	// The kernel stamps received packets only while some socket asks for
	// it, and turns that on with a deferred job: the sockets above ask,
	// and the job has run by the time the burst starts.
	time.Sleep(20 * time.Millisecond)

	events := make([]unix.EpollEvent, 256)
	buf := make([]byte, 64)
	oob := make([]byte, 64)
	left := s.N
	serve := func(timeoutMs int) error {
		n, err := unix.EpollWait(ep, events, timeoutMs)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		for _, ev := range events[:max(n, 0)] {
			c := &cs[ev.Fd]
			if c.state == clientDone {
				continue
			}
			c.step(s, ev.Events, buf, oob)
			if c.state == clientDone {
				left--
				_ = unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, c.fd, nil)
			} else if c.state == clientWaiting {
				_ = unix.EpollCtl(ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: ev.Fd})
			}
		}
		return nil
	}
	for i := range cs {
		c := &cs[i]
		c.connecting = time.Now()
		if err := unix.Connect(c.fd, dst); err != nil && !errors.Is(err, unix.EINPROGRESS) {
			c.state, c.err = clientDone, "connect: "+err.Error()
			left--
			continue
		}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, c.fd, &unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(i)}); err != nil {
			return clientResult{}, err
		}
		if err := serve(0); err != nil {
			return clientResult{}, err
		}
	}
	for deadline := time.Now().Add(10 * time.Second); left > 0 && time.Now().Before(deadline); {
		if err := serve(100); err != nil {
			return clientResult{}, err
		}
	}
	var res clientResult
	for i := range cs {
		c := &cs[i]
		if c.state != clientDone {
			c.err = "no answer within 10 s"
		}
		if c.err != "" {
			res.Failed++
			if len(res.Errors) < 5 {
				res.Errors = append(res.Errors, c.err)
			}
			continue
		}
		res.LatencyNs = append(res.LatencyNs, int64(c.latency))
		res.DialNs = append(res.DialNs, int64(c.sinceConnect))
	}
	return res, nil
}

// step advances c on the epoll events ev.
func (c *client) step(s clientSpec, ev uint32, buf, oob []byte) {
	if c.state == clientConnecting {
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
			return
		}
		if e, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != 0 {
			c.state, c.err = clientDone, fmt.Sprintf("connect: %v", errors.Join(err, unix.Errno(e)))
			return
		}
		c.ready = c.connecting
		if ti, err := unix.GetsockoptTCPInfo(c.fd, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			c.ready = c.connecting.Add(time.Duration(ti.Rtt) * time.Microsecond)
		}
		if s.Req != "" {
			c.wrote = time.Now()
			if _, err := unix.Write(c.fd, []byte(s.Req)); err != nil {
				c.state, c.err = clientDone, "write: "+err.Error()
				return
			}
		}
		c.state = clientWaiting
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
		return
	}
	for {
		n, oobn, _, _, err := unix.Recvmsg(c.fd, buf, oob, 0)
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		if err != nil || n == 0 {
			c.state, c.err = clientDone, fmt.Sprintf("answer %q: %v (EOF before the newline when nil)", c.got, err)
			return
		}
		c.got = append(c.got, buf[:n]...)
		if bytes.IndexByte(c.got, '\n') < 0 {
			continue
		}
		c.state = clientDone
		line := string(c.got)
		at, ok := rxStamp(oob[:oobn])
		switch {
		case !ok:
			c.err = "no SO_TIMESTAMPNS on the answer"
		case !slices.Contains(s.Want, line):
			c.err = fmt.Sprintf("answer %q, want one of %q", line, s.Want)
		default:
			// An answer to the line (Want[0]) could not come before
			// the line was written; the node's answer to a line
			// that came too late counts from the connect.
			from := c.ready
			if s.Req != "" && line == s.Want[0] && c.wrote.After(from) {
				from = c.wrote
			}
			c.latency, c.sinceConnect = at.Sub(from), at.Sub(c.connecting)
		}
		return
	}
}

// rxStamp returns the SCM_TIMESTAMPNS time among the control messages.
func rxStamp(oob []byte) (time.Time, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
			return time.Unix(sec, nsec), true
		}
	}
	return time.Time{}, false
}
