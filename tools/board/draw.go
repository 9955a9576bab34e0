package board

import (
	"context"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Style sizes the picture in pixels.
type Style struct {
	// Width is the board's width; RowHeight one grid row's height and Gap
	// the space between panels (Grafana: 30 and 8); Header the strip
	// above the grid with the title and the range.
	Width, RowHeight, Gap, Header int
	// DPI is the pixels per inch, which sizes the text (96: a screen).
	DPI int
}

// headroom is the share of a panel's value range left free above its
// highest value.
const headroom = 0.08

// DefaultStyle is a board 1600 pixels wide in Grafana's grid.
var DefaultStyle = Style{Width: 1600, RowHeight: 30, Gap: 8, Header: 48, DPI: 96}

// Grafana's light theme and its classic series palette.
var (
	pageColor   = color.RGBA{244, 245, 245, 255}
	panelColor  = color.White
	borderColor = color.RGBA{220, 222, 224, 255}
	textColor   = color.RGBA{36, 41, 46, 255}
	mutedColor  = color.RGBA{110, 117, 124, 255}
	gridColor   = color.RGBA{230, 232, 234, 255}
	palette     = []color.RGBA{
		{126, 178, 109, 255}, {234, 184, 57, 255}, {110, 208, 224, 255}, {239, 132, 60, 255},
		{226, 77, 66, 255}, {31, 120, 193, 255}, {186, 67, 169, 255}, {112, 93, 160, 255},
		{80, 134, 66, 255}, {204, 163, 0, 255}, {68, 126, 188, 255}, {193, 92, 23, 255},
	}
	// named are Grafana's named colors (value mappings, thresholds,
	// annotations).
	named = map[string]color.RGBA{
		"green": {115, 191, 105, 255}, "red": {242, 73, 92, 255}, "yellow": {250, 222, 42, 255},
		"blue": {87, 148, 242, 255}, "orange": {255, 152, 48, 255}, "purple": {184, 119, 217, 255},
	}
)

// units are the fieldConfig units the renderer formats (Load refuses
// others rather than draw a value in the wrong unit).
var units = map[string]func(float64) string{
	"":            si,
	"short":       si,
	"none":        si,
	"percentunit": func(v float64) string { return num(100*v) + "%" },
	"s":           seconds,
	"cps":         func(v float64) string { return si(v) + " c/s" },
	"reqps":       func(v float64) string { return si(v) + " req/s" },
}

// num writes v with three significant digits at most, trailing zeros cut.
func num(v float64) string {
	if v == 0 || math.IsNaN(v) {
		return "0"
	}
	d := max(0, min(3, 2-int(math.Floor(math.Log10(math.Abs(v))))))
	s := strconv.FormatFloat(v, 'f', d, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// si writes v with a k or M suffix from a thousand on.
func si(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return num(v/1e6) + "M"
	case a >= 1e3:
		return num(v/1e3) + "k"
	}
	return num(v)
}

// seconds writes a duration in s, ms or µs.
func seconds(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0 s"
	case a < 1e-3:
		return num(v*1e6) + " µs"
	case a < 1:
		return num(v*1e3) + " ms"
	}
	return num(v) + " s"
}

// Draw draws the board with data in style s.
func Draw(d *Dashboard, data *Data, s Style) *vgimg.Canvas {
	rows := 0
	for _, p := range d.Panels {
		rows = max(rows, p.Grid.Y+p.Grid.H)
	}
	px := func(n float64) vg.Length { return vg.Length(n) * vg.Inch / vg.Length(s.DPI) }
	pitch := float64(s.RowHeight + s.Gap)
	width, height := px(float64(s.Width)), px(float64(s.Header)+float64(rows)*pitch)
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(s.DPI), vgimg.UseBackgroundColor(pageColor))
	r := &renderer{s: s, px: px, img: img, data: data, d: d}
	r.header(height)
	col := (float64(s.Width) - float64(s.Gap)) / GridColumns
	for i, p := range d.Panels {
		left := float64(s.Gap)/2 + float64(p.Grid.X)*col + float64(s.Gap)/2
		top := float64(s.Header) + float64(p.Grid.Y)*pitch
		w := float64(p.Grid.W)*col - float64(s.Gap)
		h := float64(p.Grid.H)*pitch - float64(s.Gap)
		rect := vg.Rectangle{Min: vg.Point{X: px(left), Y: height - px(top+h)}, Max: vg.Point{X: px(left + w), Y: height - px(top)}}
		c := draw.Canvas{Canvas: img, Rectangle: rect}
		switch p.Type {
		case "row":
			r.row(c, p)
		default:
			r.panel(c, p, data.Panels[i])
		}
	}
	return img
}

