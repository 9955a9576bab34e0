// Command demoplot draws the README's picture of a service at 3 × its
// capacity with and without olcd (docs/img/demo.png, `make docs-img`) from
// two `olcd-sim simulate --plant` CSVs: the same plant model and load, once
// with a config that never sheds and once with the default law enforcing.
// It is a model (internal/plant), not a measurement: `make demo` measures
// the real thing on this machine.
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// sloSeconds is the harness's SLO (tests/e2e/overload): an answer later
// than 200 ms counts as lost, since a user has given up or retried.
const sloSeconds = 0.2

// tick is the simulation's interval: the CSV's counts are per tick.
const tickSeconds = 0.5

type row struct{ t, newPerS, admittedPerS, p95, p float64 }

func read(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, c := range []string{"t_s", "new", "dropped", "response_time_p95_s", "drop_probability"} {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("%s: no column %s (want olcd-sim simulate --plant output)", path, c)
		}
	}
	var rows []row
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		num := func(c string) float64 {
			v, _ := strconv.ParseFloat(rec[col[c]], 64)
			return v
		}
		rows = append(rows, row{
			t:            num("t_s"),
			newPerS:      num("new") / tickSeconds,
			admittedPerS: (num("new") - num("dropped")) / tickSeconds,
			p95:          num("response_time_p95_s"),
			p:            num("drop_probability"),
		})
	}
}

func line(p *plot.Plot, name string, rows []row, f func(row) float64, c color.Color, dashed bool) error {
	xy := make(plotter.XYs, 0, len(rows))
	for _, r := range rows {
		xy = append(xy, plotter.XY{X: r.t, Y: f(r)})
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return err
	}
	l.LineStyle = draw.LineStyle{Color: c, Width: vg.Points(1.8)}
	if dashed {
		l.LineStyle.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func run() error {
	none := flag.String("none", "", "olcd-sim simulate --plant CSV of a config that never sheds")
	olcd := flag.String("olcd", "", "olcd-sim simulate --plant CSV of the config enforcing")
	title := flag.String("title", "", "the picture's title")
	out := flag.String("out", "docs/img/demo.png", "PNG to write")
	flag.Parse()
	a, err := read(*none)
	if err != nil {
		return err
	}
	b, err := read(*olcd)
	if err != nil {
		return err
	}
	red, green, blue, orange, grey := color.RGBA{214, 39, 40, 255}, color.RGBA{44, 160, 44, 255},
		color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{110, 110, 110, 255}

	lat := plot.New()
	lat.Title.Text = *title
	lat.Y.Label.Text = "p95 response time (ms)"
	lat.Add(plotter.NewGrid())
	ms := func(r row) float64 { return r.p95 * 1000 }
	slo := func(row) float64 { return sloSeconds * 1000 }
	for _, e := range []error{
		line(lat, "without olcd", a, ms, red, false),
		line(lat, "with olcd (enforce, defaults)", b, ms, green, false),
		line(lat, "SLO 200 ms", a, slo, grey, true),
	} {
		if e != nil {
			return e
		}
	}
	lat.Y.Min = 0

	rates := plot.New()
	rates.Y.Label.Text = "new connections / s"
	rates.X.Label.Text = "s (plant model: 0.5 C, then 3 C from 10 s to 40 s, then 0.5 C)"
	rates.Add(plotter.NewGrid())
	for _, e := range []error{
		line(rates, "offered", a, func(r row) float64 { return r.newPerS }, blue, true),
		line(rates, "admitted by olcd", b, func(r row) float64 { return r.admittedPerS }, orange, false),
	} {
		if e != nil {
			return e
		}
	}
	rates.Y.Min = 0
	for _, p := range []*plot.Plot{lat, rates} {
		p.Legend.Top = true
		p.X.Min = 0
	}
	const width, height = 9 * vg.Inch, 2.6 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, 2*height), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	cs := plot.Align([][]*plot.Plot{{lat}, {rates}}, tiles, draw.New(img))
	lat.Draw(cs[0][0])
	rates.Draw(cs[1][0])
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "demoplot: %v\n", err)
		os.Exit(1)
	}
}
