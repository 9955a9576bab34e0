// Command loadgen is the test and demo companion of olcd: a TCP server whose
// every connection costs CPU, and a client that opens new connections at a
// fixed rate and reports how many succeeded. Every run is bounded in time and
// in count.
//
//	loadgen serve   -addr 10.0.0.1:8080 [-ports 1] [-work 2ms] [-workers N [-max-wait 1s]] [-request] [-duration 5m]
//	loadgen connect -target 10.0.0.1:8080 -rate 100 -duration 10s [-ports 1] [-timeout 1.5s] [-request] [-json]
//	loadgen burn    -duration 20s [-threads N]
//	loadgen hold    -target 127.0.0.1:9477 -conns 20000 -duration 1m [-user nobody]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprint(os.Stderr, `usage: loadgen serve|connect|burn|hold [flags]   (loadgen MODE -h for the flags)

  serve    a TCP server that spends -work of CPU per connection, then answers "ok"
  connect  opens new connections at -rate per second for -duration; with -reply (the
           default) a connection succeeds when "ok" arrives, as from loadgen serve;
           -reply=false counts a completed TCP handshake as success (any server)
  burn     keeps -threads CPUs busy for -duration: a noisy neighbour
  hold     opens -conns idle TCP connections to -target and holds them for -duration
           (with -user, as that user after raising RLIMIT_NOFILE as root)