// WritePNG writes the picture to path.
func WritePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

type renderer struct {
	s    Style
	px   func(float64) vg.Length
	img  *vgimg.Canvas
	data *Data
	d    *Dashboard
}

// font returns Liberation Sans (Grafana's Inter is not in Debian) at size
// points, bold if asked.
func (r *renderer) font(size float64, bold bool) text.Style {
	f := font.Font{Typeface: "Liberation", Variant: "Sans", Size: font.Length(size)}
	if bold {
		f.Weight = xfont.WeightBold
	}
	return text.Style{Color: textColor, Font: f, Handler: plot.DefaultTextHandler}
}

func (r *renderer) header(height vg.Length) {
	c := draw.New(r.img)
	pad := r.px(float64(r.s.Gap))
	title := r.font(14, true)
	title.YAlign = draw.YTop
	c.FillText(title, vg.Point{X: pad, Y: height - pad}, r.d.Title)
	rg := r.data.Range
	var vars []string
	for k, v := range rg.Vars {
		vars = append(vars, fmt.Sprintf("$%s = %s", k, v))
	}
	sort.Strings(vars)
	note := fmt.Sprintf("%s to %s UTC · %s · step %s, $__rate_interval %s · drawn from Prometheus by tools/boardplot (%s), not by Grafana",
		rg.From.UTC().Format("2006-01-02 15:04:05"), rg.To.UTC().Format("15:04:05"), strings.Join(vars, ", "),
		r.data.Step, rg.Variables()["__rate_interval"], r.d.Path)
	sub := r.font(9, false)
	sub.Color = mutedColor
	sub.YAlign = draw.YTop
	c.FillText(sub, vg.Point{X: pad, Y: height - pad - title.Height(r.d.Title) - r.px(4)}, note)
}

func (r *renderer) row(c draw.Canvas, p Panel) {
	st := r.font(11, true)
	st.YAlign = draw.YCenter
	c.FillText(st, vg.Point{X: c.Min.X, Y: (c.Min.Y + c.Max.Y) / 2}, p.Title)
	c.StrokeLine2(draw.LineStyle{Color: borderColor, Width: r.px(1)}, c.Min.X, c.Min.Y, c.Max.X, c.Min.Y)
}

