// Command olcd-overload is `make demo` and `make demo-full`: it calibrates
// each backend's capacity C on this machine (a CPU-bound HTTP server, a
// server whose capacity is a pool of 8 workers, Debian's nginx + php-fpm,
// Debian's MariaDB with connection-per-query clients),
// then runs the overload scenarios of the client × backend matrix with real
// TCP traffic from a client network namespace, each against no olcd, olcd
// enforcing and a static nftables SYN limit at C (and more variants where
// they tell something), and prints a table per scenario and the matrix.
// Results go to <out>/results.json, a PNG time series per run beside it.
//
//	olcd-overload [demo] [-set headline|full|classic] [-olcd bin/olcd] [-out out/demo] [-scenarios a,b] [-variants x,y]
//	olcd-overload repeats out/run1 out/run2 ...   (each cell's min / median / max over runs of the same matrix)
//	olcd-overload board [-olcd bin/olcd] [-out out/board] [-png docs/img/board.png]   (make docs-board: the README's board, boardRun)
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
	case "board":
		err = boardRun(ctx, args)
	case "backend":
		err = backend(ctx, args)
	case "repeats":
		err = repeats(args)
	case "attack":
		err = attack(ctx, args, overload.RunAttack)
	case string(overload.ClientsClosedPool):
		err = attack(ctx, args, overload.RunClosedPool)
	default:
		err = fmt.Errorf("unknown command %q: want demo, repeats, board, backend, attack or closed-pool", cmd)
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

// plan is one scenario and the variants it runs under.
type plan struct {
	sc       overload.Scenario
	variants []overload.Variant
}

// Variants of the matrix: every scenario against no olcd, olcd enforcing
// and a static nftables SYN limit at C; the backends whose bottleneck is
// not CPU (pool, php; db's is) also against a CPU-threshold-only olcd; the closed-pool clients
// also with shed SYNs answered with a reset (olcd and nftables); the cpu
// backend under open-loop clients also against the in-app limiter (the
// comparison the overload suite ran until it kept olcd's lines alone).
var (
	base3      = []overload.Variant{overload.VariantNone, overload.VariantEnforce, overload.VariantStatic}
	withCPU    = []overload.Variant{overload.VariantEnforceCPU}
	withReject = []overload.Variant{overload.VariantEnforceReject, overload.VariantStaticReject}
)

// matrixVariants returns the variants of backend b with clients c.
func matrixVariants(b overload.Backend, c overload.Clients, reject bool) []overload.Variant {
	v := append([]overload.Variant{}, base3...)
	if b != overload.BackendCPU && b != overload.BackendDB {
		v = append(v, withCPU...)
	}
	if b == overload.BackendCPU && c == overload.ClientsOpenGiveUp {
		v = append(v, overload.VariantInApp)
	}
	if c == overload.ClientsClosedPool {
		if reject {
			v = append(v, withReject...)
		} else {
			v = append(v, overload.VariantEnforceReject)
		}
	}
	return v
}

