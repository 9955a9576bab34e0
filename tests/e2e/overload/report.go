package overload

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
)

// Report is results.json: every run of a harness, grouped by scenario.
type Report struct {
	// CapacityRPS is the calibrated capacity C.
	CapacityRPS float64 `json:"capacity_rps"`
	// CapacityHalvedRPS is the capacity measured with the quota halved,
	// scenario 2's capacity after the halving (0: not measured).
	CapacityHalvedRPS float64 `json:"capacity_halved_rps,omitempty"`
	// SLOMs is the latency within which a success counts as goodput.
	SLOMs float64 `json:"slo_ms"`
	// Scenarios holds one entry per run (scenario × variant).
	Scenarios []ScenarioResult `json:"scenarios"`
	// Calibration is the step load behind CapacityRPS.
	Calibration *Calibration `json:"calibration"`
	// Calibrations are every calibrated backend's, by backend name.
	Calibrations map[Backend]*Calibration `json:"calibrations,omitempty"`
}

// ScenarioResult is one run in results.json.
type ScenarioResult struct {
	// Name is the scenario's name.
	Name string `json:"name"`
	RunResult
}

// NewReport starts a report for h's calibration.
func (h *Harness) NewReport() *Report {
	r := &Report{SLOMs: float64(h.opt.SLO.Milliseconds()), Calibration: h.Calibration, Scenarios: []ScenarioResult{}, Calibrations: h.calibrations}
	if h.Calibration != nil {
		r.CapacityRPS = h.Calibration.CapacityRPS
	}
	return r
}

// Add appends a run.
func (r *Report) Add(res *RunResult) {
	r.Scenarios = append(r.Scenarios, ScenarioResult{Name: res.Scenario, RunResult: *res})
}