// box fills a rectangle.
func box(c draw.Canvas, clr color.Color, x0, y0, x1, y1 vg.Length) {
	c.FillPolygon(clr, []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
}

func (r *renderer) panel(c draw.Canvas, p Panel, series []Series) {
	box(c, panelColor, c.Min.X, c.Min.Y, c.Max.X, c.Max.Y)
	c.StrokeLines(draw.LineStyle{Color: borderColor, Width: r.px(1)}, []vg.Point{
		{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Min.Y}})
	pad := r.px(8)
	title := r.font(10, true)
	title.YAlign = draw.YTop
	c.FillText(title, vg.Point{X: c.Min.X + pad, Y: c.Max.Y - pad}, p.Title)
	body := c
	body.Max.Y -= pad + title.Height(p.Title) + r.px(2)
	body.Min.X += r.px(2)
	body.Max.X -= pad
	body.Min.Y += r.px(4)
	if len(series) == 0 {
		st := r.font(12, false)
		st.Color = mutedColor
		st.XAlign, st.YAlign = draw.XCenter, draw.YCenter
		body.FillText(st, body.Center(), "No data")
		return
	}
	if p.Type == "state-timeline" {
		r.timeline(body, p, series)
		return
	}
	body = r.legend(body, p, series)
	pl := r.newPlot()
	pl.Y.Tick.Marker = unitTicks{format: units[p.Unit]}
	var regions [][2]float64
	for _, rs := range r.data.Regions {
		regions = append(regions, rs...)
	}
	if len(regions) > 0 {
		pl.Add(shading{regions: regions, color: withAlpha(named["red"], 40)})
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for k, s := range series {
		clr := palette[k%len(palette)]
		for _, seg := range segments(s, r.data.Step) {
			l, err := plotter.NewLine(seg)
			if err != nil {
				continue // a segment of NaNs, which query left out
			}
			l.LineStyle = draw.LineStyle{Color: clr, Width: r.px(1.5)}
			if p.FillOpacity > 0 {
				l.FillColor = withAlpha(clr, uint8(p.FillOpacity*255/100))
			}
			pl.Add(l)
		}
		for _, v := range s.V {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	for _, th := range p.Thresholds {
		f := plotter.NewFunction(func(float64) float64 { return th })
		f.LineStyle = draw.LineStyle{Color: named["red"], Width: r.px(1), Dashes: []vg.Length{r.px(4), r.px(3)}}
		pl.Add(f)
		hi = math.Max(hi, th)
	}
	pl.Y.Min, pl.Y.Max = lo, hi
	if lo >= 0 {
		pl.Y.Min = 0
	}
	// Headroom above the highest value, as Grafana's soft max leaves: a
	// line at the maximum is not drawn on the frame.
	pl.Y.Max += (pl.Y.Max - pl.Y.Min) * headroom
	if p.Min != nil {
		pl.Y.Min = *p.Min
	}
	if p.Max != nil {
		pl.Y.Max = *p.Max
	}
	if pl.Y.Max <= pl.Y.Min {
		pl.Y.Max = pl.Y.Min + 1
	}
	pl.Draw(body)
}

// newPlot is a plot over the range with Grafana's axes: clock time below,
// light grid lines.
func (r *renderer) newPlot() *plot.Plot {
	pl := plot.New()
	pl.BackgroundColor = color.Transparent
	pl.X.Min, pl.X.Max = float64(r.data.Range.From.Unix()), float64(r.data.Range.To.Unix())
	pl.X.Tick.Marker = plot.TimeTicks{Format: "15:04:05", Time: plot.UnixTimeIn(time.UTC)}
	for _, a := range []*plot.Axis{&pl.X, &pl.Y} {
		a.Tick.Label = r.font(8, false)
		a.Tick.Label.Color = mutedColor
		a.LineStyle.Color = borderColor
		a.Tick.LineStyle.Color = borderColor
		a.Padding = 0
	}
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = gridColor, gridColor
	pl.Add(g)
	return pl
}

// legend draws Grafana's table legend (name, then the panel's calcs)
// below the plot and returns what is left above it.
func (r *renderer) legend(body draw.Canvas, p Panel, series []Series) draw.Canvas {
	st := r.font(8, false)
	lineH := st.Height("Xg") + r.px(3)
	rows := len(series)
	fit := int(float64((body.Max.Y-body.Min.Y)*0.45/lineH)) - 1
	more := 0
	if rows > fit {
		rows, more = max(fit-1, 0), rows-max(fit-1, 0)
	}
	n := rows + 1
	if more > 0 {
		n++
	}
	top := body.Min.Y + vg.Length(n)*lineH
	colW := r.px(64)
	head := st
	head.Color = mutedColor
	head.XAlign = draw.XRight
	for j, calc := range p.LegendCalcs {
		x := body.Max.X - vg.Length(len(p.LegendCalcs)-1-j)*colW
		body.FillText(head, vg.Point{X: x, Y: top - lineH}, calcName[calc])
	}
	format := units[p.Unit]
	nameRoom := body.Max.X - body.Min.X - vg.Length(len(p.LegendCalcs))*colW - r.px(24)
	for i := range rows {
		s := series[i]
		y := top - vg.Length(i+2)*lineH
		clr := palette[i%len(palette)]
		body.StrokeLine2(draw.LineStyle{Color: clr, Width: r.px(3)}, body.Min.X+r.px(4), y+lineH/3, body.Min.X+r.px(16), y+lineH/3)
		body.FillText(st, vg.Point{X: body.Min.X + r.px(20), Y: y}, fitText(st, s.Name, nameRoom))
		for j, calc := range p.LegendCalcs {
			v := st
			v.XAlign = draw.XRight
			x := body.Max.X - vg.Length(len(p.LegendCalcs)-1-j)*colW
			body.FillText(v, vg.Point{X: x, Y: y}, format(reduce(calc, s.V)))
		}
	}
	if more > 0 {
		m := st
		m.Color = mutedColor
		body.FillText(m, vg.Point{X: body.Min.X + r.px(20), Y: top - vg.Length(rows+2)*lineH}, fmt.Sprintf("… and %d more series", more))
	}
	body.Min.Y = top + r.px(4)
	return body
}

// calcName are the legend's column heads, as Grafana writes them.
var calcName = map[string]string{"lastNotNull": "Last *", "last": "Last", "max": "Max", "min": "Min", "mean": "Mean"}

// reduce is a legend calc over a series' values.
func reduce(calc string, v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	out := v[0]
	switch calc {
	case "lastNotNull", "last":
		return v[len(v)-1]
	case "max":
		for _, x := range v {
			out = math.Max(out, x)
		}
	case "min":
		for _, x := range v {
			out = math.Min(out, x)
		}
	case "mean":
		out = 0
		for _, x := range v {
			out += x
		}
		out /= float64(len(v))
	}
	return out
}

// fitText cuts s with an ellipsis to fit width.
func fitText(st text.Style, s string, width vg.Length) string {
	if st.Width(s) <= width {
		return s
	}
	rs := []rune(s)
	for len(rs) > 1 && st.Width(string(rs)+"…") > width {
		rs = rs[:len(rs)-1]
	}
	return string(rs) + "…"
}

// segments splits a series where a scrape is missing (a gap of more than
// one and a half steps), as Grafana leaves such gaps open.
func segments(s Series, step time.Duration) []plotter.XYs {
	gap := step.Seconds() * 1.5
	var out []plotter.XYs
	for i, t := range s.T {
		if i == 0 || t-s.T[i-1] > gap {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], plotter.XY{X: t, Y: s.V[i]})
	}
	return out
}

// timeline draws a state-timeline: one lane per series, its name on the
// left, each run of equal values a box in its mapping's color with its
// text (a target's own mappings, from an override, before the panel's).
func (r *renderer) timeline(body draw.Canvas, p Panel, series []Series) {
	st := r.font(8, false)
	st.XAlign, st.YAlign = draw.XRight, draw.YCenter
	var w vg.Length
	for _, s := range series {
		w = max(w, st.Width(s.Name))
	}
	w = min(w, (body.Max.X-body.Min.X)/4) + r.px(8)
	area := body
	area.Min.X += w
	pl := r.newPlot()
	pl.HideY()
	pl.Y.Min, pl.Y.Max = -0.5, float64(len(series))-0.5
	l := lanes{series: series, mappings: p.Mappings, byRef: p.RefMappings, step: r.data.Step.Seconds(), text: r.font(8, false)}
	pl.Add(l)
	pl.Draw(area)
	dc := pl.DataCanvas(area)
	_, ty := pl.Transforms(&dc)
	for i, s := range series {
		body.FillText(st, vg.Point{X: dc.Min.X - r.px(6), Y: ty(float64(len(series) - 1 - i))}, fitText(st, s.Name, dc.Min.X-body.Min.X-r.px(6)))
	}
}

// lanes is the state-timeline's plotter.
type lanes struct {
	series   []Series
	mappings map[string]Mapping
	byRef    map[string]map[string]Mapping
	step     float64
	text     text.Style
}

// Plot implements plot.Plotter.
func (l lanes) Plot(c draw.Canvas, pl *plot.Plot) {
	tx, ty := pl.Transforms(&c)
	n := len(l.series)
	for i, s := range l.series {
		lane := float64(n - 1 - i)
		maps := l.mappings
		if m, ok := l.byRef[s.RefID]; ok {
			maps = m
		}
		for a := 0; a < len(s.T); {
			b := a + 1
			for b < len(s.T) && s.V[b] == s.V[a] && s.T[b]-s.T[b-1] <= 1.5*l.step {
				b++
			}
			key := strconv.FormatFloat(s.V[a], 'f', -1, 64)
			clr, label := palette[i%len(palette)], key
			if m, ok := maps[key]; ok {
				label = m.Text
				if c, ok := named[m.Color]; ok {
					clr = c
				}
			}
			x0, x1 := tx(s.T[a]), tx(s.T[b-1]+l.step)
			y0, y1 := ty(lane-0.4), ty(lane+0.4)
			box(c, withAlpha(clr, 200), x0, y0, x1, y1)
			st := l.text
			st.XAlign, st.YAlign = draw.XCenter, draw.YCenter
			if st.Width(label) < x1-x0-4 {
				c.FillText(st, vg.Point{X: (x0 + x1) / 2, Y: (y0 + y1) / 2}, label)
			}
			a = b
		}
	}
}

// shading is the annotations' regions over a time series panel.
type shading struct {
	regions [][2]float64
	color   color.Color
}

// Plot implements plot.Plotter.
func (s shading) Plot(c draw.Canvas, pl *plot.Plot) {
	tx, _ := pl.Transforms(&c)
	for _, rg := range s.regions {
		x0, x1 := tx(rg[0]), tx(rg[1])
		if x1-x0 < 1 {
			x1 = x0 + 1
		}
		box(c, s.color, max(x0, c.Min.X), c.Min.Y, min(x1, c.Max.X), c.Max.Y)
	}
}

func withAlpha(c color.RGBA, a uint8) color.NRGBA {
	return color.NRGBA{R: c.R, G: c.G, B: c.B, A: a}
}

// unitTicks are gonum's default ticks labelled in the panel's unit.
type unitTicks struct{ format func(float64) string }

// Ticks implements plot.Ticker.
func (u unitTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = u.format(ticks[i].Value)
		}
	}
	return ticks
}

// Render fetches the board's data over rg from q, draws it in style s and
// writes the PNG to path. It logs to log what it ran and each query that
// returned no series, and returns how many did.
func Render(ctx context.Context, q Querier, d *Dashboard, rg Range, s Style, path string, log io.Writer) (int, error) {
	data, err := Fetch(ctx, q, d, rg)
	if err != nil {
		return 0, err
	}
	series := 0
	for _, p := range data.Panels {
		series += len(p)
	}
	fmt.Fprintf(log, "board %s: %d panels, %d queries, %d series over %s to %s (step %s)\n",
		d.Path, len(d.Panels), len(d.Queries()), series, rg.From.UTC().Format(time.RFC3339), rg.To.UTC().Format(time.RFC3339), data.Step)
	for _, e := range data.Empty {
		fmt.Fprintf(log, "%s:%d: %s: no series: %s\n", d.Path, e.Line, e.Where, e.Expr)
	}
	if err := WritePNG(path, Draw(d, data, s)); err != nil {
		return len(data.Empty), err
	}
	fmt.Fprintf(log, "wrote %s\n", path)
	return len(data.Empty), nil
}