// plans returns the runs of a set: "headline" (make demo, about 8 min: the
// cpu backend with vegeta and with closed-pool clients, php with vegeta,
// the cold start; 20 s at 3 C), "full" (make demo-full: every backend ×
// every client it speaks to (db: closed-pool alone, db-closed-pool-3x),
// cpu-keepalive-3x and php-keepalive-3x (20 s at 3 C on open connections),
// the cold start and capacity-halved; 25 s at 3 C) or
// "classic" (the suite's scenario 1 and 2 five ways, as make demo ran
// before the matrix).
func plans(set string) ([]plan, error) {
	switch set {
	case "headline":
		low, high, after := 4*time.Second, 20*time.Second, 6*time.Second
		return []plan{
			{overload.Matrix3x(overload.BackendCPU, overload.ClientsOpenGiveUp, low, high, after), base3},
			{overload.Matrix3x(overload.BackendCPU, overload.ClientsClosedPool, low, high, after), append(append([]overload.Variant{}, base3...), overload.VariantEnforceReject)},
			{overload.Matrix3x(overload.BackendPHP, overload.ClientsOpenGiveUp, low, high, after), append(append([]overload.Variant{}, base3...), overload.VariantEnforceCPU)},
			{overload.ColdStart, base3},
		}, nil
	case "full":
		low, high, after := 4*time.Second, 25*time.Second, 6*time.Second
		var ps []plan
		for _, b := range overload.Backends {
			for _, c := range overload.ClientsOf(b) {
				ps = append(ps, plan{overload.Matrix3x(b, c, low, high, after), matrixVariants(b, c, true)})
			}
		}
		// The keep-alive clients on the HTTP backends that hold
		// connections open (issue 26): 3 C for 20 s on open connections.
		for _, b := range []overload.Backend{overload.BackendCPU, overload.BackendPHP} {
			ps = append(ps, plan{overload.KeepAlive3x(b, 20*time.Second, after), base3})
		}
		return append(ps, plan{overload.ColdStart, base3}, plan{overload.CapacityHalved, base3}), nil
	case "classic":
		all := []overload.Variant{overload.VariantNone, overload.VariantObserve, overload.VariantEnforce, overload.VariantStatic, overload.VariantInApp}
		return []plan{{overload.Overload3x, all}, {overload.CapacityHalved, all}}, nil
	}
	return nil, fmt.Errorf("-set: unknown set %q (have headline, full, classic)", set)
}

