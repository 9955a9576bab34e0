package overload

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
)

// ReadReport reads a results.json that olcd-overload wrote.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return &r, nil
}

// PrintRepeats writes each scenario × variant of reports, the same matrix
// run several times, as min / median / max over the runs that have it: a
// control figure is worth something only if it holds in every run.
func PrintRepeats(w io.Writer, reports []*Report) {
	type cell struct{ scenario, variant string }
	var order []cell
	runs := map[cell][]*Summary{}
	for _, r := range reports {
		for _, s := range r.Scenarios {
			if s.Summary == nil {
				continue
			}
			k := cell{s.Name, string(s.Variant)}
			if _, ok := runs[k]; !ok {
				order = append(order, k)
			}
			runs[k] = append(runs[k], s.Summary)
		}
	}
	fmt.Fprintf(w, "each cell over the runs that have it, min/median/max (n runs); the columns as in the matrix\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tvariant\tn\tC/s\tgoodput/C\t+5s\tp95 ms +5s\tp99 ms\tp99 ms +5s\ttarget ms\tp sd\tsteady\tafter\tafter cut\thealth")
	for _, k := range order {
		ss := runs[k]
		f := func(get func(*Summary) float64, prec int) string {
			var v []float64
			for _, s := range ss {
				if x := get(s); x == x { // NaN: not measured in that run
					v = append(v, x)
				}
			}
			if len(v) == 0 {
				return "-"
			}
			slices.Sort(v)
			return fmt.Sprintf("%.*f/%.*f/%.*f", prec, v[0], prec, v[len(v)/2], prec, v[len(v)-1])
		}
		nan := func(p *float64) float64 {
			if p == nil {
				return nan()
			}
			return *p
		}
		health := 0
		total := 0
		for _, s := range ss {
			health += s.HealthOK
			total += s.HealthTotal
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\n", k.scenario, k.variant, len(ss),
			f(func(s *Summary) float64 { return s.CapacityRPS }, 0),
			f(func(s *Summary) float64 { return s.GoodputC }, 2), f(func(s *Summary) float64 { return s.SettledGoodputC }, 2),
			f(func(s *Summary) float64 { return s.SettledP95Ms }, 0), f(func(s *Summary) float64 { return s.P99Ms }, 0),
			f(func(s *Summary) float64 { return s.SettledP99Ms }, 0), f(func(s *Summary) float64 { return s.TargetMs }, 0),
			f(func(s *Summary) float64 { return nan(s.PStdDev) }, 3), f(func(s *Summary) float64 { return s.WindowsOK }, 2),
			f(func(s *Summary) float64 { return nan(s.AfterServed) }, 2), f(func(s *Summary) float64 { return nan(s.AfterCut) }, 2), health, total)
	}
	tw.Flush()
}

// nan is a float64 NaN: a figure a run did not measure.
func nan() float64 { var z float64; return z / z }
