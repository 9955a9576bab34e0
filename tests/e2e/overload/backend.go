package overload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
)

// BackendConfig configures the backend process (`olcd-overload backend`).
type BackendConfig struct {
	// Addr is the address both listeners bind.
	Addr string
	// Port serves the work: every request costs Work of CPU (0: none).
	Port int
	// HealthPort answers at once: the health checks olcd exempts (0: none).
	HealthPort int
	// Work is the CPU time one request costs, measured as a fixed amount of
	// computation calibrated when the backend starts (not wall time, so a
	// request preempted under overload costs no less).
	Work time.Duration
	// Iterations, when positive, is the spin count one request costs,
	// taken from an earlier backend's "ready" line so every run of a
	// harness does the same work; 0 calibrates it from Work at start.
	Iterations int
	// Limiter is "" (none) or "bbr": go-kratos/aegis ratelimit/bbr around
	// the work handler with its defaults, answering 429 when it rejects.
	Limiter string
	// Sleep, when positive, makes a request wait that long (a handler of
	// known time: a downstream call, a lock) instead of spinning Work.
	Sleep time.Duration
	// Workers, when positive, is a pool of that many workers: a request
	// waits for a free worker, holds it for its Sleep (or Work) and gives
	// it back, so the capacity is Workers ÷ Sleep whatever the CPU (a
	// thread pool, a database connection pool). 0: no pool.
	Workers int
	// KeepAlive keeps the work port's connections open between requests
	// (the response checks); otherwise every answer closes its connection.
	KeepAlive bool
}

// RunBackend serves until ctx ends. It prints "ready" on stdout once both
// listeners accept, so the harness knows when to start the load.
func RunBackend(ctx context.Context, cfg BackendConfig) error {
	if cfg.Port == 0 && cfg.HealthPort == 0 {
		return errors.New("backend: neither -port nor -health-port")
	}
	iters := cfg.Iterations
	if iters <= 0 && cfg.Sleep <= 0 {
		iters = calibrateSpin(cfg.Work)
	}
	if cfg.Sleep > 0 {
		iters = 0
	}
	var pool chan struct{}
	if cfg.Workers > 0 {
		pool = make(chan struct{}, cfg.Workers)
	}
	work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pool != nil {
			// Queued requests are served even when their client has
			// left, as a thread pool's executor queue does.
			pool <- struct{}{}
			defer func() { <-pool }()
		}
		if cfg.Sleep > 0 {
			time.Sleep(cfg.Sleep)
		}
		sink.Add(spin(iters))
		if !cfg.KeepAlive {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	var h http.Handler = work
	switch cfg.Limiter {
	case "":
	case "bbr":
		h = withBBR(bbr.NewLimiter(), work)
	default:
		return fmt.Errorf("limiter %q: want \"\" or \"bbr\"", cfg.Limiter)
	}
	health := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "ok\n")
	})
	errc := make(chan error, 2)
	var servers []*http.Server
	for _, l := range []struct {
		port int
		h    http.Handler
	}{{cfg.Port, h}, {cfg.HealthPort, health}} {
		if l.port == 0 {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Addr, strconv.Itoa(l.port)))
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		srv := &http.Server{Handler: l.h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: nil}
		// Every request is its own connection, as the clients in front of
		// an overloaded service mostly are.
		srv.SetKeepAlivesEnabled(cfg.KeepAlive && l.port == cfg.Port)
		servers = append(servers, srv)
		go func() { errc <- srv.Serve(ln) }()
	}
	fmt.Printf("ready work=%s iterations=%d sleep=%s workers=%d limiter=%q gomaxprocs=%d\n", cfg.Work, iters, cfg.Sleep, cfg.Workers, cfg.Limiter, runtime.GOMAXPROCS(0))
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	}
	for _, s := range servers {
		s.Close()
	}
	return nil
}

// withBBR wraps h in the aegis BBR limiter the way its examples do.
func withBBR(l *bbr.BBR, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done, err := l.Allow()
		if err != nil {
			w.Header().Set("Connection", "close")
			http.Error(w, "limited", http.StatusTooManyRequests)
			return
		}
		defer done(ratelimit.DoneInfo{})
		h.ServeHTTP(w, r)
	})
}

// sink keeps the compiler from removing the spin loop.
var sink atomic.Uint64

// spin runs n rounds of a xorshift generator: a fixed amount of CPU work.
func spin(n int) uint64 {
	x := uint64(88172645463325252)
	for i := 0; i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// calibrateSpin returns the number of spin rounds that take d on this CPU,
// from the fastest of several timed runs (the fastest is the one least
// disturbed by other tasks).
func calibrateSpin(d time.Duration) int {
	const probe = 1 << 20
	best := time.Duration(1 << 62)
	for i := 0; i < 7; i++ {
		t0 := time.Now()
		sink.Add(spin(probe))
		if el := time.Since(t0); el < best {
			best = el
		}
	}
	return max(1, int(float64(probe)*float64(d)/float64(best)))
}
