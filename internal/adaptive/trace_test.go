package adaptive

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/fieldcases"

	"github.com/olcd/olcd/internal/olc"
)

// traceCase is a traces/<case>.json file.
type traceCase struct {
	IntervalS  float64            `json:"interval_s"`
	Thresholds map[string]float64 `json:"thresholds"`
	Expect     traceExpect        `json:"expect"`
	Note       string             `json:"note"`
}

// traceExpect holds the expectations; nil means "not checked".
type traceExpect struct {
	PMaxLE              *float64 `json:"p_max_le"`
	PPositiveByS        *float64 `json:"p_positive_by_s"`
	PZeroFromS          *float64 `json:"p_zero_from_s"`
	PDirectionChangesLE *int     `json:"p_direction_changes_le"`
}

// traceDirs returns the shared trace folder and every trace folder of
// $OLCD_EXTRA_CASES (located by internal/fieldcases).
func traceDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := fieldcases.Dirs(fieldcases.Traces)
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// loadCase reads <base>.json strictly: an unknown expectation is an error,
// so a new kind of case cannot pass by being ignored.
func loadCase(path string) (traceCase, error) {
	var tc traceCase
	data, err := os.ReadFile(path)
	if err != nil {
		return tc, fmt.Errorf("read case: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tc); err != nil {
		return tc, fmt.Errorf("decode %s: %w", path, err)
	}
	if tc.IntervalS <= 0 {
		return tc, fmt.Errorf("%s: interval_s must be positive", path)
	}
	return tc, nil
}

// caseConfig is the controller config of a case: its thresholds, every
// other setting at its default.
func caseConfig(tc traceCase) (Config, error) {
	cfg := Config{Interval: seconds(tc.IntervalS), Params: DefaultParams()}
	for name, th := range tc.Thresholds {
		sig, err := olc.ParseSignal(name)
		if err != nil {
			return cfg, fmt.Errorf("unknown signal %q in thresholds", name)
		}
		cfg.Thresholds[sig] = th
	}
	return cfg, nil
}

// checkExpect checks the case's expectations against the per-tick times and
// node-level drop probabilities; it returns every violation.
func checkExpect(e traceExpect, ts, ps []float64) []string {
	var bad []string
	if e.PMaxLE != nil {
		for i, p := range ps {
			if p > *e.PMaxLE {
				bad = append(bad, fmt.Sprintf("p_max_le %v: p = %.4f at t = %.1f s", *e.PMaxLE, p, ts[i]))
				break
			}
		}
	}
	if e.PPositiveByS != nil {
		ok := false
		for i, p := range ps {
			if ts[i] <= *e.PPositiveByS+1e-9 && p > 0 {
				ok = true
				break
			}
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("p_positive_by_s %v: p was 0 at every tick until then", *e.PPositiveByS))
		}
	}
	if e.PZeroFromS != nil {
		for i, p := range ps {
			if ts[i] >= *e.PZeroFromS-1e-9 && p != 0 {
				bad = append(bad, fmt.Sprintf("p_zero_from_s %v: p = %.4f at t = %.1f s", *e.PZeroFromS, p, ts[i]))
				break
			}
		}
	}
	if e.PDirectionChangesLE != nil {
		if n := directionChanges(ps); n > *e.PDirectionChangesLE {
			bad = append(bad, fmt.Sprintf("p_direction_changes_le %d: %d changes", *e.PDirectionChangesLE, n))
		}
	}
	return bad
}

// directionChanges counts the sign changes between consecutive nonzero
// changes of p.
func directionChanges(ps []float64) int {
	n, last := 0, 0.0
	for i := 1; i < len(ps); i++ {
		d := ps[i] - ps[i-1]
		if d == 0 {
			continue
		}
		if last != 0 && math.Signbit(d) != math.Signbit(last) {
			n++
		}
		last = d
	}
	return n
}

