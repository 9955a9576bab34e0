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
		err = attack(ctx, args)
	default:
		err = fmt.Errorf("unknown command %q: want demo, backend or attack", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "olcd-overload:", err)
		os.Exit(1)
	}
}

// scenarios by name.
var scenarios = map[string]overload.Scenario{
	overload.Overload3x.Name:     overload.Overload3x,
	overload.CapacityHalved.Name: overload.CapacityHalved,
}

func demo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	olcd := fs.String("olcd", "bin/olcd", "olcd binary")
	out := fs.String("out", "out/demo", "directory for results.json, plots and logs")
	scen := fs.String("scenarios", "overload-3x,capacity-halved", "scenarios to run, comma-separated")
	vars := fs.String("variants", "none,observe,enforce,static,inapp", "variants to run, comma-separated")
	work := fs.Duration("work", 5*time.Millisecond, "CPU time per request")
	slo := fs.Duration("slo", 200*time.Millisecond, "latency within which a success is goodput")
	interval := fs.Duration("olcd-interval", 500*time.Millisecond, "olcd's tick")
	ctl := fs.String("olcd-controller", strings.Join(overload.DefaultController, ";"), "olcd controller settings, \"key: value\" separated by ;")
	factor := fs.Float64("threshold-factor", overload.ThresholdFactor, "olcd's threshold as a share of the knee's CPU")
	gomaxprocs := fs.Int("gomaxprocs", 1, "the backend's GOMAXPROCS (-1: the Go runtime's choice)")
	selection := fs.String("selection", "even", "olcd's datapath.selection: random or even")
	reuse := fs.String("calibration", "", "reuse the calibration of an earlier results.json instead of calibrating")
	fs.Parse(args)
	overload.ThresholdFactor = *factor
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespace, veth, cgroup, nftables, BPF): run 'sudo make demo'")
	}
	var runs []overload.Scenario
	for _, n := range strings.Split(*scen, ",") {
		sc, ok := scenarios[n]
		if !ok {
			return fmt.Errorf("-scenarios: unknown scenario %q (have overload-3x, capacity-halved)", n)
		}
		runs = append(runs, sc)
	}
	var variants []overload.Variant
	for _, n := range strings.Split(*vars, ",") {
		v := overload.Variant(n)
		if !validVariant(v) {
			return fmt.Errorf("-variants: unknown variant %q (have none, observe, enforce, static, inapp)", n)
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
	fmt.Printf("olcd overload demo: calibration (~40 s), then %d scenario(s) × %d variant(s) (~%.0f min in all); results in %s\n",
		len(runs), len(variants), (40*time.Second + time.Duration(len(variants))*(total+time.Duration(len(runs))*6*time.Second)).Minutes(), *out)
	h, err := overload.New(overload.Options{Olcd: olcdAbs, Self: self, OutDir: outAbs, Work: *work, SLO: *slo, Progress: os.Stdout,
		OlcdInterval: *interval, GOMAXPROCS: *gomaxprocs, Selection: *selection, OlcdController: splitList(*ctl, ";")})
	if err != nil {
		return err
	}
	defer h.Close()
	if *reuse != "" {
		var prev overload.Report
		b, err := os.ReadFile(*reuse)
		if err == nil {
			err = json.Unmarshal(b, &prev)
		}
		if err == nil && prev.Calibration == nil {
			err = errors.New("no calibration in it")
		}
		if err != nil {
			return fmt.Errorf("-calibration %s: %w", *reuse, err)
		}
		prev.Calibration.ThresholdFactor = overload.ThresholdFactor
		prev.Calibration.Threshold = min(prev.Calibration.KneeCPUBusy*overload.ThresholdFactor, overload.MaxThreshold)
		h.Calibration = prev.Calibration
		fmt.Printf("calibration from %s: C = %.0f req/s, threshold %.3f\n", *reuse, prev.Calibration.CapacityRPS, prev.Calibration.Threshold)
	} else if _, err := h.Calibrate(ctx); err != nil {
		return err
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

func validVariant(v overload.Variant) bool {
	for _, x := range overload.Variants {
		if x == v {
			return true
		}
	}
	return false
}

func backend(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("backend", flag.ExitOnError)
	var cfg overload.BackendConfig
	fs.StringVar(&cfg.Addr, "addr", "", "listen address (the host side of the veth pair)")
	fs.IntVar(&cfg.Port, "port", overload.WorkPort, "work port")
	fs.IntVar(&cfg.HealthPort, "health-port", overload.HealthPort, "health-check port")
	fs.DurationVar(&cfg.Work, "work", 5*time.Millisecond, "CPU time per request")
	fs.IntVar(&cfg.Iterations, "iterations", 0, "spin rounds per request (0: calibrate from -work)")
	fs.StringVar(&cfg.Limiter, "limiter", "", `"" or "bbr" (go-kratos/aegis)`)
	fs.Parse(args)
	return overload.RunBackend(ctx, cfg)
}

func attack(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("attack", flag.ExitOnError)
	path := fs.String("config", "", "attack config (JSON, written by the harness)")
	fs.Parse(args)
	b, err := os.ReadFile(*path)
	if err != nil {
		return err
	}
	var cfg overload.AttackConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("parse %s: %w", *path, err)
	}
	return overload.RunAttack(ctx, cfg, os.Stdout)
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
