package board

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

const shipped = "../../deploy/grafana/olcd.json"

// TestLoadShippedBoard: the shipped board loads, every panel it has is one
// the renderer draws, and its queries include the recording rules and
// the capacity the README says it shows.
func TestLoadShippedBoard(t *testing.T) {
	d, err := Load(shipped)
	if err != nil {
		t.Fatal(err)
	}
	var rows, graphs int
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows++
		} else {
			graphs++
		}
	}
	if rows < 5 || graphs < 20 {
		t.Errorf("%d rows and %d panels, want the board's (≥ 5 and ≥ 20)", rows, graphs)
	}
	all := ""
	for _, q := range d.Queries() {
		all += q.Expr + "\n"
	}
	for _, want := range []string{"job:olcd_nodes_by_mode:sum", "instance:olcd_shed_ratio:rate1m", "olcd_port_capacity_requests_per_second",
		"olcd_lb_node_weight_ratio", "olcd_port_dropped_total", "label_values" /* must be stripped */} {
		if strings.Contains(all, want) != (want != "label_values") {
			t.Errorf("queries containing %q: %v", want, strings.Contains(all, want))
		}
	}
	if len(d.Annotations) != 1 || !strings.Contains(d.Annotations[0].Expr, "olcd_overload_active") {
		t.Errorf("annotations %+v, want the overload one", d.Annotations)
	}
	// The overload timeline's mode lane has mappings of its own: the
	// panel's say "overload" for 1.
	for _, p := range d.Panels {
		if p.Type == "state-timeline" {
			if p.Mappings["1"].Text != "overload" || p.RefMappings["B"]["1"].Text != "on" {
				t.Errorf("%q: mappings %v, target B's %v", p.Title, p.Mappings, p.RefMappings)
			}
		}
	}
}

