package overload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Phase is a stretch of constant offered load.
type Phase struct {
	// Name labels the phase in results ("3x").
	Name string `json:"name"`
	// Rate is the offered load in requests (= new connections) per second.
	Rate float64 `json:"rate"`
	// Duration is how long the phase lasts.
	Duration time.Duration `json:"duration"`
}

// AttackConfig configures the load generator (`olcd-overload attack`).
type AttackConfig struct {
	// Target is the work URL (mysql://user:password@host:port for the
	// db backend's closed pool), Health the health-check URL.
	Target, Health string
	// HealthRate is the health checks per second for the whole attack
	// (0: none).
	HealthRate float64
	// Timeout bounds each request, connect included (open-retry: the
	// answer once connected).
	Timeout time.Duration
	// Clients is how the clients behave: ClientsOpenGiveUp ("" too),
	// ClientsOpenRetry, ClientsClosedPool or ClientsKeepAlive (both
	// RunClosedPool).
	Clients Clients
	// ConnectTimeout bounds a connect of ClientsOpenRetry, the time the
	// kernel retransmits its SYN.
	ConnectTimeout time.Duration
	// Query is the SQL each request of a mysql:// Target runs (the db
	// backend's closed pool).
	Query string `json:",omitempty"`
	// Pool is the closed pool's size (RunClosedPool; default
	// ClosedPoolClients); the open-loop attacker ignores it.
	Pool int `json:",omitempty"`
	// Phases are played one after the other.
	Phases []Phase
	// KeepAlive reuses connections for the work requests (the response
	// checks: a latency is then one round trip and the server's time);
	// otherwise every request is its own connection.
	KeepAlive bool
	// Light, when set, are light clients beside Phases' (which then come
	// from the namespace's own address, as one heavy client): open-loop
	// work requests at Light.Rate for the whole attack, each connecting
	// from the next of Light.Addrs in turn and giving up after Timeout
	// whatever Clients is (the fairness test, issue 29).
	Light *LightClients `json:",omitempty"`
}

// LightClients are clients of their own source addresses beside the
// attack's main clients (AttackConfig.Light).
type LightClients struct {
	// Addrs are the source addresses, one a client, in the client
	// namespace (Net.SourceAddrs).
	Addrs []string
	// Rate is their requests per second together, spread evenly.
	Rate float64
}

// Outcomes of a request.
const (
	outcomeOK      = "ok"      // 200 within the timeout
	outcomeTimeout = "timeout" // no answer within the timeout (a dropped SYN, a queue too long)
	outcomeRefused = "refused" // connect answered with a reset (ECONNREFUSED): a rejected SYN
	outcomeError   = "error"   // reset or another non-HTTP failure
	// Any other HTTP status is "http<code>", e.g. http429.
)

// phasePacer paces requests at a piecewise constant rate: the rate of the
// phase the elapsed time falls in. Like vegeta's ConstantPacer it is open
// loop: the next request is due at its time whether or not earlier ones have
// been answered.
type phasePacer []Phase

// hitsAt is the number of requests due by elapsed.
func (p phasePacer) hitsAt(elapsed time.Duration) float64 {
	var n float64
	for _, ph := range p {
		if elapsed <= ph.Duration {
			return n + ph.Rate*elapsed.Seconds()
		}
		n += ph.Rate * ph.Duration.Seconds()
		elapsed -= ph.Duration
	}
	return n
}

// timeOf is the elapsed time at which the hits-th request is due, or false
// if it never is.
func (p phasePacer) timeOf(hits float64) (time.Duration, bool) {
	var at time.Duration
	for _, ph := range p {
		n := ph.Rate * ph.Duration.Seconds()
		if hits <= n && ph.Rate > 0 {
			return at + time.Duration(hits/ph.Rate*float64(time.Second)), true
		}
		hits -= n
		at += ph.Duration
	}
	return 0, false
}

