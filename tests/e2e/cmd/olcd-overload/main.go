// Command olcd-overload is `make demo`: it calibrates a CPU-bound HTTP
// backend's capacity C on this machine, then runs the overload scenarios
// five ways (no olcd, olcd observe, olcd enforce, a static nftables SYN
// limit at C, the aegis BBR limiter in the app) with real TCP traffic from a
// client network namespace, and prints a table per scenario. Results go to
// <out>/results.json, a PNG time series per run beside it.
//
//	olcd-overload [demo] [-olcd bin/olcd] [-out out/demo] [-scenarios a,b] [-variants x,y]
//	olcd-overload backend ...   (started by the harness, inside the backend's cgroup)
//	olcd-overload attack -config attack.json   (started by the harness, in the client netns)
//
// It needs root. Ctrl-C stops it and removes everything it created.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/olcd/olcd/tests/e2e/overload"
)

func main() {
	args := os.Args[1:]
	cmd := "demo"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "demo":
		err = demo(ctx, args)
	case "backend":
		err = backend(ctx, args)
	case "attack":
		err = attack(ctx, args, overload.RunAttack)
	case overload.ClientClosedPool:
		err = attack(ctx, args, overload.RunClosedPool)
	default:
		err = fmt.Errorf("unknown command %q: want demo, backend, attack or closed-pool", cmd)
	}
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintln(os.Stderr, "olcd-overload: interrupted; everything it created was removed")
		os.Exit(130)
	default:
		fmt.Fprintln(os.Stderr, "olcd-overload:", err)
		os.Exit(1)
	}
}

// parse parses args into fs: a bad flag or a stray argument is an error of
// one line; -h prints the flags and returns flag.ErrHelp.
func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return err
		}
		return fmt.Errorf("%s: %w (-h lists the flags)", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q (flags only; -h lists them)", fs.Name(), fs.Arg(0))
	}
	return nil
}

// scenarios by name.
var scenarios = map[string]overload.Scenario{
	overload.Overload3x.Name:     overload.Overload3x,
	overload.CapacityHalved.Name: overload.CapacityHalved,
	overload.ClosedPool3x.Name:   overload.ClosedPool3x,
}

func demo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	olcd := fs.String("olcd", "bin/olcd", "olcd binary")
	out := fs.String("out", "out/demo", "directory for results.json, plots and logs")
	scen := fs.String("scenarios", "overload-3x,capacity-halved", "scenarios to run, comma-separated (also closed-pool-3x: 64 blocking clients)")
	vars := fs.String("variants", "none,observe,enforce,static,inapp", "variants to run, comma-separated (also enforce-reject: olcd with the reject action)")
	work := fs.Duration("work", 5*time.Millisecond, "CPU time per request")
	slo := fs.Duration("slo", 200*time.Millisecond, "latency within which a success is goodput")
	interval := fs.Duration("olcd-interval", 500*time.Millisecond, "olcd's tick")
	ctl := fs.String("olcd-controller", strings.Join(overload.DefaultController, ";"), "olcd controller settings, \"key: value\" separated by ;")
	factor := fs.Float64("threshold-factor", overload.ThresholdFactor, "olcd's threshold as a share of the knee's CPU")
	gomaxprocs := fs.Int("gomaxprocs", 1, "the backend's GOMAXPROCS (-1: the Go runtime's choice)")
	selection := fs.String("selection", "even", "olcd's datapath.selection: random or even")
	reuse := fs.String("calibration", "", "reuse the calibration of an earlier results.json instead of calibrating")
	if err := parse(fs, args); err != nil {
		return err
	}
	overload.ThresholdFactor = *factor
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespace, veth, cgroup, nftables, BPF): run 'sudo make demo'")
	}
	var prev *overload.Calibration
	if *reuse != "" {
		var err error
		if prev, err = readCalibration(*reuse); err != nil {
			return fmt.Errorf("-calibration %s: %w", *reuse, err)
		}
	}
	var runs []overload.Scenario
	for _, n := range strings.Split(*scen, ",") {
		sc, ok := scenarios[n]
		if !ok {
			return fmt.Errorf("-scenarios: unknown scenario %q (have overload-3x, capacity-halved, closed-pool-3x)", n)
		}
		runs = append(runs, sc)
	}
	var variants []overload.Variant
	for _, n := range strings.Split(*vars, ",") {
		v := overload.Variant(n)
		if !validVariant(v) {
			return fmt.Errorf("-variants: unknown variant %q (have none, observe, enforce, enforce-reject, static, inapp)", n)
		}
		variants = append(variants, v)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	outAbs, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	olcdAbs, err := filepath.Abs(*olcd)
	if err != nil {
		return err
	}
	var total time.Duration
	for _, sc := range runs {
		for _, p := range sc.Phases {
			total += p.Duration
		}
	}
	calib := 40 * time.Second
	if prev != nil {
		calib = 0
	}
	fmt.Printf("olcd overload demo: %d scenario(s) × %d variant(s) (~%.0f min in all, calibration included); results in %s\n",
		len(runs), len(variants), (calib + time.Duration(len(variants))*(total+time.Duration(len(runs))*6*time.Second)).Minutes(), *out)
	h, err := overload.New(ctx, overload.Options{Olcd: olcdAbs, Self: self, OutDir: outAbs, Work: *work, SLO: *slo, Progress: os.Stdout,
		OlcdInterval: *interval, GOMAXPROCS: *gomaxprocs, Selection: *selection, OlcdController: splitList(*ctl, ";")})
	if err != nil {
		return err
	}
	defer h.Close()
	if prev != nil {
		prev.ThresholdFactor = overload.ThresholdFactor
		prev.Threshold = min(prev.KneeCPUBusy*overload.ThresholdFactor, overload.MaxThreshold)
		h.Calibration = prev
		fmt.Printf("calibration from %s: C = %.0f req/s, threshold %.3f\n", *reuse, prev.CapacityRPS, prev.Threshold)
	} else if _, err := h.Calibrate(ctx); err != nil {
		return err
	}
	for _, sc := range runs {
		if sc.Name == overload.CapacityHalved.Name && h.Calibration.QuotaHalved == nil {
			if _, err := h.CalibrateHalved(ctx); err != nil {
				return err
			}
			break
		}
	}
	rep := h.NewReport()
	resultsPath := filepath.Join(outAbs, "results.json")
	for _, sc := range runs {
		for _, v := range variants {
			fmt.Printf("\n== %s / %s\n", sc.Name, v)
			res, err := h.Run(ctx, sc, v, overload.RunOptions{})
			if err != nil {
				return fmt.Errorf("%s/%s: %w", sc.Name, v, err)
			}
			rep.Add(res)
			if err := rep.WriteJSON(resultsPath); err != nil {
				return err
			}
		}
	}
	rep.PrintTables(os.Stdout)
	fmt.Printf("results: %s\n", resultsPath)
	return nil
}

