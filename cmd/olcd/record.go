package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/cli"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/sampler"
	"github.com/olcd/olcd/internal/trace"
)

const recordUsage = `Usage: olcd record --out FILE.csv [--duration 5m] [--interval 500ms] [--cgroup PATH] [--ports 80,443] [--signals a,b]

Samples this node's canonical signals every interval, the way the daemon does,
and writes them as a trace (the format 'olcd-sim simulate' replays and the field
cases use): a header "t_s,<signal>,…" and one row per tick, an empty cell where
a signal was unavailable. Record a step load test, then replay it with
different thresholds and controller parameters (docs/tuning.md). It needs no
BPF and no running daemon; Ctrl-C stops it early and keeps what was written.
The measured-queue columns (response_time_p50/p95/p99, requests_per_s,
inflight_requests) come from the datapath: they are filled from the running
daemon's status (--socket) when one answers, and empty otherwise.

Flags:
`

// cmdRecord writes a trace of the live node's signals.
func cmdRecord(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("record", stderr)
	out := fs.String("out", "", "trace `file` to write (\"-\" for stdout)")
	duration := fs.Duration("duration", 5*time.Minute, "how long to record (at most 24h)")
	interval := fs.Duration("interval", sampler.DefaultInterval, "sampling interval (at least 100ms)")
	cgroup := fs.String("cgroup", "", "watched cgroup for the cgroup_* signals (as in the config)")
	ports := fs.String("ports", "", "comma-separated TCP `ports` whose accept queues are read")
	signals := fs.String("signals", "", "comma-separated signal `names` to record (default: every canonical signal)")
	root := fs.String("root", "/", "filesystem root holding proc/ and sys/ (tests use fixture trees)")
	socket := socketFlag(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, recordUsage)
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *out == "":
		fmt.Fprintln(stderr, "olcd record: --out is required")
		return cli.ErrUsage
	case *duration <= 0 || *duration > 24*time.Hour:
		fmt.Fprintln(stderr, "olcd record: --duration must be in (0, 24h]")
		return cli.ErrUsage
	case *interval < 100*time.Millisecond:
		fmt.Fprintln(stderr, "olcd record: --interval must be at least 100ms")
		return cli.ErrUsage
	}
	cols, err := recordColumns(*signals)
	if err != nil {
		fmt.Fprintf(stderr, "olcd record: %v\n", err)
		return cli.ErrUsage
	}
	tcp, err := parsePorts(*ports)
	if err != nil {
		fmt.Fprintf(stderr, "olcd record: --ports: %v\n", err)
		return cli.ErrUsage
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	smp, err := sampler.New(sampler.Config{Root: *root, Cgroup: *cgroup, TCPPorts: tcp}, log)
	if err != nil {
		return err
	}
	w := stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return fmt.Errorf("create trace: %w", err)
		}
		defer f.Close()
		w = f
	}
	tw, err := trace.NewWriter(w, cols)
	if err != nil {
		return fmt.Errorf("write trace: %w", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	daemonSignals := daemonSignalReader(*socket, cols, stderr)
	rows := 0
	var werr error
	smp.Run(ctx, *interval, func(s olc.Snapshot) {
		daemonSignals(&s)
		if err := tw.Write(s); err != nil && werr == nil {
			werr = err
			cancel()
		}
		rows++
	})
	if werr != nil {
		return fmt.Errorf("write trace: %w", werr)
	}
	if *out != "-" {
		fmt.Fprintf(stderr, "olcd record: %d ticks of %d signals written to %s\n", rows, len(cols), *out)
	}
	return nil
}

// recordColumns parses --signals; empty means every canonical signal.
func recordColumns(list string) ([]olc.Signal, error) {
	if list == "" {
		return olc.Signals(), nil
	}
	var cols []olc.Signal
	seen := map[olc.Signal]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		sig, err := olc.ParseSignal(name)
		if err != nil {
			return nil, fmt.Errorf("--signals: unknown signal %q", name)
		}
		if !seen[sig] {
			seen[sig] = true
			cols = append(cols, sig)
		}
	}
	return cols, nil
}

// parsePorts parses a comma-separated list of ports 1..65535.
func parsePorts(list string) ([]uint16, error) {
	if list == "" {
		return nil, nil
	}
	var out []uint16
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%q is not a port 1..65535", f)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// daemonSignalReader returns a function that fills the measured-queue
// signals of a snapshot from the running daemon's last status, when the
// recording has such columns and a daemon answers on socket; the first
// failure is reported once and the columns stay empty.
func daemonSignalReader(socket string, cols []olc.Signal, stderr io.Writer) func(*olc.Snapshot) {
	want := false
	for _, c := range cols {
		for _, m := range trace.MeasuredQueue {
			want = want || c == m
		}
	}
	if !want {
		return func(*olc.Snapshot) {}
	}
	client := api.NewClient(socket, time.Second)
	warned := false
	return func(s *olc.Snapshot) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := client.Status(ctx)
		if err != nil {
			if !warned {
				fmt.Fprintf(stderr, "olcd record: no daemon on %s (%v): the response-time columns stay empty\n", socket, err)
				warned = true
			}
			return
		}
		for _, sig := range st.Signals {
			if m, err := olc.ParseSignal(sig.Name); err == nil && sig.Available && sig.Value != nil && slices.Contains(trace.MeasuredQueue, m) {
				s.Set(m, *sig.Value)
			}
		}
	}
}
