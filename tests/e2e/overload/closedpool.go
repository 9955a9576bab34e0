package overload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"sync"
	"sync/atomic"
	"time"
)

// The closed-pool load (ClientsClosedPool, `olcd-overload closed-pool`): a
// fixed pool of blocking clients, each with one request in flight at most,
// like a thread pool or a connection-per-query worker pool in front of a
// service. Unlike the open-loop attacker, a client blocked in connect() or
// waiting for an answer sends nothing meanwhile, so the time a protection
// keeps clients blocked is what limits their throughput.

// ClosedPoolClients is the pool size the closed-pool load uses unless the
// config says otherwise.
const ClosedPoolClients = 64

// ClosedPoolTimeout bounds each closed-pool request, connect included.
const ClosedPoolTimeout = 2 * time.Second

// RunClosedPool plays cfg's phases with cfg.Pool blocking clients (default
// ClosedPoolClients): client i sends the requests i, i+n, i+2n, … of the
// schedule the phases' rates make (n clients), each at its due time. Each
// request opens a connection, sends one GET, and waits for the answer or
// cfg.Timeout (default ClosedPoolTimeout), connect included; then the
// client waits for its next due time. A mysql:// target (the db backend)
// makes each request a database client's instead: connect, run cfg.Query,
// close with COM_QUIT. A due time that passed while the
// client was blocked is skipped, not caught up: the pool's offered load falls
// when its clients are kept waiting, as a real pool's does. Health checks
// run beside it at cfg.HealthRate. It writes RunAttack's event lines to w,
// and at the end one line `skipped <n>`, the due requests the pool could not
// send in time.
func RunClosedPool(ctx context.Context, cfg AttackConfig, w io.Writer) error {
	if len(cfg.Phases) == 0 {
		return errors.New("closed pool: no phases")
	}
	clients := cfg.Pool
	if clients <= 0 {
		clients = ClosedPoolClients
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = ClosedPoolTimeout
	}
	pacer := phasePacer(cfg.Phases)
	total := pacer.total()
	lines := newLineWriter(w)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	lines.printf("start %d\n", start.UnixNano())
	var skipped atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			skipped.Add(closedClient(ctx, i, clients, pacer, start, timeout, cfg.Target, cfg.Query, cfg.KeepAlive, lines))
		}()
	}
	if cfg.HealthRate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			healthChecks(ctx, cfg, start, total, timeout, lines)
		}()
	}
	wg.Wait()
	lines.printf("skipped %d\n", skipped.Load())
	lines.printf("end\n")
	lines.close()
	return ctx.Err()
}

// closedClient is client i of n: it sends the requests i, i+n, … of the
// schedule until it ends or ctx is done, and returns how many due times it
// skipped.
// With keepAlive (ClientsKeepAlive) the client keeps one connection open
// across its requests, as a pooled client does.
func closedClient(ctx context.Context, i, n int, pacer phasePacer, start time.Time, timeout time.Duration, url, query string, keepAlive bool, lines *lineWriter) int64 {
	// The connect ends with the request's timeout: net/http (Go 1.23 on)
	// detaches a dial from its request, so without a bound of its own a
	// timed-out client's socket kept retransmitting its SYN for 20 s (the
	// kernel's tcp_syn_retries 6) after the client gave up and moved on. A
	// blocking client closes its socket at its timeout (docs/tuning.md §7).
	dialer := &net.Dialer{Timeout: timeout}
	tr := &http.Transport{
		DisableKeepAlives: !keepAlive,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			t0 := time.Now()
			c, err := dialer.DialContext(ctx, network, addr)
			lines.printf("d %d %d %s\n", t0.UnixNano(), time.Since(t0).Nanoseconds(), classifyErr(err))
			return c, err
		},
	}
	if keepAlive {
		// One connection per client, kept between requests without an
		// idle limit of the client's own.
		tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = 1, 1
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func() string { return get(ctx, client, url) }
	if u, err := neturl.Parse(url); err == nil && u.Scheme == "mysql" {
		// A database client: connect, one query, COM_QUIT (mariadb.go).
		do = func() string {
			qctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_, err := dbQuery(qctx, u.Host, query, tr.DialContext)
			return dbOutcome(err)
		}
	}
	var skipped int64
	for k := 0; ; k++ {
		due, ok := pacer.timeOf(float64(k*n + i + 1))
		if !ok {
			return skipped
		}
		now := time.Since(start)
		if due < now {
			// Blocked past this due time: skip it (and any other missed).
			skipped++
			continue
		}
		select {
		case <-ctx.Done():
			return skipped
		case <-time.After(due - now):
		}
		t0 := time.Now()
		outcome := do()
		lines.printf("r a %d %d %s\n", t0.UnixNano(), time.Since(t0).Nanoseconds(), outcome)
	}
}

// get sends one GET and reads the answer, returning the outcome.
func get(ctx context.Context, client *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return outcomeError
	}
	resp, err := client.Do(req)
	if err != nil {
		switch o := classifyErr(err); {
		case o == outcomeTimeout || isTimeoutText(err.Error()):
			return outcomeTimeout
		case o == outcomeRefused:
			return outcomeRefused
		}
		return outcomeError
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case err != nil && isTimeoutText(err.Error()):
		return outcomeTimeout
	case err != nil:
		return outcomeError
	case resp.StatusCode != http.StatusOK:
		return fmt.Sprintf("http%d", resp.StatusCode)
	}
	return outcomeOK
}

// healthChecks sends cfg.HealthRate checks per second, each on its own
// goroutine, until total has passed.
func healthChecks(ctx context.Context, cfg AttackConfig, start time.Time, total, timeout time.Duration, lines *lineWriter) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: timeout}
	every := time.Duration(float64(time.Second) / cfg.HealthRate)
	var wg sync.WaitGroup
	defer wg.Wait()
	for due := time.Duration(0); due < total; due += every {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(due))):
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			outcome := get(ctx, client, cfg.Health)
			lines.printf("r h %d %d %s\n", t0.UnixNano(), time.Since(t0).Nanoseconds(), outcome)
		}()
	}
}