// TestParseErrors: what the renderer would draw wrongly is refused with
// the file, the line and the field.
func TestParseErrors(t *testing.T) {
	panel := func(fields string) string {
		return fmt.Sprintf(`{"title": "b", "panels": [
 {"type": "timeseries", "title": "ok", "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8}, "targets": [{"expr": "up"}]},
 %s
]}`, fields)
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"not an object", `[1, 2]`, "b.json:1: a dashboard is one JSON object"},
		{"no panels", `{"title": "b"}`, "b.json:1: panels: no panels"},
		{"a type not drawn", panel(`{"type": "gauge", "title": "g", "gridPos": {"x": 12, "y": 0, "w": 12, "h": 8}, "targets": [{"expr": "up"}]}`),
			`b.json:3: panels[1] ("g").type: "gauge" is not drawn`},
		{"outside the grid", panel(`{"type": "timeseries", "title": "w", "gridPos": {"x": 20, "y": 0, "w": 12, "h": 8}, "targets": [{"expr": "up"}]}`),
			`b.json:3: panels[1] ("w").gridPos: x 20, w 12, y 0, h 8 is outside the 24-column grid`},
		{"no gridPos", panel(`{"type": "timeseries", "title": "n", "targets": [{"expr": "up"}]}`), `b.json:3: panels[1] ("n").gridPos: missing`},
		{"overlap", panel(`{"type": "timeseries", "title": "o", "gridPos": {"x": 6, "y": 4, "w": 12, "h": 8}, "targets": [{"expr": "up"}]}`),
			`b.json:3: panel "o" overlaps panel "ok" (line 2) at column 6, row 4`},
		{"a unit not drawn", panel(`{"type": "timeseries", "title": "u", "gridPos": {"x": 12, "y": 0, "w": 12, "h": 8}, "fieldConfig": {"defaults": {"unit": "bytes"}}, "targets": [{"expr": "up"}]}`),
			`b.json:3: panels[1] ("u").fieldConfig.defaults.unit: "bytes" is not drawn`},
		{"a legend calc not computed", panel(`{"type": "timeseries", "title": "c", "gridPos": {"x": 12, "y": 0, "w": 12, "h": 8},
  "options": {"legend": {"calcs": ["p95"]}}, "targets": [{"expr": "up"}]}`),
			`b.json:4: panels[1] ("c").options.legend.calcs: "p95" is not computed`},
		{"no query", panel(`{"type": "timeseries", "title": "q", "gridPos": {"x": 12, "y": 0, "w": 12, "h": 8}, "targets": [{"expr": " "}]}`),
			`b.json:3: panels[1] ("q").targets: no query`},
		{"an override not drawn", panel(`{"type": "state-timeline", "title": "s", "gridPos": {"x": 12, "y": 0, "w": 12, "h": 8},
  "fieldConfig": {"overrides": [{"matcher": {"id": "byName", "options": "x"}, "properties": []}]}, "targets": [{"expr": "up"}]}`),
			`b.json:3: panels[1] ("s").fieldConfig.overrides[0].matcher.id: "byName" is not drawn`},
		{"broken JSON", "{\"title\": \"b\",\n \"panels\": [}", "b.json: yaml: line 1: did not find expected node content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "b.json")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestExpand: Grafana's three ways of writing a variable, and a variable
// without a value is an error naming it.
func TestExpand(t *testing.T) {
	vars := map[string]string{"instance": "node-1", "__rate_interval": "4s"}
	got, err := Expand(`rate(x{instance=~"$instance"}[${__rate_interval}]) + y{i="[[instance]]"}`, vars)
	if want := `rate(x{instance=~"node-1"}[4s]) + y{i="node-1"}`; err != nil || got != want {
		t.Errorf("Expand = %q, %v; want %q", got, err, want)
	}
	if _, err := Expand(`x{job=~"$job", a="$alpha"}`, vars); err == nil || !strings.Contains(err.Error(), "no value for $alpha, $job") {
		t.Errorf("missing variables: %v", err)
	}
}

// TestRangeVariables: Grafana's $__interval and $__rate_interval for a
// short range at a 1 s scrape and a long one at 15 s.
func TestRangeVariables(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		span, scrape         time.Duration
		points               int
		interval, rateWindow string
	}{
		{3 * time.Minute, time.Second, 800, "1s", "4s"},
		{time.Hour, time.Second, 800, "5s", "6s"},
		{6 * time.Hour, 15 * time.Second, 800, "30s", "1m"},
	} {
		r := Range{From: t0, To: t0.Add(tc.span), Scrape: tc.scrape, Points: tc.points}
		v := r.Variables()
		if v["__interval"] != tc.interval || v["__rate_interval"] != tc.rateWindow {
			t.Errorf("%v at %v: $__interval %s, $__rate_interval %s; want %s, %s", tc.span, tc.scrape, v["__interval"], v["__rate_interval"], tc.interval, tc.rateWindow)
		}
	}
}

// TestLegend: {{label}}, with spaces, a label the series lacks, and no
// format at all.
func TestLegend(t *testing.T) {
	m := model.Metric{"__name__": "olcd_port_dropped_total", "proto": "tcp", "port": "443", "instance": "node-1"}
	for format, want := range map[string]string{
		"{{proto}}/{{ port }} {{instance}}": "tcp/443 node-1",
		"class {{class}}":                   "class ",
		"":                                  `olcd_port_dropped_total{instance="node-1", port="443", proto="tcp"}`,
	} {
		if got := Legend(format, m); got != want {
			t.Errorf("Legend(%q) = %q, want %q", format, got, want)
		}
	}
}

// fakeProm answers query_range as Prometheus does: each query's series
// from series (by expression), empty for the others, an error for
// "bad(".
func fakeProm(t *testing.T, series map[string][]float64) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Error(err)
		}
		q := r.Form.Get("query")
		if strings.Contains(q, "bad(") {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": "bad_data", "error": "parse error"})
			return
		}
		start, _ := strconv.ParseFloat(r.Form.Get("start"), 64)
		step, _ := strconv.ParseFloat(r.Form.Get("step"), 64)
		result := []any{}
		if vs, ok := series[q]; ok {
			var vals [][2]any
			for i, v := range vs {
				vals = append(vals, [2]any{start + float64(i)*step, strconv.FormatFloat(v, 'f', -1, 64)})
			}
			result = append(result, map[string]any{"metric": map[string]string{"instance": "node-1", "proto": "tcp", "port": "18080"}, "values": vals})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": result}})
	}))
}

