package overload

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writePlot draws a run's time series as a PNG: requests per second
// (offered, admitted = connections established, goodput) on top, olcd's drop
// probability and the backend's CPU (share of quota) below, with the phase
// boundaries and, if any, the kill marked.
func writePlot(path string, r *RunResult) error {
	rates := plot.New()
	rates.Title.Text = fmt.Sprintf("%s / %s", r.Scenario, r.Variant)
	rates.Y.Label.Text = "requests / s"
	rates.X.Label.Text = "s since the load started"
	rates.Add(plotter.NewGrid())
	fracs := plot.New()
	fracs.Y.Label.Text = "fraction"
	fracs.X.Label.Text = "s since the load started"
	fracs.Add(plotter.NewGrid())
	fracs.Y.Min, fracs.Y.Max = 0, 1.1

	get := func(f func(SecondPoint) float64) plotter.XYs {
		var xy plotter.XYs
		for _, p := range r.Series {
			if v := f(p); !math.IsNaN(v) {
				xy = append(xy, plotter.XY{X: p.T + 0.5, Y: v})
			}
		}
		return xy
	}
	add := func(p *plot.Plot, name string, xy plotter.XYs, c color.Color, dashed bool) error {
		if len(xy) == 0 {
			return nil
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.LineStyle = draw.LineStyle{Color: c, Width: vg.Points(1.5)}
		if dashed {
			l.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	blue, orange, green := color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255}
	red, purple := color.RGBA{214, 39, 40, 255}, color.RGBA{148, 103, 189, 255}
	for _, e := range []error{
		add(rates, "offered", get(func(p SecondPoint) float64 { return p.Offered }), blue, true),
		add(rates, "admitted (connected)", get(func(p SecondPoint) float64 { return p.Admitted }), orange, false),
		add(rates, "goodput (200 within SLO)", get(func(p SecondPoint) float64 { return p.Goodput }), green, false),
		add(fracs, "olcd drop probability (first attempts)", get(func(p SecondPoint) float64 { return p.P }), red, false),
		add(fracs, "backend CPU / quota", get(func(p SecondPoint) float64 { return p.CPU }), purple, false),
	} {
		if e != nil {
			return e
		}
	}
	var at float64
	grey := color.RGBA{120, 120, 120, 255}
	for i, ph := range r.Phases {
		if i > 0 {
			for _, p := range []*plot.Plot{rates, fracs} {
				if err := vline(p, at, grey); err != nil {
					return err
				}
			}
		}
		at += ph.DurationS
	}
	if r.KilledAt > 0 {
		for _, p := range []*plot.Plot{rates, fracs} {
			if err := vline(p, r.KilledAt.Seconds(), red); err != nil {
				return err
			}
		}
		fracs.Title.Text = fmt.Sprintf("olcd killed (SIGKILL) at %.1f s", r.KilledAt.Seconds())
	}
	rates.Y.Min = 0
	for _, p := range []*plot.Plot{rates, fracs} {
		p.Legend.Top = true
		p.X.Min = 0
		p.X.Max = float64(len(r.Series))
	}
	const width, height = 10 * vg.Inch, 3 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, 2*height), vgimg.UseDPI(100), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	panels := [][]*plot.Plot{{rates}, {fracs}}
	canvases := plot.Align(panels, tiles, dc)
	rates.Draw(canvases[0][0])
	fracs.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// vline draws a thin vertical line at x across p's y range.
func vline(p *plot.Plot, x float64, c color.Color) error {
	l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: 1e-9}})
	if err != nil {
		return err
	}
	l.LineStyle = draw.LineStyle{Color: c, Width: vg.Points(0.8), Dashes: []vg.Length{vg.Points(2), vg.Points(2)}}
	p.Add(&vertical{Line: l})
	return nil
}

// vertical stretches a line over the whole height of the data area.
type vertical struct{ *plotter.Line }

// Plot implements plot.Plotter.
func (v *vertical) Plot(c draw.Canvas, plt *plot.Plot) {
	x := plt.X.Norm(v.XYs[0].X)
	px := c.Min.X + vg.Length(x)*(c.Max.X-c.Min.X)
	c.StrokeLine2(v.LineStyle, px, c.Min.Y, px, c.Max.Y)
}

// DataRange implements plot.DataRanger: it claims no y range.
func (v *vertical) DataRange() (xmin, xmax, ymin, ymax float64) {
	x := v.XYs[0].X
	return x, x, math.Inf(1), math.Inf(-1)
}
