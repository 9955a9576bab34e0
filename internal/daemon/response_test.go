package daemon

import "testing"

// TestTickReleasesPreviousStats: every tick but the first hands the
// previous read back to the datapath (its histograms are reused), and
// never the one status and the next tick still read.
func TestTickReleasesPreviousStats(t *testing.T) {
	d, dp := goldenDaemon(t)
	if dp.released != goldenTicks-1 {
		t.Errorf("released %d reads over %d ticks, want %d", dp.released, goldenTicks, goldenTicks-1)
	}
	if len(d.eng.prev.Response) == 0 || len(d.eng.last.stats.Response) == 0 {
		t.Fatal("the tick released the read it still holds")
	}
	before := dp.released
	d.tick()
	if dp.released != before+1 || len(d.eng.prev.Response) == 0 {
		t.Errorf("one more tick: released %d (want %d), held Response %d entries", dp.released, before+1, len(d.eng.prev.Response))
	}
}
