package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/olcd/olcd/tests/e2e/overload"
	"github.com/olcd/olcd/tools/board"
)

// boardInstance is the instance label the board's run gives its olcd, as
// the PodMonitor names a node.
const boardInstance = "node-1"

// boardRun is `olcd-overload board` (make docs-board): the picture of the
// Grafana board in the README, from a real run. It calibrates the cpu
// backend, starts Debian's Prometheus scraping olcd every second with
// olcd's rules, plays overload.BoardRun with olcd enforcing on the
// recommended bare-metal config (its metrics address the run's), then
// draws every panel of deploy/grafana/olcd.json over the run with
// tools/board. Prometheus's data stays in <out>/prometheus, and the
// command to draw again from it is printed.
func boardRun(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("board", flag.ContinueOnError)
	olcd := fs.String("olcd", "bin/olcd", "olcd binary")
	out := fs.String("out", "out/board", "directory for the run's records and Prometheus's data")
	png := fs.String("png", "docs/img/board.png", "the picture to write")
	boardPath := fs.String("board", "deploy/grafana/olcd.json", "the Grafana board")
	promBin := fs.String("prometheus", "prometheus", "the prometheus binary (Debian's package prometheus)")
	reuse := fs.String("calibration", "", "reuse the calibration of an earlier results.json instead of calibrating")
	if err := parse(fs, args); err != nil {
		return err
	}
	if _, err := board.Load(*boardPath); err != nil {
		return err // before the run, not after
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespace, veth, cgroup, BPF): run 'sudo make docs-board'")
	}
	prom, err := exec.LookPath(*promBin)
	if err != nil {
		return fmt.Errorf("%s: %w (apt-get install prometheus, or scripts/deps.sh test)", *promBin, err)
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
	h, err := overload.New(ctx, overload.Options{Olcd: olcdAbs, Self: self, OutDir: outAbs, Progress: os.Stdout})
	if err != nil {
		return err
	}
	defer h.Close()
	if *reuse != "" {
		prev, err := readCalibrations(*reuse)
		if err != nil {
			return fmt.Errorf("-calibration %s: %w", *reuse, err)
		}
		for _, c := range prev {
			h.SetCalibration(c)
		}
	}
	if h.Calibration == nil {
		if _, err := h.Calibrate(ctx); err != nil {
			return err
		}
	}
	metrics, err := overload.FreeLoopback()
	if err != nil {
		return err
	}
	dir := filepath.Join(outAbs, "prometheus")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := overload.StartPrometheus(ctx, prom, dir, metrics, boardInstance)
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Printf("prometheus %s scraping olcd at %s every %s (config, log and data in %s)\n", p.URL, metrics, overload.PrometheusScrape, dir)
	from := time.Now()
	r, err := h.Run(ctx, overload.BoardRun, overload.VariantEnforce, overload.RunOptions{OlcdMetrics: metrics})
	if err != nil {
		return err
	}
	to := time.Now()
	for _, ph := range r.Phases {
		fmt.Printf("%-12s offered %4.0f/s goodput %4.0f/s (%.2f C) SYN drop %.1f%% p %.2f health %d/%d\n", ph.Name, ph.OfferedRPS, ph.GoodputRPS,
			ph.GoodputRPS/r.CapacityRPS, 100*ph.SYNDropRatio, ph.MeanP, ph.HealthOK, ph.HealthTotal)
	}
	// Two more scrapes and rule evaluations, so the last seconds are in.
	time.Sleep(3 * overload.PrometheusScrape)
	d, err := board.Load(*boardPath)
	if err != nil {
		return err
	}
	c, err := api.NewClient(api.Config{Address: p.URL})
	if err != nil {
		return err
	}
	style := board.DefaultStyle
	rg := board.Range{From: from, To: to, Scrape: overload.PrometheusScrape, Points: style.Width / 2,
		Vars: map[string]string{"instance": boardInstance, "job": "olcd"}}
	empty, err := board.Render(ctx, v1.NewAPI(c), d, rg, style, *png, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Printf("to draw it again from the kept data:\n  prometheus --config.file=%s/prometheus.yml --storage.tsdb.path=%s/data --web.listen-address=127.0.0.1:9090 &\n"+
		"  go run ./tools/boardplot -prometheus http://127.0.0.1:9090 -scrape %s -from %s -to %s -var instance=%s -var job=olcd -out %s\n",
		dir, dir, overload.PrometheusScrape, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), boardInstance, *png)
	if empty > 0 {
		return fmt.Errorf("%d board queries returned no series over the run (listed above): the picture has empty panels", empty)
	}
	return nil
}
