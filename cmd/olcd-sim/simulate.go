package main

import (
	"bufio"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/cli"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/trace"
)

const simulateUsage = `Usage: olcd-sim simulate --config FILE --trace FILE.csv [--out FILE.csv] [--plot FILE.png]
       olcd-sim simulate --config FILE --plant SCENARIO [--seed N] [--out FILE.csv]

Replays a trace (the format of the field cases: t_s,<signal>,… one row per
tick, an empty cell = unavailable) through the controller with the config's
thresholds and parameters, and writes one CSV row per tick:
  t_s,pressure,drop_probability,p_critical,p_normal,p_best_effort,overloaded
(pressure is empty when no signal was usable), followed by the trace's
measured-queue columns (response_time_p50/p95/p99, requests_per_s,
inflight_requests) when it has them. Overload events go to stderr.
A config that sets nothing but signals.<name>.threshold is enough.

With --plant, no trace: the controller runs against the plant model
(internal/plant) of a harness scenario <backend>-<clients>-<load>: backend
cpu (C 1000/s), pool (8 workers x 25 ms, C 320/s), php (4 children,
C 180/s) or quota (the harness's cpu backend on one CPU of quota, C 190/s);
clients open-giveup, open-retry (SYN retransmits with the
kernel's timeouts, 10 s) or closed-pool (64 blocking clients, 2 s timeout);
load 3x (0.5 C, 3 C from 10 s to 40 s, 0.5 C) or coldstart (idle, then
1.5 C from 5 s). The port is the config's first (tcp/18080 under ports:
auto). One CSV row per tick:
  ` + plantCSVHeader + `
and the scenario's figures (goodput over the phase, the steady part's
std(p) over 1 s windows and goodput windows) on stderr.

Flags:
`

// simulation is the outcome of replaying a trace.
type simulation struct {
	trace *trace.Trace
	cfg   *rules.Config
	// ticks holds what the CSV and the plot need of each decision; a
	// Decision keeps its signals, ports and reason strings, about 600 bytes
	// a tick, which a trace of a million ticks turns into most of a
	// gigabyte.
	ticks []simTick
	// events are the overload events (start, continue, end), rendered.
	events []string
}

// simTick is one tick's outcome.
type simTick struct {
	pressure   float64
	pressureOK bool
	overloaded bool
	p          float64
	classes    [olc.NumClasses]float64
}

// simulate replays tr through a controller configured by cfg. Without port
// counts in a trace, the class columns assume every configured port (or,
// under ports: auto, every class) carries the same demand.
func simulate(cfg *rules.Config, tr *trace.Trace) (*simulation, error) {
	c, err := adaptive.New(cfg.ControllerConfig(nil))
	if err != nil {
		return nil, fmt.Errorf("build controller: %w", err)
	}
	sim := &simulation{trace: tr, cfg: cfg, ticks: make([]simTick, len(tr.Rows))}
	for i := range tr.Rows {
		d := c.Step(tr.Snapshot(i), nil)
		sim.ticks[i] = simTick{pressure: d.Pressure, pressureOK: d.PressureAvailable,
			overloaded: d.Overloaded, p: d.DropProbability, classes: d.Classes}
		for _, ev := range d.Events {
			if ev.Kind != adaptive.EventProbabilityChange {
				sim.events = append(sim.events, fmt.Sprintf("t=%s %s: %s", seconds(tr.Rows[i].T), ev.Kind, ev.Reason))
			}
		}
	}
	return sim, nil
}

