// Package board reads olcd's Grafana board (deploy/grafana/olcd.json) and
// draws it from a real Prometheus, without Grafana (which Debian does not
// ship): every panel's PromQL targets are run over a time range and drawn
// with gonum/plot in the board's own grid, with its units, legends,
// thresholds, value mappings and annotations. tools/boardplot is its
// command and tests/e2e/cmd/olcd-overload's `board` the run that feeds it
// (docs/img/board.png, `make docs-board`); tests/e2e's TestPrometheus reads
// the board's queries through Load and Expand.
//
// It is not linked into the daemon: olcd links no plotting library
// (TestNoPlottingLinked).
package board

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// GridColumns is the width of Grafana's grid: a panel's gridPos.x + w is at
// most 24.
const GridColumns = 24

// Dashboard is the part of a Grafana dashboard the renderer draws.
type Dashboard struct {
	// Path is the file it was read from, for errors.
	Path string
	// Title is the dashboard's title.
	Title string
	// Panels are every panel in reading order, rows included, nested
	// panels of collapsed rows flattened after their row.
	Panels []Panel
	// Variables are the dashboard's template variables.
	Variables []Variable
	// Annotations are the query annotations drawn over every time series
	// panel.
	Annotations []Annotation
}

// Panel is one panel of the board.
type Panel struct {
	// Line is the panel's line in the file.
	Line int
	// Type is "row", "timeseries" or "state-timeline" (Load refuses
	// others: they would be drawn as something they are not).
	Type string
	// Title is the panel's title.
	Title string
	// Grid is the panel's gridPos.
	Grid GridPos
	// Unit is fieldConfig.defaults.unit ("": short).
	Unit string
	// Min and Max are fieldConfig.defaults.min and max, when set.
	Min, Max *float64
	// FillOpacity is fieldConfig.defaults.custom.fillOpacity, 0..100.
	FillOpacity float64
	// Thresholds are the steps of fieldConfig.defaults.thresholds drawn
	// as lines (thresholdsStyle mode "line"); the base step (value null)
	// is not a line.
	Thresholds []float64
	// Mappings are value mappings (state-timeline): a value's text and
	// color; RefMappings a target's own (an override matching its refId).
	Mappings    map[string]Mapping
	RefMappings map[string]map[string]Mapping
	// LegendCalcs are options.legend.calcs (lastNotNull, max, mean, min).
	LegendCalcs []string
	// Targets are the panel's queries.
	Targets []Target
}

// GridPos is a panel's place in the board's grid: columns of 1/24 of the
// width, rows of one grid unit.
type GridPos struct {
	X int `yaml:"x"`
	Y int `yaml:"y"`
	W int `yaml:"w"`
	H int `yaml:"h"`
}

// Mapping is what a state-timeline shows for a value.
type Mapping struct {
	Text  string `yaml:"text"`
	Color string `yaml:"color"`
}

// Target is one PromQL query of a panel.
type Target struct {
	// RefID is Grafana's name of the target (A, B, ...).
	RefID string
	// Expr is the PromQL expression, with the dashboard's variables.
	Expr string
	// Legend is the legendFormat ({{label}} is replaced by the series'
	// label).
	Legend string
}

// Variable is a template variable of the dashboard.
type Variable struct {
	// Name, Type and Query are the variable's; Query is the query of a
	// "query" variable (label_values(expr, label)).
	Name, Type, Query string
}

// Annotation is a query annotation: where its expression has a value, the
// time series panels are shaded.
type Annotation struct {
	Name, Expr, Step, Color string
}

// Query is one PromQL expression of the board and where it is.
type Query struct {
	// Where names the panel or variable, Line its line in the file.
	Where string
	Line  int
	Expr  string
}

// drawn are the panel types the renderer knows.
var drawn = map[string]bool{"row": true, "timeseries": true, "state-timeline": true}

// Load reads and checks a Grafana dashboard. Every problem is reported at
// once, each as file:line: what.
func Load(path string) (*Dashboard, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse checks a dashboard read from path (JSON, a subset of YAML: it is
// decoded as YAML for the line numbers).
func Parse(data []byte, path string) (*Dashboard, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:1: a dashboard is one JSON object", path)
	}
	p := &parser{path: path, d: &Dashboard{Path: path}}
	top := root.Content[0]
	p.d.Title = str(get(top, "title"))
	panels := get(top, "panels")
	if panels == nil || panels.Kind != yaml.SequenceNode || len(panels.Content) == 0 {
		p.errf(top, "panels: no panels")
	} else {
		p.panels(panels, "panels")
	}
	p.variables(get(get(top, "templating"), "list"))
	p.annotations(get(get(top, "annotations"), "list"))
	p.overlaps()
	if len(p.errs) > 0 {
		return nil, errors.New(strings.Join(p.errs, "\n"))
	}
	return p.d, nil
}

type parser struct {
	path string
	d    *Dashboard
	errs []string
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, fmt.Sprintf("%s:%d: %s", p.path, line, fmt.Sprintf(format, args...)))
}