// TestTraceCases replays every field case with its thresholds and default
// parameters and checks its expectations. A failure names the case.
func TestTraceCases(t *testing.T) {
	total := 0
	for i, dir := range traceDirs(t) {
		csvs, err := filepath.Glob(filepath.Join(dir, "*.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if len(csvs) == 0 && i == 0 {
			t.Errorf("no traces in %s", dir)
		}
		for _, path := range csvs {
			base := strings.TrimSuffix(path, ".csv")
			total++
			t.Run(filepath.Base(base), func(t *testing.T) {
				tc, err := loadCase(base + ".json")
				if err != nil {
					t.Fatalf("case %s: %v", base, err)
				}
				tr, err := ReadTraceFile(path)
				if err != nil {
					t.Fatalf("case %s: %v", base, err)
				}
				cfg, err := caseConfig(tc)
				if err != nil {
					t.Fatalf("case %s: %v", base, err)
				}
				c, err := New(cfg)
				if err != nil {
					t.Fatalf("case %s: %v", base, err)
				}
				ts := make([]float64, len(tr.Rows))
				ps := make([]float64, len(tr.Rows))
				for i, row := range tr.Rows {
					d := c.Step(tr.Snapshot(i), nil)
					ts[i], ps[i] = row.T, d.DropProbability
				}
				for _, b := range checkExpect(tc.Expect, ts, ps) {
					t.Errorf("case %s (%s): %s", base, tc.Note, b)
				}
			})
		}
	}
	if total == 0 {
		t.Fatal("no trace cases found")
	}
}

// TestCheckExpect makes sure the expectation checker can fail.
func TestCheckExpect(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	n := func(x int) *int { return &x }
	ts := []float64{0, 0.5, 1, 1.5, 2}
	tests := []struct {
		name string
		e    traceExpect
		ps   []float64
		bad  int
	}{
		{"max holds", traceExpect{PMaxLE: f(0.5)}, []float64{0, 0.2, 0.5, 0.1, 0}, 0},
		{"max broken", traceExpect{PMaxLE: f(0)}, []float64{0, 0.01, 0, 0, 0}, 1},
		{"positive in time", traceExpect{PPositiveByS: f(1)}, []float64{0, 0, 0.1, 0.2, 0}, 0},
		{"positive too late", traceExpect{PPositiveByS: f(1)}, []float64{0, 0, 0, 0.2, 0}, 1},
		{"zero from holds", traceExpect{PZeroFromS: f(1.5)}, []float64{0.3, 0.2, 0.1, 0, 0}, 0},
		{"zero from broken", traceExpect{PZeroFromS: f(1.5)}, []float64{0.3, 0.2, 0.1, 0, 0.01}, 1},
		{"direction ok", traceExpect{PDirectionChangesLE: n(1)}, []float64{0, 0.2, 0.2, 0.1, 0}, 0},
		{"direction broken", traceExpect{PDirectionChangesLE: n(1)}, []float64{0, 0.2, 0.1, 0.2, 0}, 1},
	}
	for _, tt := range tests {
		if got := checkExpect(tt.e, ts, tt.ps); len(got) != tt.bad {
			t.Errorf("%s: %d violations %v, want %d", tt.name, len(got), got, tt.bad)
		}
	}
}

// TestReadTraceErrors checks that malformed traces are rejected with the
// line and column named.
func TestReadTraceErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "empty trace"},
		{"bad header", "time,cpu_busy\n0,0.1\n", "header must be t_s"},
		{"unknown signal", "t_s,cpu_bussy\n0,0.1\n", `unknown signal "cpu_bussy" (did you mean "cpu_busy"?)`},
		{"duplicate", "t_s,cpu_busy,cpu_busy\n0,0.1,0.1\n", "listed twice"},
		{"time nan", "t_s,cpu_busy\nNaN,0.1\n", "x.csv:2: t_s"},
		{"time negative", "t_s,cpu_busy\n0,0.1\n-1,0.1\n", "x.csv:3: t_s"},
		{"short row", "t_s,cpu_busy\n0\n", "wrong number of fields"},
		// 1e10 s overflows time.Duration: it was replayed as a time before
		// the trace's start, and every later row as stale.
		{"time beyond the duration range", "t_s,cpu_busy\n0,0.1\n1e10,0.1\n", "x.csv:3: t_s \"1e10\": must be a number of seconds in [0, 9e+09]"},
		{"time +Inf", "t_s,cpu_busy\n+Inf,0.1\n", "x.csv:2: t_s"},
		{"no rows", "t_s,cpu_busy\n", "no rows"},
	}
	for _, tt := range tests {
		_, err := ReadTrace(strings.NewReader(tt.in), "x.csv")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

// TestTraceExportShapes reads a trace as a spreadsheet exports it: a UTF-8
// byte order mark and CRLF line ends, more rows than one allocation slab
// (each row keeps its own values).
func TestTraceExportShapes(t *testing.T) {
	var b strings.Builder
	b.WriteString("\ufefft_s,cpu_busy,psi_cpu_some\r\n")
	const rows = 2*traceSlab + 7
	for i := range rows {
		fmt.Fprintf(&b, "%g,%g,%s\r\n", float64(i)*0.5, float64(i%100)/100, map[bool]string{true: "", false: "0.25"}[i%3 == 0])
	}
	tr, err := ReadTrace(strings.NewReader(b.String()), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Columns) != 2 || tr.Columns[0] != olc.CPUBusy || len(tr.Rows) != rows {
		t.Fatalf("columns %v, %d rows", tr.Columns, len(tr.Rows))
	}
	for i, r := range tr.Rows {
		if r.T != float64(i)*0.5 || r.Values[0] != float64(i%100)/100 || !r.Present[0] ||
			r.Present[1] == (i%3 == 0) || (r.Present[1] && r.Values[1] != 0.25) || len(r.Values) != 2 || cap(r.Values) != 2 {
			t.Fatalf("row %d: %+v", i, r)
		}
	}
}

// TestTraceLenient: a cell that is not a number is replayed as an invalid
// sample with a warning, and a row whose time does not advance is replayed
// as a stale sample, which the controller ignores.
func TestTraceLenient(t *testing.T) {
	in := "t_s,cpu_busy\n0,0.3\n0.5,0.99\n0.5,0.99\n1.0,abc\n1.5,0.99\n"
	tr, err := ReadTrace(strings.NewReader(in), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Warnings) != 2 || !strings.Contains(tr.Warnings[0], "x.csv:4: t_s 0.5 does not advance past 0.5") ||
		!strings.Contains(tr.Warnings[1], "x.csv:5: column cpu_busy") {
		t.Errorf("warnings %v", tr.Warnings)
	}
	c := mustNew(t, cfgWith(sig{olc.CPUBusy, 0.8}))
	var ds []Decision
	for i := range tr.Rows {
		ds = append(ds, c.Step(tr.Snapshot(i), nil))
	}
	if tr.Snapshot(2).Interval != 0 || ds[2].PressureAvailable || ds[3].PressureAvailable {
		t.Errorf("stale row or non-number used: %+v %+v", ds[2], ds[3])
	}
	for i, d := range ds {
		if d.DropProbability != 0 {
			t.Errorf("row %d: p = %v; separated over-target ticks must not shed", i, d.DropProbability)
		}
	}
}

// TestTraceStaleRowsWarned: rows whose time goes back or stands still are
// replayed as stale (no signals); the first few are named, the rest
// counted, so that a trace pasted together from two files does not hide a
// dead stretch.
func TestTraceStaleRowsWarned(t *testing.T) {
	in := "t_s,cpu_busy\n10,0.9\n10.5,0.9\n"
	for i := range 8 {
		in += fmt.Sprintf("%g,0.9\n", float64(i)*0.5)
	}
	in += "11,0.9\n"
	tr, err := ReadTrace(strings.NewReader(in), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Warnings) != maxStaleWarnings+1 || !strings.Contains(tr.Warnings[0], "x.csv:4: t_s 0 does not advance past 10.5") ||
		tr.Warnings[maxStaleWarnings] != "x.csv: 3 more rows whose t_s does not advance" {
		t.Errorf("warnings %q", tr.Warnings)
	}
}

// TestTraceSnapshot checks the conversion of rows: empty cells are
// unavailable, invalid numbers are passed on as values, time and interval
// follow t_s.
func TestTraceSnapshot(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader("t_s,cpu_busy,psi_cpu_some\n0,0.5,\n0.5,NaN,0.2\n"), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := tr.Snapshot(0), tr.Snapshot(1)
	if !s0.At.Equal(TraceOrigin) || s0.Interval != 0 {
		t.Errorf("row 0: at %v interval %v", s0.At, s0.Interval)
	}
	if _, ok := s0.Get(olc.PSICPUSome); ok {
		t.Error("row 0: empty cell must be unavailable")
	}
	if v, ok := s1.Get(olc.CPUBusy); !ok || !math.IsNaN(v) {
		t.Errorf("row 1: cpu_busy %v %v, want NaN delivered", v, ok)
	}
	if s1.Interval != 500*time.Millisecond || !s1.At.Equal(TraceOrigin.Add(500*time.Millisecond)) {
		t.Errorf("row 1: at %v interval %v", s1.At, s1.Interval)
	}
}