// TestRender: a two-panel board against a fake Prometheus: the picture has
// the style's size, the panel with data shows its first series' color in
// its own cell and not in the other's, the empty query is reported, and a
// query Prometheus refuses is an error naming the panel's line.
func TestRender(t *testing.T) {
	src := `{"title": "t", "panels": [
 {"type": "row", "title": "r", "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}},
 {"type": "timeseries", "title": "with data", "gridPos": {"x": 0, "y": 1, "w": 12, "h": 8},
  "fieldConfig": {"defaults": {"unit": "percentunit"}}, "options": {"legend": {"calcs": ["lastNotNull", "max"]}},
  "targets": [{"refId": "A", "expr": "x{instance=~\"$instance\"}", "legendFormat": "{{proto}}/{{port}}"}]},
 {"type": "timeseries", "title": "empty", "gridPos": {"x": 12, "y": 1, "w": 12, "h": 8},
  "targets": [{"refId": "A", "expr": "nothing"}]}
]}`
	d, err := Parse([]byte(src), "t.json")
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float64, 61)
	for i := range vals {
		vals[i] = float64(i) / 60
	}
	srv := fakeProm(t, map[string][]float64{`x{instance=~"node-1"}`: vals})
	defer srv.Close()
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	rg := Range{From: t0, To: t0.Add(time.Minute), Scrape: time.Second, Points: 800, Vars: map[string]string{"instance": "node-1"}}
	style := Style{Width: 800, RowHeight: 30, Gap: 8, Header: 48, DPI: 96}
	out := filepath.Join(t.TempDir(), "b.png")
	var log strings.Builder
	empty, err := Render(context.Background(), v1.NewAPI(c), d, rg, style, out, &log)
	if err != nil {
		t.Fatal(err)
	}
	if empty != 1 || !strings.Contains(log.String(), `t.json:6: panel empty: no series: nothing`) {
		t.Errorf("empty %d, log:\n%s", empty, log.String())
	}
	img := readPNG(t, out)
	if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 48+9*38 {
		t.Errorf("picture %v, want 800 × %d", b, 48+9*38)
	}
	// The first series' color in the left cell, not in the right one.
	line := palette[0]
	left, right := count(img, image.Rect(0, 48+38, 400, 48+9*38), line), count(img, image.Rect(400, 48+38, 800, 48+9*38), line)
	if left < 100 || right != 0 {
		t.Errorf("pixels of the series' color: %d in the panel with data (want ≥ 100), %d in the empty one (want 0)", left, right)
	}

	bad, err := Parse([]byte(strings.Replace(src, `"expr": "nothing"`, `"expr": "bad("`, 1)), "t.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Render(context.Background(), v1.NewAPI(c), bad, rg, style, out, io.Discard); err == nil || !strings.Contains(err.Error(), `t.json:6: panel "empty", target A: bad(`) {
		t.Errorf("a refused query: %v", err)
	}
}

func readPNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// count is the number of pixels in r of color c (within a few levels).
func count(img image.Image, r image.Rectangle, c color.RGBA) int {
	n := 0
	near := func(a uint32, b uint8) bool { d := int(a>>8) - int(b); return d > -6 && d < 6 }
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if near(pr, c.R) && near(pg, c.G) && near(pb, c.B) {
				n++
			}
		}
	}
	return n
}