// rawPanel is a panel as the file has it.
type rawPanel struct {
	Type    string   `yaml:"type"`
	Title   string   `yaml:"title"`
	GridPos *GridPos `yaml:"gridPos"`
	Targets []struct {
		RefID  string `yaml:"refId"`
		Expr   string `yaml:"expr"`
		Legend string `yaml:"legendFormat"`
		Hide   bool   `yaml:"hide"`
	} `yaml:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit       string       `yaml:"unit"`
			Min        *float64     `yaml:"min"`
			Max        *float64     `yaml:"max"`
			Mappings   []rawMapping `yaml:"mappings"`
			Thresholds *struct {
				Steps []struct {
					Value *float64 `yaml:"value"`
				} `yaml:"steps"`
			} `yaml:"thresholds"`
			Custom struct {
				FillOpacity     float64 `yaml:"fillOpacity"`
				ThresholdsStyle struct {
					Mode string `yaml:"mode"`
				} `yaml:"thresholdsStyle"`
			} `yaml:"custom"`
		} `yaml:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `yaml:"id"`
				Options string `yaml:"options"`
			} `yaml:"matcher"`
			Properties []struct {
				ID    string       `yaml:"id"`
				Value []rawMapping `yaml:"value"`
			} `yaml:"properties"`
		} `yaml:"overrides"`
	} `yaml:"fieldConfig"`
	Options struct {
		Legend struct {
			Calcs []string `yaml:"calcs"`
		} `yaml:"legend"`
	} `yaml:"options"`
}

// rawMapping is a value mapping as the file has it.
type rawMapping struct {
	Type    string             `yaml:"type"`
	Options map[string]Mapping `yaml:"options"`
}

// legendCalcs are the legend calculations the renderer computes.
var legendCalcs = map[string]bool{"lastNotNull": true, "last": true, "max": true, "min": true, "mean": true}

func (p *parser) panels(seq *yaml.Node, field string) {
	for i, n := range seq.Content {
		where := fmt.Sprintf("%s[%d]", field, i)
		var r rawPanel
		if err := n.Decode(&r); err != nil {
			p.errf(n, "%s: %v", where, err)
			continue
		}
		if r.Title != "" {
			where += fmt.Sprintf(" (%q)", r.Title)
		}
		pn := Panel{Line: n.Line, Type: r.Type, Title: r.Title, Unit: r.FieldConfig.Defaults.Unit,
			Min: r.FieldConfig.Defaults.Min, Max: r.FieldConfig.Defaults.Max,
			FillOpacity: r.FieldConfig.Defaults.Custom.FillOpacity, LegendCalcs: r.Options.Legend.Calcs}
		if _, ok := units[pn.Unit]; !ok && r.Type != "row" {
			p.errf(n, "%s.fieldConfig.defaults.unit: %q is not drawn (want short, none, percentunit, s, cps or reqps)", where, pn.Unit)
		}
		if !drawn[r.Type] {
			p.errf(n, "%s.type: %q is not drawn (want row, timeseries or state-timeline)", where, r.Type)
			continue
		}
		switch g := r.GridPos; {
		case g == nil:
			p.errf(n, "%s.gridPos: missing", where)
		case g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > GridColumns:
			p.errf(get(n, "gridPos"), "%s.gridPos: x %d, w %d, y %d, h %d is outside the %d-column grid", where, g.X, g.W, g.Y, g.H, GridColumns)
		default:
			pn.Grid = *g
		}
		if pn.FillOpacity < 0 || pn.FillOpacity > 100 {
			p.errf(n, "%s.fieldConfig.defaults.custom.fillOpacity: %g is outside 0..100", where, pn.FillOpacity)
		}
		for _, c := range pn.LegendCalcs {
			if !legendCalcs[c] {
				p.errf(get(get(n, "options"), "legend"), "%s.options.legend.calcs: %q is not computed (want lastNotNull, last, max, min or mean)", where, c)
			}
		}
		if th := r.FieldConfig.Defaults.Thresholds; th != nil && r.FieldConfig.Defaults.Custom.ThresholdsStyle.Mode == "line" {
			for _, s := range th.Steps {
				if s.Value != nil {
					pn.Thresholds = append(pn.Thresholds, *s.Value)
				}
			}
		}
		pn.Mappings = p.mappings(n, where+".fieldConfig.defaults.mappings", r.FieldConfig.Defaults.Mappings)
		for i, o := range r.FieldConfig.Overrides {
			at := fmt.Sprintf("%s.fieldConfig.overrides[%d]", where, i)
			if o.Matcher.ID != "byFrameRefID" {
				p.errf(n, "%s.matcher.id: %q is not drawn (want byFrameRefID)", at, o.Matcher.ID)
				continue
			}
			for j, pr := range o.Properties {
				if pr.ID != "mappings" {
					p.errf(n, "%s.properties[%d].id: %q is not drawn (want mappings)", at, j, pr.ID)
					continue
				}
				if pn.RefMappings == nil {
					pn.RefMappings = map[string]map[string]Mapping{}
				}
				pn.RefMappings[o.Matcher.Options] = p.mappings(n, fmt.Sprintf("%s.properties[%d].value", at, j), pr.Value)
			}
		}
		for _, t := range r.Targets {
			if t.Hide || strings.TrimSpace(t.Expr) == "" {
				continue
			}
			pn.Targets = append(pn.Targets, Target{RefID: t.RefID, Expr: t.Expr, Legend: t.Legend})
		}
		if r.Type != "row" && len(pn.Targets) == 0 {
			p.errf(n, "%s.targets: no query", where)
		}
		p.d.Panels = append(p.d.Panels, pn)
		if nested := get(n, "panels"); nested != nil && nested.Kind == yaml.SequenceNode {
			p.panels(nested, where+".panels")
		}
	}
}

