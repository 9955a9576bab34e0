package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The metrics listener is open to every local user (and, with a non-loopback
// address, to the network), so nothing it accepts may take what the daemon
// needs for its own work: file descriptors for /proc, cgroup, sock_diag and
// netlink reads, and the admin socket. Its connections are capped and its
// requests are bounded in time; the admin API is served by a server of its
// own on its own listener.
const (
	// maxMetricsConns caps the metrics listener's open connections. A few
	// Prometheus servers and an occasional curl need a handful; the rest of
	// the file descriptor limit stays with the daemon.
	maxMetricsConns = 32
	// minFreeFDs is how many file descriptors the metrics cap leaves to the
	// daemon at the least: with a low RLIMIT_NOFILE the cap shrinks (to a
	// floor of 4) rather than eat into them.
	minFreeFDs = 256
)

// Time bounds of the HTTP servers. A scrape of 1000 ports takes a few
// milliseconds; a client slower than these is stuck or hostile.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 30 * time.Second
	// httpIdleTimeout is above Prometheus's usual 15–60 s scrape interval
	// so that a keep-alive scraper keeps its connection.
	httpIdleTimeout = 90 * time.Second
)

// newHTTPServer returns a server for h with every timeout set, so that a
// client that opens a connection and sends nothing (or reads nothing) holds
// it for seconds, not forever.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    16 << 10,
	}
}

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit (the Go
// runtime does so too at start; done here again so the value the metrics cap
// is derived from is the one in force) and returns the soft limit.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return lim.Cur, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
		}
	}
	return lim.Cur, nil
}

// metricsConnCap is the connection cap for a file descriptor limit of
// nofile: maxMetricsConns, or less when that would leave the daemon fewer
// than minFreeFDs descriptors.
func metricsConnCap(nofile uint64) int {
	if nofile > minFreeFDs+maxMetricsConns {
		return maxMetricsConns
	}
	return max(4, int(nofile/8))
}

// capListener accepts at most max connections at once. One more is accepted
// and closed at once: its client sees the connection reset within a round
// trip instead of waiting in the kernel's accept queue behind clients that
// hold theirs, and the queue never fills.
type capListener struct {
	net.Listener
	max      int64
	open     atomic.Int64
	refused  atomic.Uint64
	onRefuse func() // called once per refused connection (metric)
}

func newCapListener(ln net.Listener, max int, onRefuse func()) *capListener {
	if onRefuse == nil {
		onRefuse = func() {}
	}
	return &capListener{Listener: ln, max: int64(max), onRefuse: onRefuse}
}

// Accept returns the next connection within the cap. Errors: those of the
// wrapped listener. A failed accept for lack of file descriptors is retried
// by http.Server after a pause; the cap makes it a sign of some other leak.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			l.onRefuse()
			// A reset, not a FIN: the client learns at once, and the
			// socket leaves no TIME_WAIT behind on this side.
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		return &capConn{Conn: c, l: l}, nil
	}
}

// capConn gives its slot back on the first Close.
type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// serveHTTP serves srv on ln until it is closed; what ends it otherwise is
// logged by the caller through report.
func serveHTTP(srv *http.Server, ln net.Listener, report func(error)) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		report(err)
	}
}