// Pace implements vegeta.Pacer.
func (p phasePacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if float64(hits) < p.hitsAt(elapsed) {
		return 0, false
	}
	next, ok := p.timeOf(float64(hits + 1))
	if !ok {
		return 0, true
	}
	return max(0, next-elapsed), false
}

// Rate implements vegeta.Pacer: the rate at elapsed, in requests per second.
func (p phasePacer) Rate(elapsed time.Duration) float64 {
	for _, ph := range p {
		if elapsed < ph.Duration {
			return ph.Rate
		}
		elapsed -= ph.Duration
	}
	return 0
}

// total is the length of all phases.
func (p phasePacer) total() time.Duration {
	var d time.Duration
	for _, ph := range p {
		d += ph.Duration
	}
	return d
}

// RunAttack plays cfg's phases against the target and health checks beside
// them, and writes one line per event to w as it happens:
//
//	start <unix ns>
//	r <a|l|h> <start unix ns> <latency ns> <outcome>   a request (a: work, l: a light client's work, h: health)
//	d <start unix ns> <duration ns> <ok|timeout|error> [l]  a work connection's connect (l: a light client's)
//	c <start unix ns> <duration ns> <ok|timeout|error>  a health check's connect
//	end
//
// Every request opens its own connection unless cfg.KeepAlive; every
// health check does.
func RunAttack(ctx context.Context, cfg AttackConfig, w io.Writer) error {
	if len(cfg.Phases) == 0 || cfg.Timeout <= 0 {
		return errors.New("attack: no phases or no timeout")
	}
	pacer := phasePacer(cfg.Phases)
	lines := newLineWriter(w)

	timeout := cfg.Timeout
	dialer := &net.Dialer{Timeout: cfg.Timeout}
	switch cfg.Clients {
	case ClientsOpenGiveUp, "":
	case ClientsOpenRetry:
		if cfg.ConnectTimeout <= 0 {
			return errors.New("attack: open-retry clients need a connect timeout")
		}
		dialer.Timeout = cfg.ConnectTimeout
		timeout = cfg.ConnectTimeout + cfg.Timeout
	case ClientsClosedPool, ClientsKeepAlive:
		return errors.New("attack: the closed pool and the keep-alive clients are RunClosedPool (olcd-overload closed-pool)")
	default:
		return fmt.Errorf("attack: unknown clients %q (have open-giveup, open-retry, closed-pool)", cfg.Clients)
	}
	// recorded dials with next()'s dialer and writes the connect as line
	// (start, duration, outcome).
	recorded := func(line string, next func() *net.Dialer) func(context.Context, string, string) (net.Conn, error) {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			t0 := time.Now()
			c, err := next().DialContext(ctx, network, addr)
			lines.printf(line, t0.UnixNano(), time.Since(t0).Nanoseconds(), classifyErr(err))
			return c, err
		}
	}
	one := func(d *net.Dialer) func() *net.Dialer { return func() *net.Dialer { return d } }
	dial := recorded("d %d %d %s\n", one(dialer))
	newAttacker := func(dial func(context.Context, string, string) (net.Conn, error), keepAlive bool, timeout time.Duration) *vegeta.Attacker {
		tr := &http.Transport{DialContext: dial, DisableKeepAlives: true, MaxIdleConnsPerHost: -1}
		if keepAlive {
			tr = &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 256}
		}
		return vegeta.NewAttacker(
			vegeta.Client(&http.Client{Transport: tr, Timeout: timeout}),
			vegeta.Workers(64), vegeta.MaxWorkers(20000), vegeta.Redirects(vegeta.NoFollow))
	}
	work := newAttacker(dial, cfg.KeepAlive, timeout)
	var light *vegeta.Attacker
	if cfg.Light != nil && cfg.Light.Rate > 0 {
		if len(cfg.Light.Addrs) == 0 {
			return errors.New("attack: light clients without addresses")
		}
		dialers := make([]*net.Dialer, len(cfg.Light.Addrs))
		for i, a := range cfg.Light.Addrs {
			ip := net.ParseIP(a)
			if ip == nil {
				return fmt.Errorf("attack: light client address %q", a)
			}
			// Open loop, giving up after Timeout, whatever the
			// main clients do: the users fairness protects.
			dialers[i] = &net.Dialer{Timeout: cfg.Timeout, LocalAddr: &net.TCPAddr{IP: ip}}
		}
		var next atomic.Uint64
		light = newAttacker(recorded("d %d %d %s l\n", func() *net.Dialer {
			return dialers[(next.Add(1)-1)%uint64(len(dialers))]
		}), cfg.KeepAlive, cfg.Timeout)
	}
	// Health checks are what a load balancer sends: a 1 s budget.
	health := newAttacker(recorded("c %d %d %s\n", one(&net.Dialer{Timeout: cfg.Timeout})), false, timeout)

	start := time.Now()
	lines.printf("start %d\n", start.UnixNano())
	total := pacer.total()
	go func() {
		<-ctx.Done()
		work.Stop()
		health.Stop()
		if light != nil {
			light.Stop()
		}
	}()
	var attacks sync.WaitGroup
	attack := func(atk *vegeta.Attacker, url string, p vegeta.Pacer, kind string) {
		defer attacks.Done()
		tgt := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: url})
		for r := range atk.Attack(tgt, p, total, kind) {
			lines.printf("r %s %d %d %s\n", kind, r.Timestamp.UnixNano(), r.Latency.Nanoseconds(), outcome(r))
		}
	}
	attacks.Add(1)
	go attack(work, cfg.Target, pacer, "a")
	if light != nil {
		attacks.Add(1)
		go attack(light, cfg.Target, phasePacer{{Name: "light", Rate: cfg.Light.Rate, Duration: total}}, "l")
	}
	if cfg.HealthRate > 0 {
		attacks.Add(1)
		go attack(health, cfg.Health, vegeta.ConstantPacer{Freq: int(math.Round(cfg.HealthRate)), Per: time.Second}, "h")
	}
	attacks.Wait()
	lines.printf("end\n")
	// The transport may still finish dials of requests that have timed
	// out; they are not reported.
	lines.close()
	return ctx.Err()
}