// mappings merges value mappings; other kinds are refused.
func (p *parser) mappings(n *yaml.Node, where string, ms []rawMapping) map[string]Mapping {
	var out map[string]Mapping
	for _, m := range ms {
		if m.Type != "value" {
			p.errf(n, "%s: type %q is not drawn (want value)", where, m.Type)
			continue
		}
		if out == nil {
			out = map[string]Mapping{}
		}
		for k, v := range m.Options {
			out[k] = v
		}
	}
	return out
}

func (p *parser) variables(list *yaml.Node) {
	if list == nil {
		return
	}
	for i, n := range list.Content {
		v := Variable{Name: str(get(n, "name")), Type: str(get(n, "type"))}
		q := get(n, "query")
		if q != nil && q.Kind == yaml.MappingNode {
			q = get(q, "query")
		}
		v.Query = str(q)
		if v.Name == "" {
			p.errf(n, "templating.list[%d].name: missing", i)
		}
		p.d.Variables = append(p.d.Variables, v)
	}
}

func (p *parser) annotations(list *yaml.Node) {
	if list == nil {
		return
	}
	for _, n := range list.Content {
		if str(get(n, "expr")) == "" || str(get(n, "enable")) == "false" {
			continue // Grafana's built-in annotations, or one turned off
		}
		p.d.Annotations = append(p.d.Annotations, Annotation{Name: str(get(n, "name")), Expr: str(get(n, "expr")),
			Step: str(get(n, "step")), Color: str(get(n, "iconColor"))})
	}
}

// overlaps reports panels that share a grid cell: Grafana would move one,
// so the file does not say where it is.
func (p *parser) overlaps() {
	type cell struct{ x, y int }
	owner := map[cell]int{}
	for i, pn := range p.d.Panels {
		for y := pn.Grid.Y; y < pn.Grid.Y+pn.Grid.H; y++ {
			for x := pn.Grid.X; x < pn.Grid.X+pn.Grid.W; x++ {
				if j, ok := owner[cell{x, y}]; ok {
					p.errs = append(p.errs, fmt.Sprintf("%s:%d: panel %q overlaps panel %q (line %d) at column %d, row %d",
						p.path, pn.Line, pn.Title, p.d.Panels[j].Title, p.d.Panels[j].Line, x, y))
					return
				}
				owner[cell{x, y}] = i
			}
		}
	}
}

// get returns the value of key in mapping n (nil if absent or n is not a
// mapping).
func get(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func str(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// labelValues is Grafana's template query label_values(expr, label): the
// metric query is its first argument.
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// Queries returns every PromQL expression of the board: each panel's
// targets, then each query variable's metric query (label_values' first
// argument), unexpanded.
func (d *Dashboard) Queries() []Query {
	var out []Query
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out = append(out, Query{Where: "panel " + p.Title, Line: p.Line, Expr: t.Expr})
		}
	}
	for _, v := range d.Variables {
		if v.Type != "query" || v.Query == "" {
			continue
		}
		q := v.Query
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		out = append(out, Query{Where: "variable $" + v.Name, Expr: q})
	}
	return out
}

// variableRef is a use of a variable: $name, ${name} or [[name]].
var variableRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)|\[\[([A-Za-z_][A-Za-z0-9_]*)\]\]`)

// Expand replaces the variables in expr with their values in vars
// (without the $: "instance", "__rate_interval"). A variable vars does not
// name is an error: the query would reach Prometheus with a $ in it.
func Expand(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := variableRef.ReplaceAllStringFunc(expr, func(m string) string {
		sub := variableRef.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, "$"+name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", fmt.Errorf("%s: no value for %s", expr, strings.Join(missing, ", "))
	}
	return out, nil
}