// readCalibration reads the calibration of an earlier results.json.
func readCalibration(path string) (*overload.Calibration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var prev overload.Report
	if err := json.Unmarshal(b, &prev); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	c := prev.Calibration
	if c == nil || c.CapacityRPS <= 0 || c.KneeCPUBusy <= 0 || c.KneeCPUBusy > 1.5 {
		return nil, errors.New(`no usable "calibration" (want capacity_rps > 0 and knee_cpu_busy in (0, 1.5])`)
	}
	return c, nil
}

func validVariant(v overload.Variant) bool {
	for _, x := range overload.Variants {
		if x == v {
			return true
		}
	}
	return v == overload.VariantReject
}

func backend(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	var cfg overload.BackendConfig
	fs.StringVar(&cfg.Addr, "addr", "", "listen address (the host side of the veth pair)")
	fs.IntVar(&cfg.Port, "port", 0, "work port (0: none)")
	fs.IntVar(&cfg.HealthPort, "health-port", 0, "health-check port (0: none)")
	fs.DurationVar(&cfg.Work, "work", 5*time.Millisecond, "CPU time per request")
	fs.IntVar(&cfg.Iterations, "iterations", 0, "spin rounds per request (0: calibrate from -work)")
	fs.StringVar(&cfg.Limiter, "limiter", "", `"" or "bbr" (go-kratos/aegis)`)
	fs.BoolVar(&cfg.KeepAlive, "keepalive", false, "keep the work port's connections open between requests")
	fs.DurationVar(&cfg.Sleep, "sleep", 0, "wall time each request waits instead of spinning (0: spin -work)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if cfg.Addr == "" {
		return errors.New("backend: -addr is required (the harness passes the host side of its veth pair)")
	}
	return overload.RunBackend(ctx, cfg)
}

// attack runs a load generator (run: the open-loop attacker or the closed
// pool) on the config the harness wrote.
func attack(ctx context.Context, args []string, run func(context.Context, overload.AttackConfig, io.Writer) error) error {
	fs := flag.NewFlagSet("attack", flag.ContinueOnError)
	path := fs.String("config", "", "attack config (JSON, written by the harness)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("attack: -config is required (the harness writes it)")
	}
	b, err := os.ReadFile(*path)
	if err != nil {
		return err
	}
	var cfg overload.AttackConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("parse %s: %w", *path, err)
	}
	return run(ctx, cfg, os.Stdout)
}

// splitList splits s at sep and drops empty items.
func splitList(s, sep string) []string {
	out := []string{}
	for _, x := range strings.Split(s, sep) {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
