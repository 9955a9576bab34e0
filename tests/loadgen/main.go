// Command loadgen is the test and demo companion of olcd: a TCP server whose
// every connection costs CPU, and a client that opens new connections at a
// fixed rate and reports how many succeeded. Every run is bounded in time and
// in count.
//
//	loadgen serve   -addr 10.0.0.1:8080 [-ports 1] [-work 2ms] [-duration 5m]
//	loadgen connect -target 10.0.0.1:8080 -rate 100 -duration 10s [-timeout 1.5s] [-json]
//	loadgen burn    -duration 20s [-threads N]
package main

import (
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprint(os.Stderr, `usage: loadgen serve|connect|burn [flags]   (loadgen MODE -h for the flags)

  serve    a TCP server that spends -work of CPU per connection, then answers "ok"
  connect  opens new connections at -rate per second for -duration; with -reply (the
           default) a connection succeeds when "ok" arrives, as from loadgen serve;
           -reply=false counts a completed TCP handshake as success (any server)
  burn     keeps -threads CPUs busy for -duration: a noisy neighbour
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
	default:
		err = fmt.Errorf("unknown mode %q: want serve, connect or burn", os.Args[1])
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
	duration := fs.Duration("duration", 10*time.Minute, "stop after this long (at most 1h)")
	fs.Parse(args)
	if *ports < 1 || *ports > 1000 || *duration <= 0 || *duration > time.Hour {
		return errors.New("ports must be in [1, 1000] and duration in (0, 1h]")
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
		go func() { errc <- acceptLoop(ctx, ln, *work) }()
	}
	fmt.Fprintf(os.Stderr, "loadgen: serving on %s (%d port(s)), %s of CPU per connection\n", *addr, *ports, *work)
	for range *ports {
		if err := <-errc; err != nil {
			return err
		}
	}
	return nil
}

// acceptLoop serves ln until ctx ends.
func acceptLoop(ctx context.Context, ln net.Listener, work time.Duration) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			spin(work)
			_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
			_, _ = io.WriteString(c, "ok\n")
		}()
	}
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
	fs.Parse(args)
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
			switch err := once(*target, *timeout, *reply); {
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

// errNoReply is a connection that was accepted but answered nothing.
var errNoReply = errors.New("no reply")

func once(target string, timeout time.Duration, reply bool) error {
	c, err := net.DialTimeout("tcp", target, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	if !reply {
		return nil
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("%w: %v", errNoReply, err)
	}
	return nil
}

// burn keeps -threads CPUs busy for -duration: a noisy neighbour.
func burn(args []string) error {
	fs := flag.NewFlagSet("burn", flag.ExitOnError)
	duration := fs.Duration("duration", 10*time.Second, "how long to burn (at most 10m)")
	threads := fs.Int("threads", runtime.NumCPU(), "busy threads")
	fs.Parse(args)
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
