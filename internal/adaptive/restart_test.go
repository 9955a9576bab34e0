package adaptive_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/plant"
)

// TestRestartKeepsLaw is issue 27's restart on the plant: at 3 C the
// daemon restarts at +25 s (15 s into the overload, as TestOverloadRestart)
// and is gone for 1 s, the datapath holding its p; the new controller
// restores the old one's State. The ticks after it must decide what the
// uninterrupted controller decides on its own plant (the p a first attempt
// meets off by 0.05 at most on the mean of the ticks from the second on),
// and the goodput of the 10 s after the restart must be ≥ 0.95 × the
// uninterrupted run's over the same 10 s on the mean of the 3 seeds, ≥ 0.9
// on each: once the p differs the two plants draw apart, and a closed
// pool's goodput over 10 s differs by up to 5 % between two draws whatever
// the restart (a restart with no gap reads 0.949 on one seed).
func TestRestartKeepsLaw(t *testing.T) {
	for _, k := range []plant.ClientKind{plant.OpenGiveup, plant.OpenRetry, plant.ClosedPool} {
		var ratios float64
		for seed := uint64(1); seed <= 3; seed++ {
			name := fmt.Sprintf("cpu-%s-3x/seed%d", k, seed)
			sc, _, err := plant.ParseScenario(fmt.Sprintf("cpu-%s-3x", k), seed)
			if err != nil {
				t.Fatal(err)
			}
			const at, gap, span = 25.0, 1.0, 10.0
			ref := map[float64]float64{}
			tick := func(d plant.DriveTick) bool { return !d.Window }
			base := drive(t, plantController(t, nil), sc, func(d plant.DriveTick) {
				if tick(d) {
					ref[d.T] = adaptive.FirstP(d.Port)
				}
			})
			var log strings.Builder
			var off, n float64
			res, err := plant.DriveRestart(plantController(t, nil), sc, plantKey, 5, plant.Restart{At: at, Gap: gap}, func(d plant.DriveTick) {
				if d.T > at-1 && d.T <= at+gap+3 {
					fmt.Fprintf(&log, "  t %.2f first attempts' p %.3f (uninterrupted on its own plant %.3f) %s\n", d.T, adaptive.FirstP(d.Port), ref[d.T], d.Decision.Reason)
				}
				if r, ok := ref[d.T]; ok && tick(d) && d.T > at+gap+0.5 && d.T <= at+gap+3 {
					off, n = off+math.Abs(adaptive.FirstP(d.Port)-r), n+1
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			after, was := res.Goodput(at, at+span), base.Goodput(at, at+span)
			ratios += after / was / 3
			t.Logf("%s: goodput in the %g s after the restart %.0f/s, uninterrupted %.0f/s: %.3f; p off by %.3f on the mean", name, span, after, was, after/was, off/n)
			if after < 0.9*was || off/n > 0.05 {
				t.Errorf("%s: goodput after the restart %.0f/s, %.3f × the uninterrupted run's %.0f/s (want ≥ 0.9); p off by %.3f on the mean (want ≤ 0.05)\n%s",
					name, after, after/was, was, off/n, log.String())
			}
		}
		if ratios < 0.95 {
			t.Errorf("cpu-%s-3x: goodput after the restart %.3f × the uninterrupted run's on the mean of the seeds, want ≥ 0.95", k, ratios)
		}
	}
}