func demo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	olcd := fs.String("olcd", "bin/olcd", "olcd binary")
	out := fs.String("out", "out/demo", "directory for results.json, plots and logs")
	set := fs.String("set", "headline", "which runs: headline (make demo), full (make demo-full: the whole matrix) or classic")
	scen := fs.String("scenarios", "", "only these scenarios of the set, comma-separated (default: all)")
	vars := fs.String("variants", "", "only these variants, comma-separated (default: each scenario's)")
	work := fs.Duration("work", 5*time.Millisecond, "CPU time per request")
	slo := fs.Duration("slo", 200*time.Millisecond, "latency within which a success is goodput")
	interval := fs.Duration("olcd-interval", 500*time.Millisecond, "olcd's tick")
	ctl := fs.String("olcd-controller", "", "olcd controller settings over the recommended config's, \"key: value\" separated by ; (a comparison; default: the file's)")
	factor := fs.Float64("threshold-factor", overload.ThresholdFactor, "olcd's threshold as a share of the knee's CPU")
	gomaxprocs := fs.Int("gomaxprocs", 1, "the backend's GOMAXPROCS (-1: the Go runtime's choice)")
	selection := fs.String("selection", "", "olcd's datapath.selection: random or even (default: olcd's)")
	cpuGuard := fs.Bool("cpu-guard", false, "enforce with the cgroup's CPU threshold as a guard beside the queue law (default: the recommended config's guards)")
	signals := fs.String("signals", "", "enforce's signals in place of the recommended config's guards, \"name: {threshold: x}\" separated by ; (a comparison; default: the file's)")
	config := fs.String("config", overload.ConfigBareMetal, "the recommended config olcd runs, relative to the repository ("+overload.ConfigBareMetal+", "+overload.ConfigHAProxy+", "+overload.ConfigKubernetes+")")
	reuse := fs.String("calibration", "", "reuse the calibrations of an earlier results.json instead of calibrating")
	resume := fs.Bool("resume", false, "continue the results.json in -out: reuse its calibrations, skip the runs it has")
	target := fs.String("response-target", "", "enforce's response-time target with olcd's law on the measured queue: \"\" (olcd's default, auto) or knee (the calibration's latency limit)")
	if err := parse(fs, args); err != nil {
		return err
	}
	overload.ThresholdFactor = *factor
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespace, veth, cgroup, nftables, BPF): run 'sudo make demo'")
	}
	if *target != "" && *target != "knee" {
		return fmt.Errorf("-response-target: %q: want \"\" or knee", *target)
	}
	runs, err := plans(*set)
	if err != nil {
		return err
	}
	if *scen != "" {
		want := map[string]bool{}
		for _, n := range splitList(*scen, ",") {
			want[n] = true
		}
		var kept []plan
		for _, p := range runs {
			if want[p.sc.Name] {
				kept = append(kept, p)
				delete(want, p.sc.Name)
			}
		}
		for n := range want {
			var have []string
			for _, p := range runs {
				have = append(have, p.sc.Name)
			}
			return fmt.Errorf("-scenarios: no scenario %q in set %s (have %s)", n, *set, strings.Join(have, ", "))
		}
		runs = kept
	}
	if *vars != "" {
		var vs []overload.Variant
		for _, n := range splitList(*vars, ",") {
			v := overload.Variant(n)
			if !validVariant(v) {
				return fmt.Errorf("-variants: unknown variant %q (have %s)", n, variantNames())
			}
			vs = append(vs, v)
		}
		for i := range runs {
			runs[i].variants = vs
		}
	}
	var prev []*overload.Calibration
	var done *overload.Report
	if *resume {
		path := filepath.Join(*out, "results.json")
		if *reuse == "" {
			if _, err := os.Stat(path); err == nil {
				*reuse = path
			}
		}
		if b, err := os.ReadFile(path); err == nil {
			done = &overload.Report{}
			if err := json.Unmarshal(b, done); err != nil {
				return fmt.Errorf("-resume: parse %s: %w", path, err)
			}
		}
	}
	if *reuse != "" {
		if prev, err = readCalibrations(*reuse); err != nil {
			return fmt.Errorf("-calibration %s: %w", *reuse, err)
		}
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
	backends := map[overload.Backend]bool{}
	halved := false
	var load time.Duration
	nRuns := 0
	for _, p := range runs {
		backends[backendOf(p.sc)] = true
		halved = halved || p.sc.Name == overload.CapacityHalved.Name
		for _, ph := range p.sc.Phases {
			load += time.Duration(len(p.variants)) * ph.Duration
		}
		nRuns += len(p.variants)
	}
	took := fmt.Sprintf("%.1f min of load, besides starts and calibration", load.Minutes())
	if m, ok := setMinutes[*set]; ok && *scen == "" && *vars == "" && !*resume && prev == nil {
		took = fmt.Sprintf("about %.0f min in all on 2 cores, calibration included", m)
	}
	fmt.Printf("olcd overload demo (%s): %d scenario(s), %d runs (%s); results in %s\n",
		*set, len(runs), nRuns, took, *out)
	h, err := overload.New(ctx, overload.Options{Olcd: olcdAbs, Self: self, OutDir: outAbs, Work: *work, SLO: *slo, Progress: os.Stdout,
		OlcdInterval: *interval, GOMAXPROCS: *gomaxprocs, Selection: *selection, CPUGuard: *cpuGuard, OlcdController: splitList(*ctl, ";"), ResponseTarget: *target,
		Config: *config, Signals: guards(*signals)})
	if err != nil {
		return err
	}
	defer h.Close()
	for _, c := range prev {
		c.ThresholdFactor = overload.ThresholdFactor
		c.Threshold = min(c.KneeCPUBusy*overload.ThresholdFactor, overload.MaxThreshold)
		h.SetCalibration(c)
		b := c.Backend
		if b == "" {
			b = overload.BackendCPU
		}
		fmt.Printf("calibration of %s from %s: C = %.0f req/s, thresholds %.3f CPU, %.1f ms p95\n", b, *reuse, c.CapacityRPS, c.Threshold, 1e3*c.ResponseThreshold)
	}
	for _, b := range overload.Backends {
		if backends[b] && h.CalibrationOf(b) == nil {
			if _, err := h.CalibrateBackend(ctx, b); err != nil {
				return err
			}
		}
	}
	if halved && h.Calibration.QuotaHalved == nil {
		if _, err := h.CalibrateHalved(ctx); err != nil {
			return err
		}
	}
	rep := h.NewReport()
	have := map[string]bool{}
	if done != nil {
		for _, sr := range done.Scenarios {
			sr.RunResult.Scenario = sr.Name
			rep.Add(&sr.RunResult)
			have[sr.Name+"/"+string(sr.Variant)] = true
		}
	}
	resultsPath := filepath.Join(outAbs, "results.json")
	began, i := time.Now(), 0
	for _, p := range runs {
		for _, v := range p.variants {
			i++
			if have[p.sc.Name+"/"+string(v)] {
				fmt.Printf("\n== %s / %s: in %s already (-resume)\n", p.sc.Name, v, resultsPath)
				nRuns--
				i--
				continue
			}
			eta := ""
			if i > 1 {
				left := time.Since(began) / time.Duration(i-1) * time.Duration(nRuns-i+1)
				eta = fmt.Sprintf(", ~%.0f min left", left.Minutes())
			}
			fmt.Printf("\n== [%d/%d%s] %s / %s\n", i, nRuns, eta, p.sc.Name, v)
			res, err := h.Run(ctx, p.sc, v, overload.RunOptions{})
			if err != nil {
				return fmt.Errorf("%s/%s: %w", p.sc.Name, v, err)
			}
			rep.Add(res)
			if m := res.Summary; m != nil {
				fmt.Printf("  %s/%s %s: goodput %.2f C (+5s %.2f C), p99 %.0f ms, steady %.2f, connect %.0f ms, health %d/%d\n",
					p.sc.Name, v, m.Phase, m.GoodputC, m.SettledGoodputC, m.P99Ms, m.WindowsOK, m.MeanConnectMs, m.HealthOK, m.HealthTotal)
			}
			if err := rep.WriteJSON(resultsPath); err != nil {
				return err
			}
		}
	}
	rep.PrintTables(os.Stdout)
	fmt.Printf("results: %s\n", resultsPath)
	return nil
}

