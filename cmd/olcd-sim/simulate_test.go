package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/cli"
	"github.com/olcd/olcd/internal/fieldcases"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/trace"
)

// sharedTrace returns the path of one shared field-case trace.
func sharedTrace(t *testing.T, name string) string {
	t.Helper()
	dirs, err := fieldcases.Dirs(fieldcases.Traces)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dirs[0], name)
}

// writeConfig writes a config document into a temporary file.
func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "olcd.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readCSV parses the simulate output.
func readCSV(t *testing.T, data []byte) [][]string {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatalf("output is not CSV: %v", err)
	}
	return recs
}

// TestSimulateStepTrace replays the step-overload field case with a config
// that sets nothing but its threshold, and checks the output against the
// case's expectations and against the controller driven directly.
func TestSimulateStepTrace(t *testing.T) {
	cfgPath := writeConfig(t, "signals:\n  cpu_busy: {threshold: 0.8}\n")
	tracePath := sharedTrace(t, "step-overload.csv")
	out := filepath.Join(t.TempDir(), "out.csv")
	var stdout, stderr bytes.Buffer
	if err := cmdSimulate([]string{"--config", cfgPath, "--trace", tracePath, "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	recs := readCSV(t, data)
	if strings.Join(recs[0], ",") != csvHeader {
		t.Fatalf("header %v", recs[0])
	}
	tr, err := trace.ReadFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs)-1 != len(tr.Rows) {
		t.Fatalf("%d rows, want %d", len(recs)-1, len(tr.Rows))
	}
	cfg, _, err := rules.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := adaptive.New(cfg.ControllerConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	var positiveBy11, zeroFrom45 = false, true
	for i, rec := range recs[1:] {
		d := c.Step(tr.Snapshot(i), nil)
		ts, _ := strconv.ParseFloat(rec[0], 64)
		p, err := strconv.ParseFloat(rec[2], 64)
		if err != nil {
			t.Fatalf("row %d: drop_probability %q", i+1, rec[2])
		}
		if ts != tr.Rows[i].T || strconv.FormatFloat(d.DropProbability, 'g', 6, 64) != rec[2] {
			t.Errorf("row %d: t %v p %v, controller says t %v p %v", i+1, ts, p, tr.Rows[i].T, d.DropProbability)
		}
		positiveBy11 = positiveBy11 || (ts <= 11 && p > 0)
		if ts >= 45 && p != 0 {
			zeroFrom45 = false
		}
		if len(rec) != 7 || rec[3] == "" || rec[4] == "" || rec[5] == "" {
			t.Errorf("row %d: class columns missing: %v", i+1, rec)
		}
	}
	if !positiveBy11 || !zeroFrom45 {
		t.Errorf("p > 0 by 11 s: %v; p = 0 from 45 s: %v", positiveBy11, zeroFrom45)
	}
	for _, want := range []string{"overload_start", "overload_end", "first shed at t=10.5s"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout not empty with --out: %q", stdout.String())
	}
}

// TestSimulateStdoutAndPlot writes the CSV to stdout and a PNG plot with
// ports of every class and a signal in another unit (a fourth panel).
func TestSimulateStdoutAndPlot(t *testing.T) {
	cfgPath := writeConfig(t, `signals:
  cpu_busy: {threshold: 0.8}
  cgroup_throttled_ratio: {threshold: 0.25}
  cgroup_cpu_usage_of_quota: {threshold: 0.9}
ports:
  - {port: 443, class: critical}
  - {port: 80}
  - {port: 8080, class: best-effort}
`)
	tracePath := filepath.Join(t.TempDir(), "t.csv")
	var b strings.Builder
	b.WriteString("t_s,cpu_busy,load1,cgroup_throttled_ratio\n")
	for i := 0; i < 120; i++ {
		cpu := "0.5"
		switch {
		case i >= 40 && i < 80:
			cpu = "0.97"
		case i == 90:
			cpu = "NaN"
		case i == 95:
			cpu = ""
		}
		b.WriteString(strconv.FormatFloat(float64(i)*0.5, 'g', -1, 64) + "," + cpu + ",3,0.1\n")
	}
	if err := os.WriteFile(tracePath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	plotPath := filepath.Join(t.TempDir(), "p.png")
	var stdout, stderr bytes.Buffer
	if err := cmdSimulate([]string{"--config", cfgPath, "--trace", tracePath, "--plot", plotPath}, &stdout, &stderr); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	recs := readCSV(t, stdout.Bytes())
	if len(recs) != 121 {
		t.Fatalf("%d CSV lines, want 121", len(recs))
	}
	// With every class present and no measured demand, best-effort sheds
	// first and critical least.
	var sawShed bool
	for _, rec := range recs[1:] {
		pc, _ := strconv.ParseFloat(rec[4], 64)
		pn, _ := strconv.ParseFloat(rec[5], 64)
		pb, _ := strconv.ParseFloat(rec[6], 64)
		if pc > pn || pn > pb {
			t.Errorf("t=%s: classes out of order: critical %v normal %v best-effort %v", rec[0], pc, pn, pb)
		}
		sawShed = sawShed || pb > 0
	}
	if !sawShed {
		t.Error("no shedding in the overload")
	}
	if recs[96][1] != "" {
		t.Errorf("pressure at the unavailable tick: %q, want empty", recs[96][1])
	}
	f, err := os.Open(plotPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("plot is not a PNG: %v", err)
	}
	// 12 in × 100 dpi wide; four panels of 2.6 in (fractions, other units,
	// pressure, p).
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 1040 {
		t.Errorf("plot is %dx%d, want 1200x1040", b.Dx(), b.Dy())
	}
}

func TestSimulateErrors(t *testing.T) {
	good := writeConfig(t, "signals:\n  cpu_busy: {threshold: 0.8}\n")
	bad := writeConfig(t, "signals:\n  cpu_busy: {threshold: 80}\n")
	trace := sharedTrace(t, "step-overload.csv")
	badTrace := filepath.Join(t.TempDir(), "bad.csv")
	outDir := t.TempDir()
	if err := os.WriteFile(badTrace, []byte("t_s,cpu_bussy\n0,0.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		is     error  // errors.Is target, or nil for any error
		stderr string // substring of stderr or of the error
	}{
		{"no flags", nil, cli.ErrUsage, "--config and one of --trace or --plant are required"},
		{"no trace", []string{"--config", good}, cli.ErrUsage, "required"},
		{"stray argument", []string{"--config", good, "--trace", trace, "extra"}, cli.ErrUsage, "required"},
		{"unknown flag", []string{"--confg", good}, cli.ErrUsage, "flag provided but not defined"},
		{"invalid config", []string{"--config", bad, "--trace", trace}, cli.ErrProblems, "olcd.yaml:2: signals.cpu_busy.threshold: threshold 80 is outside (0, 1]"},
		{"missing config", []string{"--config", "/nonexistent/olcd.yaml", "--trace", trace}, os.ErrNotExist, "read config"},
		{"missing trace", []string{"--config", good, "--trace", "/nonexistent.csv"}, os.ErrNotExist, "read trace"},
		{"bad trace", []string{"--config", good, "--trace", badTrace}, nil, `bad.csv:1: column 2: unknown signal "cpu_bussy" (did you mean "cpu_busy"?)`},
		{"unwritable output", []string{"--config", good, "--trace", trace, "--out", "/nonexistent/dir/out.csv"}, os.ErrNotExist, "create output"},
		// The plot path is checked before the replay: no CSV on stdout, no
		// half-written --out file left behind.
		{"unwritable plot", []string{"--config", good, "--trace", trace, "--plot", "/nonexistent/dir/p.png"}, os.ErrNotExist, "create output"},
		{"unwritable plot with --out", []string{"--config", good, "--trace", trace, "--out", filepath.Join(outDir, "out.csv"), "--plot", "/nonexistent/dir/p.png"}, os.ErrNotExist, "create output"},
		{"plot into a directory", []string{"--config", good, "--trace", trace, "--plot", outDir}, nil, "create output"},
		{"plot with plant", []string{"--config", good, "--plant", "cpu-open-giveup-3x", "--plot", filepath.Join(outDir, "p.png")}, cli.ErrUsage, "draw it with tools/demoplot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := cmdSimulate(tt.args, &stdout, &stderr)
			if err == nil {
				t.Fatal("no error")
			}
			if stdout.Len() != 0 {
				t.Errorf("output written although the command failed: %d bytes", stdout.Len())
			}
			if entries, _ := os.ReadDir(outDir); len(entries) != 0 {
				t.Errorf("files left behind: %v", entries)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v, want %v", err, tt.is)
			}
			if !strings.Contains(stderr.String()+err.Error(), tt.stderr) {
				t.Errorf("error %v / stderr %q lack %q", err, stderr.String(), tt.stderr)
			}
		})
	}
}

func TestDecimate(t *testing.T) {
	seq := func(n int, f func(i int) float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	all := func(n int, gap func(i int) bool) []bool {
		out := make([]bool, n)
		for i := range out {
			out[i] = !gap(i)
		}
		return out
	}
	none := func(int) bool { return false }
	tests := []struct {
		name     string
		ys       []float64
		ok       []bool
		buckets  int
		wantLen  int
		wantGaps int
		keep     []float64 // values that must survive
	}{
		{"short series unchanged", seq(10, func(i int) float64 { return float64(i) }), all(10, none), 5, 10, 0, nil},
		{"a one-tick spike survives", seq(1000, func(i int) float64 {
			if i == 617 {
				return 9
			}
			return 1
		}), all(1000, none), 10, 11, 0, []float64{9}},
		{"a one-tick dip survives", seq(1000, func(i int) float64 {
			if i == 3 {
				return -4
			}
			return 1
		}), all(1000, none), 10, 11, 0, []float64{-4}},
		{"a bucket without a usable tick is a gap", seq(1000, func(i int) float64 { return float64(i % 7) }),
			all(1000, func(i int) bool { return i >= 100 && i < 200 }), 10, 19, 1, []float64{0, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := seq(len(tt.ys), func(i int) float64 { return float64(i) / 2 })
			dts, dys, dok := decimate(ts, tt.ys, tt.ok, tt.buckets)
			if len(dts) != tt.wantLen || len(dys) != len(dts) || len(dok) != len(dts) {
				t.Fatalf("%d points, want %d", len(dts), tt.wantLen)
			}
			gaps := 0
			for i := range dts {
				if i > 0 && dts[i] < dts[i-1] {
					t.Errorf("time goes backwards at %d: %v after %v", i, dts[i], dts[i-1])
				}
				if !dok[i] {
					gaps++
				}
			}
			if gaps != tt.wantGaps {
				t.Errorf("%d gaps, want %d", gaps, tt.wantGaps)
			}
			for _, v := range tt.keep {
				found := false
				for i := range dys {
					found = found || (dok[i] && dys[i] == v)
				}
				if !found {
					t.Errorf("value %v lost", v)
				}
			}
		})
	}
}

// TestSimulateLongTracePlot replays a trace of 200 000 ticks of noise with
// --plot. Plotting every point through gonum's rasteriser took minutes
// (quadratic in the length of a stroked line); decimated and chunked it
// takes well under a second. The test checks that the plot is a PNG and the
// summary covers every tick.
func TestSimulateLongTracePlot(t *testing.T) {
	if testing.Short() {
		t.Skip("long trace")
	}
	cfgPath := writeConfig(t, "signals:\n  cpu_busy: {threshold: 0.8}\n")
	tracePath := filepath.Join(t.TempDir(), "long.csv")
	var b strings.Builder
	b.WriteString("t_s,cpu_busy\n")
	const n = 200000
	for i := range n {
		v := float64((i*7919)%1000) / 1000
		if i%5000 == 7 {
			b.WriteString(strconv.FormatFloat(float64(i)*0.5, 'f', 1, 64) + ",\n")
			continue
		}
		b.WriteString(strconv.FormatFloat(float64(i)*0.5, 'f', 1, 64) + "," + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
	}
	if err := os.WriteFile(tracePath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	plotPath := filepath.Join(t.TempDir(), "p.png")
	var stderr bytes.Buffer
	if err := cmdSimulate([]string{"--config", cfgPath, "--trace", tracePath, "--out", filepath.Join(t.TempDir(), "o.csv"), "--plot", plotPath}, io.Discard, &stderr); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "200000 ticks") {
		t.Errorf("summary: %s", stderr.String()[max(0, stderr.Len()-200):])
	}
	f, err := os.Open(plotPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("plot is not a PNG: %v", err)
	}
}

// TestSimulateResponseThreshold: a threshold on response_time_p95 written
// as a duration drives shedding through the existing law, and the output
// repeats the trace's measured-queue column beside the decisions.
func TestSimulateResponseThreshold(t *testing.T) {
	cfgPath := writeConfig(t, "signals:\n  response_time_p95: {threshold: 50ms}\n")
	trace := filepath.Join(t.TempDir(), "queue.csv")
	rows := "t_s,response_time_p95\n0,0.010\n0.5,0.012\n1,0.080\n1.5,0.120\n2,0.150\n2.5,\n3,0.012\n"
	if err := os.WriteFile(trace, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := cmdSimulate([]string{"--config", cfgPath, "--trace", trace}, &stdout, &stderr); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	recs := readCSV(t, stdout.Bytes())
	if got := strings.Join(recs[0], ","); got != csvHeader+",response_time_p95" {
		t.Fatalf("header %q", got)
	}
	shed := false
	for _, r := range recs[1:] {
		p, _ := strconv.ParseFloat(r[2], 64)
		shed = shed || p > 0
	}
	if !shed {
		t.Errorf("a p95 of 150 ms over a 50 ms threshold shed nothing:\n%s", stdout.String())
	}
	if recs[6][7] != "" || recs[5][7] != "0.15" {
		t.Errorf("measured-queue column %q %q, want 0.15 and empty (unavailable)", recs[5][7], recs[6][7])
	}
}

// TestSimulatePlant runs `olcd-sim simulate --plant` on the closed-loop and
// the retrying clients of the plant and checks its CSV (one row per tick,
// the p column within the bound) and its summary line against the
// no-limit-cycle line; an unknown scenario is refused by name.
func TestSimulatePlant(t *testing.T) {
	cfgPath := writeConfig(t, "ports: [{port: 8080}]\ncontroller: {min_pass_rate: 0.05}\n")
	for _, name := range []string{"pool-closed-pool-3x", "cpu-open-retry-3x", "cpu-open-giveup-coldstart"} {
		var stdout, stderr bytes.Buffer
		if err := cmdSimulate([]string{"--config", cfgPath, "--plant", name}, &stdout, &stderr); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, stderr.String())
		}
		recs := readCSV(t, stdout.Bytes())
		if strings.Join(recs[0], ",") != plantCSVHeader {
			t.Fatalf("%s: header %v", name, recs[0])
		}
		if len(recs) < 60 {
			t.Fatalf("%s: %d rows", name, len(recs))
		}
		var maxP float64
		for _, r := range recs[1:] {
			// Under retransmits last the p is the retransmits' alone,
			// every first attempt passing: min_pass_rate does not bound it.
			rule := r[len(r)-1]
			p, err := strconv.ParseFloat(r[len(r)-2], 64)
			if err != nil || p < 0 || p > 1 || (rule != "last" && p > 0.95) {
				t.Fatalf("%s: drop probability %q (%s)", name, r[len(r)-2], rule)
			}
			maxP = max(maxP, p)
		}
		if maxP == 0 {
			t.Errorf("%s: nothing shed", name)
		}
		sum := stderr.String()
		if !strings.Contains(sum, name+" (seed 1, tcp/8080") || !strings.Contains(sum, "goodput") {
			t.Errorf("%s: summary %q", name, sum)
		}
		if m := longTime.FindString(sum); m != "" {
			t.Errorf("%s: time %q printed with a float's every digit", name, m)
		}
		t.Log(strings.TrimSpace(sum[strings.LastIndex(strings.TrimSpace(sum), "\n")+1:]))
	}
	// The config's datapath.selection is the plant's draw: random (the
	// default) and even shed different connections.
	runs := map[string]string{}
	for _, sel := range []string{"random", "even"} {
		var stdout bytes.Buffer
		path := writeConfig(t, "ports: [{port: 8080}]\ndatapath: {selection: "+sel+"}\n")
		if err := cmdSimulate([]string{"--config", path, "--plant", "cpu-open-giveup-3x"}, &stdout, io.Discard); err != nil {
			t.Fatalf("selection %s: %v", sel, err)
		}
		runs[sel] = stdout.String()
	}
	if runs["random"] == runs["even"] {
		t.Error("selection random and even simulated alike")
	}
	var stderr bytes.Buffer
	err := cmdSimulate([]string{"--config", cfgPath, "--plant", "disk-open-giveup-3x"}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), `unknown backend "disk"`) {
		t.Errorf("unknown backend: %v", err)
	}
	if err := cmdSimulate([]string{"--config", cfgPath, "--plant", "cpu-open-giveup-3x", "--trace", "x.csv"}, io.Discard, &stderr); !errors.Is(err, cli.ErrUsage) {
		t.Errorf("--plant with --trace: %v", err)
	}
}

// longTime is an event time printed unrounded (t=41.050000000000004s).
var longTime = regexp.MustCompile(`t=[0-9]+\.[0-9]{4,}s`)

// TestSeconds: simulation times print rounded to the millisecond.
func TestSeconds(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want string
	}{
		{26.650000000000002, "26.65s"},
		{41.050000000000004, "41.05s"},
		{10, "10s"},
		{10.1, "10.1s"},
		{0.0004, "0s"},
		{1.2346, "1.235s"},
	} {
		if got := seconds(tt.in); got != tt.want {
			t.Errorf("seconds(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestSimulateNotes: a simulation says where it departs from what the
// daemon would do with the config: under mode off (which sheds nothing) or
// observe it still applies the drop probabilities, and a plant run under
// ports: [] still protects a port. Those ran without a word, a mode: off
// config showing a shedding node.
func TestSimulateNotes(t *testing.T) {
	for _, tt := range []struct {
		doc, want string
	}{
		{"mode: off\n", "note: mode: off: the daemon would shed nothing"},
		{"mode: observe\nports: [{port: 80}]\n", "note: mode: observe: the daemon would only count"},
		{"mode: enforce\nports: []\n", "note: ports: [] protects nothing; the plant runs on tcp/18080"},
		{"mode: observe\nports: [{port: 80, mode: enforce}]\n", ""},
		{"mode: enforce\n", ""},
	} {
		var stderr bytes.Buffer
		if err := cmdSimulate([]string{"--config", writeConfig(t, tt.doc), "--plant", "cpu-open-giveup-coldstart"}, io.Discard, &stderr); err != nil {
			t.Fatalf("%q: %v", tt.doc, err)
		}
		got := stderr.String()
		if tt.want == "" && strings.Contains(got, "note: ") || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("config %q: stderr %q, want note %q", tt.doc, got, tt.want)
		}
	}
}

// TestSimulateNoThresholdWarning: a trace none of whose columns has a
// threshold in the config replays to p = 0 everywhere; the run says so on
// stderr instead of printing a reassuring "max drop probability 0.000"
// alone, and says nothing when one column has a threshold.
func TestSimulateNoThresholdWarning(t *testing.T) {
	tracePath := filepath.Join(t.TempDir(), "t.csv")
	var b strings.Builder
	b.WriteString("t_s,load1,runnable\n")
	for i := 0; i < 20; i++ {
		b.WriteString(strconv.FormatFloat(float64(i)*0.5, 'g', -1, 64) + ",30,40\n")
	}
	if err := os.WriteFile(tracePath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, config string
		warn         bool
	}{
		{"thresholds on other signals", "signals:\n  cpu_busy: {threshold: 0.8}\n", true},
		{"the defaults", "mode: observe\n", true},
		{"a column with a threshold", "signals:\n  load1: {threshold: 8}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := cmdSimulate([]string{"--config", writeConfig(t, tc.config), "--trace", tracePath}, &stdout, &stderr); err != nil {
				t.Fatalf("simulate: %v\n%s", err, stderr.String())
			}
			got := strings.Contains(stderr.String(), "has a threshold in the config: its columns are load1, runnable")
			if got != tc.warn {
				t.Errorf("warning printed %v, want %v:\n%s", got, tc.warn, stderr.String())
			}
		})
	}
}