// outcome classifies a vegeta result.
func outcome(r *vegeta.Result) string {
	switch {
	case r.Code == http.StatusOK && r.Error == "":
		return outcomeOK
	case r.Code != 0:
		return fmt.Sprintf("http%d", r.Code)
	case isTimeoutText(r.Error):
		return outcomeTimeout
	case strings.Contains(r.Error, "connection refused"):
		return outcomeRefused
	default:
		return outcomeError
	}
}

// classifyErr classifies a connect error.
func classifyErr(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return outcomeOK
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.As(err, &ne) && ne.Timeout(), errors.Is(err, os.ErrDeadlineExceeded):
		return outcomeTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return outcomeRefused
	default:
		return outcomeError
	}
}

// isTimeoutText recognises the timeout errors of net/http by their text:
// vegeta hands results over as strings.
func isTimeoutText(s string) bool {
	return strings.Contains(s, "Client.Timeout") || strings.Contains(s, "deadline exceeded") ||
		strings.Contains(s, "i/o timeout") || strings.Contains(s, "context canceled")
}

// lineWriter serialises the event lines of concurrent requests. Lines
// written after close are dropped.
type lineWriter struct {
	mu     sync.Mutex
	w      *bufio.Writer
	closed bool
	// stop ends the flushing goroutine, which closes stopped.
	stop, stopped chan struct{}
}

// newLineWriter buffers lines for w (64 KiB) and flushes them every
// 100 ms until close.
func newLineWriter(w io.Writer) *lineWriter {
	l := &lineWriter{w: bufio.NewWriterSize(w, 1<<16), stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(l.stopped)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				l.flush()
			case <-l.stop:
				return
			}
		}
	}()
	return l
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		fmt.Fprintf(l.w, format, args...)
	}
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Flush()
}

// close flushes what is buffered, drops every later line and stops the
// flushing.
func (l *lineWriter) close() {
	l.mu.Lock()
	l.w.Flush()
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.stopped
}