`)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "connect":
		err = connect(os.Args[2:])
	case "burn":
		err = burn(os.Args[2:])
	case "hold":
		err = hold(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q: want serve, connect, burn or hold", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// serve accepts connections and spends -work of CPU on each before answering
// "ok\n", so the node's CPU follows the admitted connection rate. With
// -ports N it listens on N consecutive ports from the one in -addr (the
// daemon overhead benchmark protects 100 listening ports).
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address (the first port with -ports)")
	ports := fs.Int("ports", 1, "number of consecutive ports to listen on (1..1000)")
	work := fs.Duration("work", 2*time.Millisecond, "CPU time spent per connection")
	workers := fs.Int("workers", 0, "at most this many connections worked on at once, the others wait for one (a worker pool: capacity workers / work per second); 0: no limit")
	request := fs.Bool("request", false, "read a request line before the work (request and answer, which olcd times); default: the server speaks first")
	maxWait := fs.Duration("max-wait", 0, "with -workers: a connection that waited longer for a worker is closed without an answer, as a server's queue timeout does (0: it waits)")
	duration := fs.Duration("duration", 10*time.Minute, "stop after this long (at most 1h)")
	_ = fs.Parse(args) // ExitOnError: a mistake exits 2
	if *ports < 1 || *ports > 1000 || *duration <= 0 || *duration > time.Hour || *workers < 0 {
		return errors.New("ports must be in [1, 1000], duration in (0, 1h] and workers not negative")
	}
	var pool chan struct{}
	if *workers > 0 {
		pool = make(chan struct{}, *workers)
	}
	host, portStr, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("parse -addr: %w", err)
	}
	first, err := strconv.Atoi(portStr)
	if err != nil || first < 1 || first+*ports-1 > 65535 {
		return fmt.Errorf("-addr %s with -ports %d: ports must lie in 1..65535", *addr, *ports)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	errc := make(chan error, *ports)
	for i := range *ports {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(first+i)))
		if err != nil {
			return err
		}
		go func() { <-ctx.Done(); ln.Close() }()
		go func() {
			errc <- acceptLoop(ctx, ln, server{work: *work, pool: pool, maxWait: *maxWait, request: *request})
		}()
	}
	fmt.Fprintf(os.Stderr, "loadgen: serving on %s (%d port(s)), %s of CPU per connection\n", *addr, *ports, *work)
	for range *ports {
		if err := <-errc; err != nil {
			return err
		}
	}
	return nil
}

// server is what serve does with each connection.
type server struct {
	// work is the CPU spent on it; pool, when not nil, the workers' semaphore
	// it waits for first, at most maxWait (0: no limit).
	work    time.Duration
	pool    chan struct{}
	maxWait time.Duration
	// request: read the client's request line before anything else.
	request bool
}

// acceptLoop serves ln until ctx ends.
func acceptLoop(ctx context.Context, ln net.Listener, sv server) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go sv.handle(c)
	}
}

// handle serves one connection: the request line, a worker, the work, "ok".
func (sv server) handle(c net.Conn) {
	defer c.Close()
	if sv.request {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			return
		}
	}
	if sv.pool != nil {
		var timeout <-chan time.Time
		if sv.maxWait > 0 {
			t := time.NewTimer(sv.maxWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case sv.pool <- struct{}{}:
		case <-timeout:
			return // waited too long for a worker: closed unanswered
		}
		defer func() { <-sv.pool }()
	}
	spin(sv.work)
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.WriteString(c, "ok\n")
}

// spin burns CPU for d (thread CPU, not wall time, would be more exact, but
// the scheduler delay under overload is exactly what the demo shows).
func spin(d time.Duration) {
	end := time.Now().Add(d)
	x := 0
	for time.Now().Before(end) {
		for i := 0; i < 1000; i++ {
			x += i
		}
	}
	_ = x
}

// Result is the outcome of one connect run; the JSON of `connect -json`.
type Result struct {
	Target    string `json:"target"`
	Attempted int64  `json:"attempted"`
	Succeeded int64  `json:"succeeded"`
	Failed    int64  `json:"failed"`
	// Failures by cause: no answer to the SYN within the timeout (what a
	// dropped SYN looks like), refused (RST), no reply after connecting,
	// and attempts not started because too many were in flight.
	Timeouts  int64   `json:"timeouts"`
	Refused   int64   `json:"refused"`
	NoReply   int64   `json:"no_reply"`
	Throttled int64   `json:"throttled"`
	Seconds   float64 `json:"seconds"`
	// P50ms is the median connect+reply latency of the successes, in ms.
	P50ms float64 `json:"p50_ms"`
}

// connect opens new connections at -rate per second for -duration; each
// succeeds when the server's "ok" arrives within -timeout (or, with
// -reply=false, when the handshake completes).
func connect(args []string) error {
	fs := flag.NewFlagSet("connect", flag.ExitOnError)
	target := fs.String("target", "127.0.0.1:8080", "address to connect to")
	rate := fs.Float64("rate", 50, "new connections per second")
	duration := fs.Duration("duration", 5*time.Second, "how long to send")
	timeout := fs.Duration("timeout", 1500*time.Millisecond, "per-connection deadline (connect and reply)")
	maxInflight := fs.Int("max-inflight", 2000, "bound on concurrent connection attempts")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	reply := fs.Bool("reply", true, `wait for the "ok" of loadgen serve; false: a completed handshake is a success`)
	request := fs.Bool("request", false, "send a request line first (loadgen serve -request)")
	ports := fs.Int("ports", 1, "spread the connections round-robin over this many consecutive ports from the one in -target (1..1000)")
	_ = fs.Parse(args) // ExitOnError: a mistake exits 2
	targets, err := spread(*target, *ports)
	if err != nil {
		return err
	}
	if *rate <= 0 || *rate > 100000 || *duration <= 0 || *duration > 10*time.Minute {
		return errors.New("rate must be in (0, 100000] and duration in (0, 10m]")
	}
	total := int64(*rate * duration.Seconds())
	gap := time.Duration(float64(time.Second) / *rate)
	sem := make(chan struct{}, *maxInflight)
	var ok, timeouts, refused, noReply, throttled atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	next := start
	for i := int64(0); i < total; i++ {
		time.Sleep(time.Until(next))
		next = next.Add(gap)
		select {
		case sem <- struct{}{}:
		default:
			throttled.Add(1) // too many stuck attempts: a failure too
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t0 := time.Now()
			switch err := once(targets[i%int64(len(targets))], *timeout, *reply, *request); {
			case err == nil:
			case errors.Is(err, syscall.ECONNREFUSED):
				refused.Add(1)
				return
			case errors.Is(err, errNoReply):
				noReply.Add(1)
				return
			default:
				timeouts.Add(1)
				return
			}
			ok.Add(1)
			mu.Lock()
			lat = append(lat, time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	r := Result{Target: *target, Attempted: total, Succeeded: ok.Load(), Seconds: time.Since(start).Seconds(),
		Timeouts: timeouts.Load(), Refused: refused.Load(), NoReply: noReply.Load(), Throttled: throttled.Load()}
	r.Failed = r.Timeouts + r.Refused + r.NoReply + r.Throttled
	if len(lat) > 0 {
		slices.Sort(lat)
		r.P50ms = float64(lat[len(lat)/2].Microseconds()) / 1000
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	fmt.Printf("%s: %d attempted, %d succeeded, %d failed in %.1fs (p50 %.1f ms)",
		r.Target, r.Attempted, r.Succeeded, r.Failed, r.Seconds, r.P50ms)
	if r.Failed > 0 {
		fmt.Printf(" — failures: %d timed out (no SYN-ACK, e.g. dropped SYNs), %d refused, %d no reply, %d throttled",
			r.Timeouts, r.Refused, r.NoReply, r.Throttled)
	}
	fmt.Println()
	return nil
}

// spread returns n addresses: target's host with target's port and the n-1
// ports after it.
func spread(target string, n int) ([]string, error) {
	host, portStr, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("parse -target: %w", err)
	}
	first, err := strconv.Atoi(portStr)
	if err != nil || n < 1 || n > 1000 || first < 1 || first+n-1 > 65535 {
		return nil, fmt.Errorf("-target %s with -ports %d: want 1..1000 ports within 1..65535", target, n)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = net.JoinHostPort(host, strconv.Itoa(first+i))
	}
	return out, nil
}

// errNoReply is a connection that was accepted but answered nothing.
var errNoReply = errors.New("no reply")

func once(target string, timeout time.Duration, reply, request bool) error {
	c, err := net.DialTimeout("tcp", target, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	if !reply {
		return nil
	}
	if request {
		_ = c.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := io.WriteString(c, "q\n"); err != nil {
			return fmt.Errorf("%w: %w", errNoReply, err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("%w: %w", errNoReply, err)
	}
	return nil
}

// burn keeps -threads CPUs busy for -duration: a noisy neighbour.
func burn(args []string) error {
	fs := flag.NewFlagSet("burn", flag.ExitOnError)
	duration := fs.Duration("duration", 10*time.Second, "how long to burn (at most 10m)")
	threads := fs.Int("threads", runtime.NumCPU(), "busy threads")
	_ = fs.Parse(args) // ExitOnError: a mistake exits 2
	if *duration > 10*time.Minute {
		return errors.New("duration at most 10m")
	}
	var wg sync.WaitGroup
	for range *threads {
		wg.Add(1)
		go func() { defer wg.Done(); spin(*duration) }()
	}
	wg.Wait()
	return nil
}

// hold opens -conns TCP connections to -target that send nothing, as fast as
// the handshakes complete, and keeps them open for -duration: the file
// descriptor exhaustion a local user can attempt against a listener. With
// -user it first raises RLIMIT_NOFILE (as root) to fit the connections, then
// drops to that user's uid and gid, so the connections come from an
// unprivileged process. It prints one JSON line when every connection was
// tried ({"open": N, "failed": M}), then, at the end, how many the server
// closed meanwhile ({"closed_by_server": K}).
func hold(args []string) error {
	fs := flag.NewFlagSet("hold", flag.ExitOnError)
	target := fs.String("target", "127.0.0.1:9477", "address to connect to")
	conns := fs.Int("conns", 1000, "connections to open (1..100000)")
	duration := fs.Duration("duration", time.Minute, "how long to hold them (at most 10m)")
	user := fs.String("user", "", "numeric uid[:gid] to drop to after raising RLIMIT_NOFILE (e.g. 65534:65534)")
	_ = fs.Parse(args) // ExitOnError: a mistake exits 2
	if *conns < 1 || *conns > 100000 || *duration <= 0 || *duration > 10*time.Minute {
		return errors.New("conns must be in [1, 100000] and duration in (0, 10m]")
	}
	if *user != "" {
		if err := dropTo(*user, uint64(*conns)+64); err != nil {
			return err
		}
	}
	end := time.Now().Add(*duration)
	open := make([]net.Conn, 0, *conns)
	failed := 0
	for range *conns {
		c, err := net.DialTimeout("tcp", *target, 2*time.Second)
		if err != nil {
			failed++
			if time.Now().After(end) {
				break
			}
			continue
		}
		open = append(open, c)
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]int{"open": len(open), "failed": failed})
	time.Sleep(time.Until(end))
	// A connection the server closed reads EOF (or a reset) at once.
	closed := 0
	for _, c := range open {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
		c.Close()
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]int{"closed_by_server": closed})
}

// dropTo raises RLIMIT_NOFILE to at least nofile (above the hard limit
// that needs CAP_SYS_RESOURCE) and switches every thread to
// the uid[:gid] in spec, with no supplementary groups.
func dropTo(spec string, nofile uint64) error {
	uidStr, gidStr, hasGid := strings.Cut(spec, ":")
	uid, err := strconv.Atoi(uidStr)
	if err != nil {
		return fmt.Errorf("-user %q: want a numeric uid[:gid]", spec)
	}
	gid := uid
	if hasGid {
		if gid, err = strconv.Atoi(gidStr); err != nil {
			return fmt.Errorf("-user %q: want a numeric uid[:gid]", spec)
		}
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	lim.Cur = max(lim.Cur, nofile)
	lim.Max = max(lim.Max, nofile)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE to %d (above the hard limit it needs CAP_SYS_RESOURCE; split the connections over several processes): %w", nofile, err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("drop supplementary groups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	if os.Geteuid() != uid {
		return fmt.Errorf("still uid %d after setuid %d", os.Geteuid(), uid)
	}
	return nil
}