// cmdSimulate implements `olcd-sim simulate`.
func cmdSimulate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("simulate", stderr)
	configPath := fs.String("config", "", "config `FILE` (thresholds and controller parameters; required)")
	tracePath := fs.String("trace", "", "trace `FILE.csv` to replay (required without --plant)")
	outPath := fs.String("out", "", "write the per-tick CSV to `FILE.csv` instead of stdout")
	plotPath := fs.String("plot", "", "draw signals, pressure and drop probabilities into `FILE.png`")
	plantName := fs.String("plant", "", "run the plant `SCENARIO` (e.g. pool-closed-pool-3x) instead of a trace")
	seed := fs.Uint64("seed", 1, "the plant's random `N`")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), simulateUsage)
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *plantName != "" && *plotPath != "" {
		// The plot draws a trace's signals and pressure, which a plant run
		// has not: its picture is two runs' CSVs side by side.
		fmt.Fprintln(stderr, "olcd-sim simulate: --plot only with --trace: with --plant, write the CSV with --out and draw it with tools/demoplot, as make docs-img does")
		return cli.ErrUsage
	}
	if *configPath == "" || (*tracePath == "") == (*plantName == "") || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "olcd-sim simulate: --config and one of --trace or --plant are required (--plot only with --trace), and nothing else")
		fs.Usage()
		return cli.ErrUsage
	}

	cfg, warnings, err := rules.Load(*configPath)
	if err != nil {
		var ve *rules.ValidationError
		if errors.As(err, &ve) {
			for _, line := range ve.ProblemLines() {
				fmt.Fprintln(stderr, line)
			}
			return cli.ErrProblems
		}
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	for _, n := range simulateNotes(cfg, *plantName != "") {
		fmt.Fprintf(stderr, "note: %s\n", n)
	}
	if *plantName != "" {
		out := stdout
		if *outPath != "" {
			f, err := os.Create(*outPath)
			if err != nil {
				return fmt.Errorf("create output: %w", err)
			}
			if err := simulatePlant(cfg, *plantName, *seed, f, stderr); err != nil {
				f.Close()
				os.Remove(f.Name())
				return err
			}
			return closeFile(f)
		}
		return simulatePlant(cfg, *plantName, *seed, out, stderr)
	}
	tr, err := trace.ReadFile(*tracePath)
	if err != nil {
		return err
	}
	for _, w := range tr.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if w := noThresholdWarning(cfg, tr); w != "" {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if step := medianStep(tr); step > 0 && math.Abs(step-cfg.Interval.Seconds()) > 1e-6 {
		fmt.Fprintf(stderr, "note: the trace ticks every %gs, the config's interval is %v; the trace's times are used\n", step, cfg.Interval)
	}
	// Create the outputs before the replay, so that a mistyped path fails
	// at once rather than after a long trace.
	out := stdout
	var outFile, plotFile *os.File
	defer func() {
		for _, f := range []*os.File{outFile, plotFile} {
			if f != nil {
				f.Close()
			}
		}
	}()
	if *outPath != "" {
		if outFile, err = os.Create(*outPath); err != nil {
			return fmt.Errorf("create output: %w", err)
		}
		out = outFile
	}
	if *plotPath != "" {
		if plotFile, err = os.Create(*plotPath); err != nil {
			if outFile != nil {
				// Leave nothing behind from a run that did not happen.
				outFile.Close()
				os.Remove(outFile.Name())
				outFile = nil
			}
			return fmt.Errorf("create output: %w", err)
		}
	}
	sim, err := simulate(cfg, tr)
	if err != nil {
		return err
	}

	if err := sim.writeCSV(out); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	if err := closeFile(outFile); err != nil {
		return err
	}
	outFile = nil
	sim.writeEvents(stderr)
	if plotFile != nil {
		if err := sim.writePlot(plotFile); err != nil {
			return fmt.Errorf("write %s: %w", *plotPath, err)
		}
		if err := closeFile(plotFile); err != nil {
			return err
		}
		plotFile = nil
	}
	return nil
}

// seconds formats a time of the simulation (seconds) rounded to the
// millisecond: times that are sums of float steps print as 26.65s, not
// 26.650000000000002s.
func seconds(t float64) string {
	return strconv.FormatFloat(math.Round(t*1e3)/1e3, 'f', -1, 64) + "s"
}

// closeFile closes f (nil is a no-op) and names it in the error: a write
// error can surface only at close.
func closeFile(f *os.File) error {
	if f == nil {
		return nil
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	return nil
}

// medianStep returns the median time between rows (seconds).
func medianStep(tr *trace.Trace) float64 {
	if len(tr.Rows) < 2 {
		return 0
	}
	steps := make([]float64, len(tr.Rows)-1)
	for i := 1; i < len(tr.Rows); i++ {
		steps[i-1] = math.Round((tr.Rows[i].T-tr.Rows[i-1].T)*1e6) / 1e6
	}
	counts := map[float64]int{}
	best, bestN := 0.0, 0
	for _, s := range steps {
		counts[s]++
		if counts[s] > bestN {
			best, bestN = s, counts[s]
		}
	}
	return best
}

// csvHeader is the first line of the per-tick CSV.
const csvHeader = "t_s,pressure,drop_probability,p_critical,p_normal,p_best_effort,overloaded"

// num formats a value for the CSV.
func num(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }

// writeCSV writes one row per tick.
func (s *simulation) writeCSV(w io.Writer) error {
	bw := bufio.NewWriter(w)
	// The measured queue (the response times, requests, in flight) the
	// trace carries is repeated beside the decisions it drove.
	var queue []olc.Signal
	for _, c := range s.trace.Columns {
		if slices.Contains(trace.MeasuredQueue, c) {
			queue = append(queue, c)
		}
	}
	header := csvHeader
	for _, c := range queue {
		header += "," + c.String()
	}
	fmt.Fprintln(bw, header)
	for i, d := range s.ticks {
		pressure := ""
		if d.pressureOK {
			pressure = num(d.pressure)
		}
		over := 0
		if d.overloaded {
			over = 1
		}
		fmt.Fprintf(bw, "%s,%s,%s,%s,%s,%s,%d", num(s.trace.Rows[i].T), pressure, num(d.p),
			num(d.classes[olc.ClassCritical]), num(d.classes[olc.ClassNormal]), num(d.classes[olc.ClassBestEffort]), over)
		if len(queue) > 0 {
			snap := s.trace.Snapshot(i)
			for _, c := range queue {
				cell := ""
				if v, ok := snap.Get(c); ok {
					cell = num(v)
				}
				fmt.Fprint(bw, ","+cell)
			}
		}
		fmt.Fprintln(bw)
	}
	return bw.Flush()
}

// writeEvents prints the overload events and a summary line.
func (s *simulation) writeEvents(w io.Writer) {
	for _, line := range s.events {
		fmt.Fprintln(w, line)
	}
	var maxP float64
	first, zeroFrom := -1.0, -1.0
	for i, d := range s.ticks {
		t := s.trace.Rows[i].T
		maxP = math.Max(maxP, d.p)
		if d.p > 0 {
			if first < 0 {
				first = t
			}
			zeroFrom = -1
		} else if zeroFrom < 0 {
			zeroFrom = t
		}
	}
	fmt.Fprintf(w, "%d ticks; max drop probability %.3f", len(s.ticks), maxP)
	if first >= 0 {
		fmt.Fprintf(w, "; first shed at t=%s", seconds(first))
		if zeroFrom >= 0 {
			fmt.Fprintf(w, "; 0 again from t=%s", seconds(zeroFrom))
		}
	}
	fmt.Fprintln(w)
}

// segments splits a series into the runs of points where ok holds, so that
// gaps (unavailable or invalid samples) show as gaps.
func segments(ts, ys []float64, ok []bool) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i := range ts {
		if !ok[i] {
			if len(cur) > 0 {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: ts[i], Y: ys[i]})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// plotBuckets is how many points per series a plot draws at most, as
// pairs (the lowest and the highest value of a bucket of ticks): about two
// per pixel of the data area. gonum/plot rasterises every point, so a long
// trace would take as long to plot as it has ticks (docs/tuning.md).
const plotBuckets = 1000

// decimate reduces a series longer than 2 × buckets to the lowest and the
// highest usable point of each of buckets runs of ticks, in time order, so
// that spikes and dips stay visible; a run without a usable point becomes a
// gap. Shorter series are returned as they are.
func decimate(ts, ys []float64, ok []bool, buckets int) ([]float64, []float64, []bool) {
	n := len(ts)
	if n <= 2*buckets {
		return ts, ys, ok
	}
	ots, oys, ook := make([]float64, 0, 2*buckets), make([]float64, 0, 2*buckets), make([]bool, 0, 2*buckets)
	for b := range buckets {
		lo, hi := b*n/buckets, (b+1)*n/buckets
		lowest, highest := -1, -1
		for i := lo; i < hi; i++ {
			if !ok[i] {
				continue
			}
			if lowest < 0 || ys[i] < ys[lowest] {
				lowest = i
			}
			if highest < 0 || ys[i] > ys[highest] {
				highest = i
			}
		}
		if lowest < 0 {
			ots, oys, ook = append(ots, ts[lo]), append(oys, 0), append(ook, false)
			continue
		}
		for _, i := range []int{min(lowest, highest), max(lowest, highest)} {
			if len(ots) > 0 && ook[len(ook)-1] && ots[len(ots)-1] == ts[i] {
				continue // lowest and highest are the same tick
			}
			ots, oys, ook = append(ots, ts[i]), append(oys, ys[i]), append(ook, true)
		}
	}
	return ots, oys, ook
}

// plotChunk is the most points one stroked line holds. The rasteriser
// behind gonum/plot's PNG canvas (golang/freetype) searches its cells
// linearly, so one long noisy line costs time quadratic in its length;
// strokes of 64 points keep it linear.
const plotChunk = 64

// addSeries adds a series as line segments with one legend entry, decimated
// to plotBuckets pairs of points.
func addSeries(p *plot.Plot, name string, ts, ys []float64, ok []bool, style draw.LineStyle) error {
	ts, ys, ok = decimate(ts, ys, ok, plotBuckets)
	legend := false
	for _, seg := range segments(ts, ys, ok) {
		if len(seg) == 1 {
			// A lone point between gaps: draw it as a dot.
			sc, err := plotter.NewScatter(seg)
			if err != nil {
				return err
			}
			sc.GlyphStyle.Color, sc.GlyphStyle.Radius = style.Color, vg.Points(1.5)
			p.Add(sc)
			continue
		}
		// Consecutive chunks share their end point, so the line is unbroken.
		for start := 0; start < len(seg)-1; start += plotChunk - 1 {
			l, err := plotter.NewLine(seg[start:min(start+plotChunk, len(seg))])
			if err != nil {
				return err
			}
			l.LineStyle = style
			p.Add(l)
			if !legend {
				p.Legend.Add(name, l)
				legend = true
			}
		}
	}
	return nil
}

// hline adds a horizontal reference line across the trace.
func hline(p *plot.Plot, name string, y, t0, t1 float64, style draw.LineStyle) error {
	l, err := plotter.NewLine(plotter.XYs{{X: t0, Y: y}, {X: t1, Y: y}})
	if err != nil {
		return err
	}
	l.LineStyle = style
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

// newPanel returns a plot with the house style.
func newPanel(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.X.Label.Text = "t (s)"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.Padding = vg.Points(2)
	p.Add(plotter.NewGrid())
	return p
}

func lineStyle(c color.Color, width float64, dashed bool) draw.LineStyle {
	s := draw.LineStyle{Color: c, Width: vg.Points(width)}
	if dashed {
		s.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	return s
}

// writePlot draws the signals (fractions in one panel, other units in a
// second one when the trace has any), the node pressure and the drop
// probabilities over time as a PNG.
func (s *simulation) writePlot(w io.Writer) error {
	rows := s.trace.Rows
	ts := make([]float64, len(rows))
	for i, r := range rows {
		ts[i] = r.T
	}
	t0, t1 := ts[0], ts[len(ts)-1]

	fractions := newPanel("Signals (fractions) and their thresholds", "value")
	others := newPanel("Signals (other units) and their thresholds", "value")
	var nOthers int
	for j, sig := range s.trace.Columns {
		ys, ok := make([]float64, len(rows)), make([]bool, len(rows))
		for i, r := range rows {
			ys[i], ok[i] = r.Values[j], r.Present[j] && sig.Usable(r.Values[j])
		}
		p := fractions
		if !sig.IsFraction() {
			p = others
			nOthers++
		}
		c := plotutil.Color(j)
		usableAny := false
		for _, o := range ok {
			usableAny = usableAny || o
		}
		if err := addSeries(p, sig.String(), ts, ys, ok, lineStyle(c, 1.2, false)); err != nil {
			return err
		}
		if th := s.cfg.Thresholds[sig]; th > 0 {
			name := ""
			if !usableAny {
				// Keep the signal in the legend: its absence is the point.
				name = sig.String() + " (no usable sample)"
			}
			if err := hline(p, name, th, t0, t1, lineStyle(c, 0.8, true)); err != nil {
				return err
			}
		}
	}
	fractions.Y.Min, fractions.Y.Max = 0, 1.05

	pressure := newPanel("Node pressure (1 = at the target)", "pressure")
	raw, ok := make([]float64, len(rows)), make([]bool, len(rows))
	top := 1.3
	for i, d := range s.ticks {
		raw[i], ok[i] = d.pressure, d.pressureOK
		if ok[i] {
			top = math.Max(top, 1.1*d.pressure)
		}
	}
	grey := color.RGBA{R: 150, G: 150, B: 150, A: 255}
	if err := addSeries(pressure, "pressure", ts, raw, ok, lineStyle(color.Black, 1.5, false)); err != nil {
		return err
	}
	red := color.RGBA{R: 200, A: 255}
	if err := hline(pressure, "target", 1, t0, t1, lineStyle(red, 1, true)); err != nil {
		return err
	}
	if h := s.cfg.Controller.Hysteresis; h > 0 {
		if err := hline(pressure, "release below", 1-h, t0, t1, lineStyle(grey, 0.8, true)); err != nil {
			return err
		}
	}
	pressure.Y.Min, pressure.Y.Max = 0, top

	prob := newPanel("Drop probability", "p")
	all := make([]bool, len(rows))
	for i := range all {
		all[i] = true
	}
	classes := []olc.Class{olc.ClassBestEffort, olc.ClassNormal, olc.ClassCritical}
	classColors := []color.Color{color.RGBA{R: 230, G: 140, A: 255}, color.RGBA{B: 200, A: 255}, color.RGBA{G: 150, A: 255}}
	for k, cl := range classes {
		ys := make([]float64, len(rows))
		for i, d := range s.ticks {
			ys[i] = d.classes[cl]
		}
		if err := addSeries(prob, "p "+cl.String(), ts, ys, all, lineStyle(classColors[k], 1, false)); err != nil {
			return err
		}
	}
	node := make([]float64, len(rows))
	for i, d := range s.ticks {
		node[i] = d.p
	}
	if err := addSeries(prob, "p node", ts, node, all, lineStyle(color.Black, 2, false)); err != nil {
		return err
	}
	if err := hline(prob, "bound 1 − min_pass_rate", s.cfg.Controller.Bound(), t0, t1, lineStyle(red, 1, true)); err != nil {
		return err
	}
	prob.Y.Min, prob.Y.Max = 0, 1.05

	panels := [][]*plot.Plot{{fractions}}
	if nOthers > 0 {
		panels = append(panels, []*plot.Plot{others})
	}
	panels = append(panels, []*plot.Plot{pressure}, []*plot.Plot{prob})
	for _, row := range panels {
		row[0].X.Min, row[0].X.Max = t0, t1
		row[0].X.Tick.Marker = timeTicks{}
	}
	const width, panelHeight, legendMargin = 12 * vg.Inch, 2.6 * vg.Inch, 2.6 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, panelHeight*vg.Length(len(panels))), vgimg.UseDPI(100),
		vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	// The legends go into a margin right of the data, where they never
	// hide a line.
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4),
		PadLeft: vg.Points(4), PadRight: legendMargin}
	canvases := plot.Align(panels, tiles, dc)
	for j := range panels {
		p := panels[j][0]
		data := p.DataCanvas(canvases[j][0])
		p.Legend.XOffs = data.Max.X - data.Min.X + vg.Points(10)
		p.Draw(canvases[j][0])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// timeTicks puts about ten labelled ticks on the time axis, at 1, 2 or 5 ×
// a power of ten seconds.
type timeTicks struct{}

// Ticks implements plot.Ticker.
func (timeTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return nil
	}
	raw := (hi - lo) / 10
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+1e-9; v += step / 2 {
		label := ""
		if math.Abs(math.Remainder(v, step)) < 1e-9 {
			label = strconv.FormatFloat(v, 'g', -1, 64)
		}
		out = append(out, plot.Tick{Value: v, Label: label})
	}
	return out
}

// simulateNotes says where a simulation departs from what the daemon would
// do with cfg: the controller's drop probabilities are applied (the plant)
// or reported (a trace) whatever the mode, and a plant run protects a port
// even under a config that protects none.
func simulateNotes(cfg *rules.Config, plant bool) []string {
	var out []string
	enforced := cfg.Mode == olc.ModeEnforce
	for _, p := range cfg.Ports {
		enforced = enforced || (cfg.Mode != olc.ModeOff && p.EffectiveMode(cfg.Mode) == olc.ModeEnforce)
	}
	switch {
	case cfg.Mode == olc.ModeOff:
		out = append(out, "mode: off: the daemon would shed nothing; the simulation applies the controller's drop probabilities as enforce would")
	case !enforced:
		out = append(out, "mode: observe: the daemon would only count what it sheds (would_drop); the simulation applies the drop probabilities as enforce would")
	}
	if plant && !cfg.PortsAuto && len(cfg.Ports) == 0 {
		out = append(out, "ports: [] protects nothing; the plant runs on tcp/18080, as under ports: auto")
	}
	return out
}

// noThresholdWarning returns a warning when no signal column of tr has a
// threshold in cfg: the replayed controller then has nothing to act on
// and every tick reads drop probability 0, which looks like a config that
// never sheds rather than a trace the config does not read. "" when one
// column has a threshold.
func noThresholdWarning(cfg *rules.Config, tr *trace.Trace) string {
	var with, without []string
	for s, t := range cfg.Thresholds {
		if t > 0 {
			with = append(with, olc.Signal(s).String())
		}
	}
	for _, c := range tr.Columns {
		if cfg.Thresholds[c] > 0 {
			return ""
		}
		without = append(without, c.String())
	}
	return fmt.Sprintf("no column of %s has a threshold in the config: its columns are %s, the config's thresholds are on %s; the controller has nothing to act on and every drop probability is 0 (add a threshold under signals:, or record the signals the config uses)",
		tr.Name, listOrNone(without), listOrNone(with))
}

// listOrNone joins names with ", ", or says "none".
func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