// WriteJSON writes the report to path (atomically).
func (r *Report) WriteJSON(path string) error {
	if r.Calibration != nil && r.Calibration.QuotaHalved != nil {
		r.CapacityHalvedRPS = r.Calibration.QuotaHalved.CapacityRPS
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// PrintTables writes one table per scenario: a row per variant and phase.
func (r *Report) PrintTables(w io.Writer) {
	var order []string
	seen := map[string]bool{}
	for _, s := range r.Scenarios {
		if !seen[s.Name] {
			seen[s.Name] = true
			order = append(order, s.Name)
		}
	}
	for _, name := range order {
		c := r.CapacityRPS
		for _, s := range r.Scenarios {
			if s.Name == name && s.CapacityRPS > 0 {
				c = s.CapacityRPS
			}
		}
		fmt.Fprintf(w, "\n%s   (C = %.0f req/s, SLO %.0f ms; goodput = HTTP 200 answers within the SLO; p50/p99 of successful answers, - when none;\n"+
			"   timeouts count shed connections too: a dropped SYN times out at the client; refused: connects answered with a reset; connect = mean ms in connect(); cpu = backend CPU ÷ quota)\n", name, c, r.SLOMs)
		if name == CapacityHalved.Name && r.Calibration != nil {
			ch := r.Calibration.HalvedCapacityRPS()
			how := "measured"
			if r.Calibration.QuotaHalved == nil {
				how = "not measured: C/2"
			}
			fmt.Fprintf(w, "  capacity with the quota halved C' = %.0f req/s (%s; %.2f × C/2); after the halving goodput/C' = goodput/C × %.2f\n",
				ch, how, ch/(r.CapacityRPS/2), r.CapacityRPS/ch)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "variant\tphase\toffered/s\tgoodput/s\tgoodput/C\tp50 ms\tp99 ms\terrors\trefused\ttimeouts\tconnect\tSYN drop %\tcpu\tolcd p\thealth\t")
		for _, s := range r.Scenarios {
			if s.Name != name {
				continue
			}
			var rows []PhaseResult
			for i, p := range s.Phases {
				rows = append(rows, p)
				// The first phase starts from idle: nothing to settle.
				if p.Settled != nil && i > 0 {
					st := *p.Settled
					st.Name = fmt.Sprintf("%s (+%.0fs)", p.Name, SettleTime.Seconds())
					rows = append(rows, st)
				}
			}
			for _, p := range rows {
				olcdP := "-"
				if olcdVariant(s.Variant) {
					olcdP = fmt.Sprintf("%.2f", p.MeanP)
				}
				drop := fmt.Sprintf("%.1f", 100*p.SYNDropRatio)
				if s.Variant == VariantObserve {
					drop = fmt.Sprintf("%.1f (would %.1f)", 100*p.SYNDropRatio, 100*p.WouldDropRatio)
				}
				p50, p99 := "-", "-"
				if p.Successes > 0 {
					p50, p99 = fmt.Sprintf("%.1f", p.P50Ms), fmt.Sprintf("%.1f", p.P99Ms)
				}
				fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.2f\t%s\t%s\t%d\t%d\t%d\t%.0f\t%s\t%.2f\t%s\t%d/%d\t\n",
					s.Variant, p.Name, p.OfferedRPS, p.GoodputRPS, p.GoodputRPS/c, p50, p99,
					p.Errors, p.ConnectRefused, p.Timeouts, p.MeanConnectMs, drop, p.CPUBusy, olcdP, p.HealthOK, p.HealthTotal)
			}
		}
		tw.Flush()
	}
	r.PrintMatrix(w)
	fmt.Fprintln(w)
	for _, s := range r.Scenarios {
		if s.Plot != "" {
			fmt.Fprintf(w, "plot %-28s %s\n", s.Name+"/"+string(s.Variant)+":", relPath(s.Plot))
		}
	}
}

// relPath shortens p relative to the working directory when it can.
func relPath(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if r, err := filepath.Rel(wd, p); err == nil && len(r) < len(p) {
		return r
	}
	return p
}

// PrintMatrix writes the summary of every run: one row per scenario and
// variant, its overload phase (the highest offered load) in the figures
// of the matrix.
func (r *Report) PrintMatrix(w io.Writer) {
	fmt.Fprintf(w, "\nmatrix: each scenario's overload phase (the highest offered load); goodput/C over the whole phase and from +%.0fs;\n"+
		"   p sd = std-dev of the drop probability a first attempt meets, over 1 s windows from +%.0fs; steady = share of those windows with goodput ≥ %.1f × their mean\n"+
		"   (a limit cycle, not the level: a run that answers nothing is steady too);\n"+
		"   p95, p99 = of the successes over the whole phase and from +%.0fs; target = olcd's response target from +%.0fs;\n"+
		"   after = share of the next phase's requests (the step down) answered within the SLO from +%.0fs;\n"+
		"   after cut = fewest connections admitted in the second after a cut (p rose by 0.1) over olcd's measured capacity, (n) the cuts;\n"+
		"   C = the capacity in force (capacity-halved: C' after the halving); connect = mean ms in connect(); health = health checks answered over the run\n",
		SettleTime.Seconds(), SettleTime.Seconds(), windowOKShare, SettleTime.Seconds(), SettleTime.Seconds(), AfterSettle.Seconds())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tvariant\tC/s\tgoodput/C\t+5s\tp95 ms\t+5s\tp99 ms\t+5s\ttarget\tp sd\tsteady\tafter\tafter cut\tconnect\trefused\ttimeouts\thealth\t")
	for _, s := range r.Scenarios {
		m := s.Summary
		if m == nil {
			continue
		}
		sd := "-"
		if m.PStdDev != nil {
			sd = fmt.Sprintf("%.3f", *m.PStdDev)
		}
		ms := func(x float64) string {
			if x <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f", x)
		}
		after, cut := "-", "-"
		if m.AfterServed != nil {
			after = fmt.Sprintf("%.2f", *m.AfterServed)
		}
		if m.AfterCut != nil {
			cut = fmt.Sprintf("%.2f (%d)", *m.AfterCut, m.Cuts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%.0f\t%d\t%d\t%d/%d\t\n", s.Name, s.Variant, m.CapacityRPS,
			m.GoodputC, m.SettledGoodputC, ms(m.P95Ms), ms(m.SettledP95Ms), ms(m.P99Ms), ms(m.SettledP99Ms), ms(m.TargetMs), sd, m.WindowsOK, after, cut,
			m.MeanConnectMs, m.ConnectRefused, m.Timeouts, m.HealthOK, m.HealthTotal)
	}
	tw.Flush()
}
