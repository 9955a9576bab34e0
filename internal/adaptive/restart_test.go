package adaptive_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/plant"
)

// TestRestartKeepsLaw is issue 27's restart on the plant: at 3 C the
// daemon restarts at +25 s (15 s into the overload, as TestOverloadRestart)
// and is gone for 1 s, the datapath holding its p; the new controller
// restores the old one's State. The ticks after it must decide what the
// uninterrupted controller decides on the same plant (the p a first
// attempt meets within 0.1 of it from the second tick on), and the goodput of the 10 s after the restart
// must be ≥ 0.95 × the uninterrupted run's over the same 10 s.
func TestRestartKeepsLaw(t *testing.T) {
	for _, k := range []plant.ClientKind{plant.OpenGiveup, plant.OpenRetry, plant.ClosedPool} {
		for seed := uint64(1); seed <= 3; seed++ {
			name := fmt.Sprintf("cpu-%s-3x/seed%d", k, seed)
			sc, _, err := plant.ParseScenario(fmt.Sprintf("cpu-%s-3x", k), seed)
			if err != nil {
				t.Fatal(err)
			}
			const at, gap, span = 25.0, 1.0, 10.0
			ref := map[float64]float64{}
			// The ticks' decisions (a window's ends between ticks).
			tick := func(d plant.DriveTick) bool { return !strings.Contains(d.Decision.Reason, "between ticks") }
			base := drive(t, plantController(t, nil), sc, func(d plant.DriveTick) {
				if tick(d) {
					ref[d.T] = d.Port.FirstP()
				}
			})
			var log strings.Builder
			var worst float64
			res, err := plant.DriveRestart(plantController(t, nil), sc, plantKey, 5, plant.Restart{At: at, Gap: gap}, func(d plant.DriveTick) {
				if d.T > at-1 && d.T <= at+gap+3 {
					fmt.Fprintf(&log, "  t %.2f first attempts' p %.3f (uninterrupted on its own plant %.3f) %s\n", d.T, d.Port.FirstP(), ref[d.T], d.Decision.Reason)
				}
				if r, ok := ref[d.T]; ok && tick(d) && d.T > at+gap+0.5 && d.T <= at+gap+3 {
					if x := d.Port.FirstP() - r; x > worst || -x > worst {
						worst = max(x, -x)
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			after, was := res.Goodput(at, at+span), base.Goodput(at, at+span)
			t.Logf("%s: goodput in the %g s after the restart %.0f/s, uninterrupted %.0f/s: %.3f; p off by %.3f at most", name, span, after, was, after/was, worst)
			if after < 0.95*was || worst > 0.1 {
				t.Errorf("%s: goodput after the restart %.0f/s, %.3f × the uninterrupted run's %.0f/s (want ≥ 0.95)\n%s", name, after, after/was, was, log.String())
			}
		}
	}
}
