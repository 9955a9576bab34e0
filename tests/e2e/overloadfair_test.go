package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/olcd/olcd/tests/e2e/overload"
)

// (The file is named to sort after overload_test.go: the suite's tests run in
// file order, and after TestOverloadLB this one finds the shared harness
// made, not given up and made again.)

// TestOverloadFair is issue 29's must-show 2 with real traffic and the
// controller on: one heavy client at 2.5 C from one address and 20 light
// clients at 0.5 C together from 20 others (0.025 C each), against the cpu
// backend with olcd enforcing, the work port's fair shedding on
// (overload.FairHeavy) and, in the same test binary, off (today's even
// shedding, overload.EvenHeavy). The lines, over the 3 C phase,
// are goals (GOAL MISSED below them): with fairness the light clients'
// goodput ≥ 0.9 × what they offered and the total ≥ 0.9 C. The test fails
// below floors that hold in every run of this shared VM and that a broken
// fairness misses: the light clients' connects admitted ≥ 0.7 (the
// datapath's part: they are far below the fair share), their goodput share
// ≥ 0.5 and ≥ even shedding's + 0.1, above the heavy client's, and the
// total ≥ 0.6 × even shedding's (the controller's total shed is the same
// law; docs/measurements.md §18 has the figures). A run whose even
// shedding dropped under 30 % of the SYNs had no overload (a calibration
// that read C low) and fails as such. OLCD_OVERLOAD_FAIR_CLIENTS=open-retry
// makes the heavy client one that retransmits its SYNs (a 10 s connect
// timeout) instead of giving up after 1 s; the light clients stay open
// loop (the closed pool and keep-alive clients have no light clients
// beside them in the harness).
func TestOverloadFair(t *testing.T) {
	h := overloadHarness(t)
	c := h.Calibration.CapacityRPS
	fairSc, evenSc := overload.FairHeavy, overload.EvenHeavy
	switch k := overload.Clients(os.Getenv("OLCD_OVERLOAD_FAIR_CLIENTS")); k {
	case "", overload.ClientsOpenGiveUp:
	case overload.ClientsOpenRetry:
		fairSc.Clients, evenSc.Clients = k, k
		fairSc.Name, evenSc.Name = fairSc.Name+"-"+string(k), evenSc.Name+"-"+string(k)
	default:
		t.Fatalf("OLCD_OVERLOAD_FAIR_CLIENTS=%q: want %s or %s", k, overload.ClientsOpenGiveUp, overload.ClientsOpenRetry)
	}
	fair := runOnce(t, h, fairSc, overload.VariantEnforce)
	even := runOnce(t, h, evenSc, overload.VariantEnforce)

	type shares struct {
		light, lightConn, heavy, total float64
		p                              overload.PhaseResult
	}
	share := func(r *overload.RunResult, settled bool) shares {
		p := r.Phase("3x")
		if settled && p.Settled != nil {
			p = *p.Settled
		}
		s := shares{p: p, total: p.GoodputRPS / c}
		if p.LightOfferedRPS > 0 {
			s.light = p.LightGoodputRPS / p.LightOfferedRPS
		}
		if p.LightConnects > 0 {
			s.lightConn = float64(p.LightConnected) / float64(p.LightConnects)
		}
		if ho := p.OfferedRPS - p.LightOfferedRPS; ho > 0 {
			s.heavy = (p.GoodputRPS - p.LightGoodputRPS) / ho
		}
		return s
	}
	for _, r := range []*overload.RunResult{fair, even} {
		for _, settled := range []bool{false, true} {
			s := share(r, settled)
			p := s.p
			span := "whole 3x phase"
			if settled {
				span = fmt.Sprintf("3x from +%s", overload.SettleTime)
			}
			heavyConn := 0.0
			if hc := p.Connects - p.LightConnects; hc > 0 {
				heavyConn = float64(p.Connected-p.LightConnected) / float64(hc)
			}
			t.Logf("%s, %s: light goodput %.1f/s of %.1f/s offered (%.3f), connects admitted %.3f; heavy goodput %.0f/s of %.0f/s (%.3f, %.2f C), connects admitted %.3f; total %.0f/s = %.3f C, mean p %.2f, SYN drop %.1f %%, cpu %.2f, p99 %.0f ms",
				r.Scenario, span, p.LightGoodputRPS, p.LightOfferedRPS, s.light, s.lightConn, p.GoodputRPS-p.LightGoodputRPS, p.OfferedRPS-p.LightOfferedRPS, s.heavy, (p.GoodputRPS-p.LightGoodputRPS)/c, heavyConn,
				p.GoodputRPS, s.total, p.MeanP, 100*p.SYNDropRatio, p.CPUBusy, p.P99Ms)
		}
	}
	if cr, slow, ok := fair.CapacityAtRun("3x", h.Calibration); ok && cr < c {
		t.Logf("the backend needed %.1f %% more CPU per request than at the knee of the calibration: capacity during the fair run %.0f/s", 100*slow, cr)
	}
	f, e := share(fair, false), share(even, false)
	if e.light == 0 || f.light == 0 {
		t.Fatalf("no light clients' requests in the 3x phase (fair %.3f, even %.3f)", f.light, e.light)
	}
	// At 3 C even shedding drops about 2/3 of the SYNs. Far less means
	// the calibration read this VM's capacity low (another run's load
	// during it): the phase was no overload, and nothing tells fairness
	// from even shedding.
	if e.p.SYNDropRatio < 0.3 {
		t.Fatalf("even shedding dropped %.1f %% of the SYNs at \"3 C\" (mean p %.2f): no overload to share; the calibration's C = %.0f/s is below what the backend served (%.0f/s)",
			100*e.p.SYNDropRatio, e.p.MeanP, c, e.p.GoodputRPS)
	}
	goal(t, "fair shedding at 3 C: light clients' connects admitted", f.lightConn, 0.99, 0.7, true)
	goal(t, "fair shedding at 3 C: light clients' goodput as a share of what they offered", f.light, 0.9, 0.5, true)
	if f.light < e.light+0.1 {
		t.Errorf("fair shedding at 3 C: light clients' goodput share %.3f, even shedding's %.3f: want at least 0.1 more", f.light, e.light)
	}
	if f.heavy >= f.light {
		t.Errorf("fair shedding at 3 C: the heavy client's goodput share %.3f, the light clients' %.3f: want the heavy one cut first", f.heavy, f.light)
	}
	goal(t, "fair shedding at 3 C: total goodput, as a share of C", f.total, 0.9, 0, true)
	goal(t, "fair shedding at 3 C: total goodput over even shedding's", f.total/e.total, 1, 0.6, true)
	checkHealth(t, fair)
	checkHealth(t, even)
}
