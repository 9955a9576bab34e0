package sampler

import (
	"encoding/json"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/fieldcases"
	"github.com/olcd/olcd/internal/olc"
)

// fieldCase is ../shared/cases/sampler/<case>/case.json.
type fieldCase struct {
	IntervalS float64             `json:"interval_s"`
	Cgroup    string              `json:"cgroup"`
	Tolerance float64             `json:"tolerance"`
	Note      string              `json:"note"`
	Expect    map[string]*float64 `json:"expect"`
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// caseDirs lists every sampler case folder: those of the shared field cases
// and of each directory in $OLCD_EXTRA_CASES (located by internal/fieldcases;
// an extra directory may have the layout of cases/ or hold case folders
// directly). Folders without case.json are not sampler cases.
func caseDirs(t *testing.T) []string {
	t.Helper()
	roots, err := fieldcases.Dirs(fieldcases.Sampler)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range roots {
		entries, err := os.ReadDir(r)
		if err != nil {
			t.Fatalf("field cases: read %s: %v", r, err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			d := filepath.Join(r, e.Name())
			if _, err := os.Stat(filepath.Join(d, "case.json")); err != nil {
				continue
			}
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// runCase samples the case's before/ root, then its after/ root, and computes
// the snapshot over the case's interval with the code Sample uses.
func runCase(t *testing.T, dir string, c fieldCase) olc.Snapshot {
	t.Helper()
	var readings [2]reading
	for i, sub := range []string{"before", "after"} {
		s, err := New(Config{Root: filepath.Join(dir, sub), Cgroup: c.Cgroup}, discardLogger())
		if err != nil {
			t.Fatalf("new sampler on %s: %v", sub, err)
		}
		s.collect(&readings[i])
	}
	return compute(&readings[0], &readings[1], true, time.Duration(c.IntervalS*float64(time.Second)))
}

func TestFieldCases(t *testing.T) {
	dirs := caseDirs(t)
	if len(dirs) == 0 {
		t.Fatal("no sampler field cases found")
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, "case.json"))
			if err != nil {
				t.Fatal(err)
			}
			var c fieldCase
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatalf("case %s: parse case.json: %v", dir, err)
			}
			if c.IntervalS <= 0 {
				t.Fatalf("case %s: interval_s %v must be positive", dir, c.IntervalS)
			}
			if len(c.Expect) == 0 {
				t.Fatalf("case %s: expects nothing", dir)
			}
			tol := c.Tolerance
			if tol <= 0 {
				tol = 1e-9
			}
			snap := runCase(t, dir, c)
			names := make([]string, 0, len(c.Expect))
			for n := range c.Expect {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				want := c.Expect[n]
				sig, err := olc.ParseSignal(n)
				if err != nil {
					t.Errorf("case %s: unknown signal %q in expect", name, n)
					continue
				}
				got, valid := snap.Get(sig)
				switch {
				case want == nil && valid:
					t.Errorf("case %s: %s = %v, want unavailable (%s)", name, n, got, c.Note)
				case want != nil && !valid:
					t.Errorf("case %s: %s unavailable, want %v (%s); errors: %v", name, n, *want, c.Note, snap.Errors)
				case want != nil && math.Abs(got-*want) > tol:
					t.Errorf("case %s: %s = %v, want %v ± %v (%s)", name, n, got, *want, tol, c.Note)
				}
			}
		})
	}
}