// setMinutes is how long a whole set took on a 2-core VM, calibration and
// builds included: make demo 8.2 min, make demo-full about 45 min
// (docs/development.md). The banner quotes it for a whole set; for a part
// of one it gives the load's own time, and the runs' headers the time left.
var setMinutes = map[string]float64{"headline": 8, "full": 45}

// backendOf is a scenario's backend, cpu when unset.
func backendOf(sc overload.Scenario) overload.Backend {
	if sc.Backend == "" {
		return overload.BackendCPU
	}
	return sc.Backend
}

func variantNames() string {
	var n []string
	for _, v := range overload.Variants {
		n = append(n, string(v))
	}
	return strings.Join(n, ", ")
}

// readCalibrations reads the calibrations of an earlier results.json.
func readCalibrations(path string) ([]*overload.Calibration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var prev overload.Report
	if err := json.Unmarshal(b, &prev); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	var out []*overload.Calibration
	if prev.Calibration != nil {
		out = append(out, prev.Calibration)
	}
	for b, c := range prev.Calibrations {
		if c != nil && b != overload.BackendCPU {
			c.Backend = b
			out = append(out, c)
		}
	}
	for _, c := range out {
		if c.CapacityRPS <= 0 || c.KneeCPUBusy <= 0 || c.KneeCPUBusy > 1.5 || c.ResponseThreshold <= 0 {
			return nil, errors.New(`no usable calibration (want capacity_rps > 0, knee_cpu_busy in (0, 1.5] and response_threshold_s > 0)`)
		}
	}
	if len(out) == 0 {
		return nil, errors.New(`no "calibration"`)
	}
	return out, nil
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
	fs.IntVar(&cfg.Workers, "workers", 0, "a pool of this many workers, each holding a request for -sleep (0: no pool)")
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
// guards are the -signals lines: nil for none given (the recommended
// config's guards stand).
func guards(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return splitList(s, ";")
}

func splitList(s, sep string) []string {
	out := []string{}
	for _, x := range strings.Split(s, sep) {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// repeats prints each cell of the runs in the given output directories
// (or results.json files) as min / median / max over the runs.
func repeats(args []string) error {
	if len(args) == 0 {
		return errors.New("repeats: name the output directories (or results.json files) of the runs")
	}
	var reps []*overload.Report
	for _, a := range args {
		path := a
		if st, err := os.Stat(a); err == nil && st.IsDir() {
			path = filepath.Join(a, "results.json")
		}
		r, err := overload.ReadReport(path)
		if err != nil {
			return fmt.Errorf("repeats: %w", err)
		}
		reps = append(reps, r)
	}
	overload.PrintRepeats(os.Stdout, reps)
	return nil
}
