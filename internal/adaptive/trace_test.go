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

	"github.com/olcd/olcd/internal/fieldcases"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/trace"
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
				tr, err := trace.ReadFile(path)
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

// TestTraceLenient: a cell that is not a number is replayed as an invalid
// sample with a warning, and a row whose time does not advance is replayed
// as a stale sample, which the controller ignores.
func TestTraceLenient(t *testing.T) {
	in := "t_s,cpu_busy\n0,0.3\n0.5,0.99\n0.5,0.99\n1.0,abc\n1.5,0.99\n"
	tr, err := trace.Read(strings.NewReader(in), "x.csv")
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
