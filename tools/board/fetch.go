package board

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Querier runs a PromQL range query; Prometheus's HTTP API client
// (v1.NewAPI) is one.
type Querier interface {
	QueryRange(ctx context.Context, query string, r v1.Range, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error)
}

// Range is the time range of a rendering and the values of the board's
// own variables.
type Range struct {
	// From and To bound the picture.
	From, To time.Time
	// Scrape is the scrape interval of the Prometheus queried: Grafana
	// derives $__interval and $__rate_interval from it.
	Scrape time.Duration
	// Points is the most points a series gets over the range: Grafana's
	// "max data points", about a panel's width in pixels.
	Points int
	// Vars are the dashboard's variables (instance, job), each a regex
	// as Grafana writes a multi-value selection.
	Vars map[string]string
}

// Interval is Grafana's $__interval for r: the range over Points, at
// least the scrape interval, rounded up to whole scrape intervals, and the
// step of every query.
func (r Range) Interval() time.Duration {
	iv := r.To.Sub(r.From) / time.Duration(max(r.Points, 1))
	if iv < r.Scrape {
		return r.Scrape
	}
	return (iv + r.Scrape - 1) / r.Scrape * r.Scrape
}

// Variables returns r.Vars with Grafana's built-ins: $__interval,
// $__rate_interval (the larger of $__interval + one scrape and four
// scrapes, Grafana's rule: a rate window holds at least two samples even
// when one scrape is missed) and $__range.
func (r Range) Variables() map[string]string {
	iv := r.Interval()
	vars := map[string]string{
		"__interval":      model.Duration(iv).String(),
		"__rate_interval": model.Duration(max(iv+r.Scrape, 4*r.Scrape)).String(),
		"__range":         model.Duration(r.To.Sub(r.From).Round(time.Second)).String(),
	}
	for k, v := range r.Vars {
		vars[k] = v
	}
	return vars
}

// Series is one series of a target over the range.
type Series struct {
	// Name is the target's legend with the series' labels; RefID the
	// target's.
	Name, RefID string
	// T are unix seconds, V the values at them (a scrape that returned
	// nothing leaves a gap in T).
	T, V []float64
}

// Data is what the board's queries returned over one range.
type Data struct {
	Range Range
	// Step is the queries' step.
	Step time.Duration
	// Panels holds each panel's series, parallel to Dashboard.Panels.
	Panels [][]Series
	// Regions are the annotations' regions, [start, end] in unix
	// seconds, by annotation.
	Regions [][][2]float64
	// Empty are the queries that returned no series over the range.
	Empty []Query
}

// Fetch runs every target of d over r. A query Prometheus refuses is an
// error naming the panel and its line; one that returns nothing is listed
// in Data.Empty and drawn as Grafana does ("No data").
func Fetch(ctx context.Context, q Querier, d *Dashboard, r Range) (*Data, error) {
	if !r.From.Before(r.To) || r.Scrape <= 0 {
		return nil, fmt.Errorf("range %v to %v, scrape interval %v: want from before to and a positive scrape interval", r.From, r.To, r.Scrape)
	}
	vars := r.Variables()
	data := &Data{Range: r, Step: r.Interval(), Panels: make([][]Series, len(d.Panels))}
	rng := v1.Range{Start: r.From, End: r.To, Step: data.Step}
	for i, p := range d.Panels {
		for _, t := range p.Targets {
			where := Query{Where: "panel " + p.Title, Line: p.Line, Expr: t.Expr}
			series, err := query(ctx, q, t.Expr, vars, rng, t.Legend)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: panel %q, target %s: %w", d.Path, p.Line, p.Title, t.RefID, err)
			}
			for k := range series {
				series[k].RefID = t.RefID
			}
			if len(series) == 0 {
				data.Empty = append(data.Empty, where)
			}
			data.Panels[i] = append(data.Panels[i], series...)
		}
	}
	for _, a := range d.Annotations {
		step := data.Step
		if a.Step != "" {
			s, err := model.ParseDuration(a.Step)
			if err != nil {
				return nil, fmt.Errorf("%s: annotation %q: step: %w", d.Path, a.Name, err)
			}
			step = time.Duration(s)
		}
		series, err := query(ctx, q, a.Expr, vars, v1.Range{Start: r.From, End: r.To, Step: step}, "")
		if err != nil {
			return nil, fmt.Errorf("%s: annotation %q: %w", d.Path, a.Name, err)
		}
		data.Regions = append(data.Regions, regions(series, step))
	}
	return data, nil
}

// query runs one expression and names its series by legend.
func query(ctx context.Context, q Querier, expr string, vars map[string]string, rng v1.Range, legend string) ([]Series, error) {
	e, err := Expand(expr, vars)
	if err != nil {
		return nil, err
	}
	val, _, _, err := q.QueryRange(ctx, e, rng)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e, err)
	}
	m, ok := val.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("%s: a %s, want a range of series", e, val.Type())
	}
	out := make([]Series, 0, len(m))
	for _, ss := range m {
		s := Series{Name: Legend(legend, ss.Metric)}
		for _, p := range ss.Values {
			v := float64(p.Value)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue // Grafana draws neither
			}
			s.T = append(s.T, float64(p.Timestamp)/1000)
			s.V = append(s.V, v)
		}
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// legendRef is {{label}} in a legendFormat, spaces allowed.
var legendRef = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// Legend is Grafana's legendFormat: {{label}} replaced by the series'
// label (empty when it has none); an empty format names the series by
// its labels.
func Legend(format string, m model.Metric) string {
	if format == "" {
		return m.String()
	}
	return legendRef.ReplaceAllStringFunc(format, func(s string) string {
		return string(m[model.LabelName(legendRef.FindStringSubmatch(s)[1])])
	})
}

// regions merges an annotation's points into regions: consecutive points
// at most one step apart are one region, as Grafana merges them.
func regions(series []Series, step time.Duration) [][2]float64 {
	gap := step.Seconds() * 1.5
	var out [][2]float64
	for _, s := range series {
		for i, t := range s.T {
			if i > 0 && t-s.T[i-1] <= gap {
				out[len(out)-1][1] = t
				continue
			}
			out = append(out, [2]float64{t, t})
		}
	}
	return out
}
