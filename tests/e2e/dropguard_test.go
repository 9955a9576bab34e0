package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	dto "github.com/prometheus/client_model/go"

	"github.com/olcd/olcd/internal/testutil"
)

// Drop reasons: every packet the datapath does not pass is counted under
// exactly one (docs/datapath.md, "Drop reasons"). A malformed packet is
// passed (olcd_unclassified_packets_total), never a drop.
const (
	reasonShedSYN  = "shed_syn"           // a new TCP connection's SYN dropped (drop action, or over the reject rate limit)
	reasonRejected = "rejected_syn"       // a shed SYN answered with RST|ACK (reject action)
	reasonShedUDP  = "shed_udp"           // a UDP request dropped
	reasonGate     = "request_gate_reset" // a request start on an idle keep-alive connection reset both ways
)

// dropReasons sums the node's drop counters by reason from a scrape.
func dropReasons(mfs map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	sum := func(name string, each func(proto string, v float64)) {
		mf, ok := mfs[name]
		if !ok {
			return
		}
		for _, m := range mf.GetMetric() {
			proto := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "proto" {
					proto = lp.GetValue()
				}
			}
			each(proto, m.GetCounter().GetValue())
		}
	}
	sum("olcd_port_dropped_total", func(proto string, v float64) {
		if proto == "udp" {
			out[reasonShedUDP] += v
		} else {
			out[reasonShedSYN] += v
		}
	})
	// Rejected SYNs are in dropped too: one reason each.
	sum("olcd_port_rejected_total", func(_ string, v float64) {
		out[reasonRejected] += v
		out[reasonShedSYN] -= v
	})
	sum("olcd_port_request_resets_total", func(_ string, v float64) { out[reasonGate] += v })
	return out
}

// dropGuard watches one daemon's drop counters while it runs and checks at
// the end of the test that every drop was for an allowed reason, and that
// none happened while the controller was not shedding: over three status
// reads in a row, each a tick apart, with every port's drop probability 0
// and no ceiling on requests in flight,
// the counters did not move between the last two (the first pair lets a
// SYN drawn under the previous p be counted).
type dropGuard struct {
	allowed map[string]bool
	stop    chan struct{}
	done    chan struct{}

	mu         sync.Mutex
	last       map[string]float64
	violations []string
	expectBad  bool // a test that makes a wrong drop on purpose
}

// guardDrops starts d's drop guard; the allowed reasons are those of the
// drop action (shed SYNs and UDP requests) plus extra.
func (d *olcd) guardDrops(t *testing.T, extra ...string) *dropGuard {
	g := &dropGuard{allowed: map[string]bool{reasonShedSYN: true, reasonShedUDP: true}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, r := range extra {
		g.allowed[r] = true
	}
	go g.watch(d)
	t.Cleanup(func() {
		close(g.stop)
		<-g.done
		g.mu.Lock()
		defer g.mu.Unlock()
		for r, v := range g.last {
			if v > 0 && !g.allowed[r] {
				g.violations = append(g.violations, fmt.Sprintf("%.0f drops for reason %s, not allowed here", v, r))
			}
		}
		switch {
		case g.expectBad && len(g.violations) == 0:
			t.Errorf("drop guard: a wrong drop was made on purpose and the guard did not see it")
		case g.expectBad:
			t.Logf("drop guard caught the wrong drop made on purpose: %s", strings.Join(g.violations, "; "))
		case len(g.violations) > 0:
			t.Errorf("drop guard: %s", strings.Join(g.violations, "; "))
		}
	})
	return g
}

// watch samples status and metrics every tick until stop.
func (g *dropGuard) watch(d *olcd) {
	defer close(g.done)
	type sample struct {
		ticks  uint64
		zero   bool // every port's p is 0 and none holds a ceiling
		drops  float64
		byWhat map[string]float64
	}
	var chain []sample
	for {
		select {
		case <-g.stop:
			return
		case <-time.After(interval):
		}
		st, err := d.status()
		if err != nil {
			chain = nil // stopped or restarting: a new chain
			continue
		}
		mfs, err := scrapeQuiet(d)
		if err != nil {
			chain = nil
			continue
		}
		s := sample{ticks: st.Ticks, zero: true, byWhat: dropReasons(mfs)}
		for _, p := range st.Ports {
			// The law's ceiling on requests in flight refuses at p = 0
			// too, while the status shows it.
			if p.DropProbability != 0 || p.InFlightCeiling != nil {
				s.zero = false
			}
		}
		for _, v := range s.byWhat {
			s.drops += v
		}
		g.mu.Lock()
		g.last = s.byWhat
		if n := len(chain); n > 0 && (s.ticks <= chain[n-1].ticks || s.drops < chain[n-1].drops) {
			chain = nil // no tick since, or a new process's counters
		}
		chain = append(chain, s)
		if n := len(chain); n >= 3 && chain[n-3].zero && chain[n-2].zero && chain[n-1].zero && chain[n-1].drops > chain[n-2].drops {
			g.violations = append(g.violations, fmt.Sprintf("%.0f drops between ticks %d and %d while every port's drop probability was 0 (%v)",
				chain[n-1].drops-chain[n-2].drops, chain[n-2].ticks, chain[n-1].ticks, s.byWhat))
		}
		if len(chain) > 3 {
			chain = chain[1:]
		}
		g.mu.Unlock()
	}
}

// scrapeQuiet is scrape without failing a test: the guard runs on its own
// goroutine and a daemon that is restarting does not answer.
func scrapeQuiet(d *olcd) (mfs map[string]*dto.MetricFamily, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return scrapeCtx(ctx, d)
}

// TestDropGuardCatchesWrongDrop makes the guard fail on purpose: the
// controller never sheds (threshold never reached), and the test writes a
// drop probability of 1 into the pinned policies map behind its back, a
// drop no reason allows. The guard must report it (the test then passes
// and logs what it caught); a guard that stays silent fails the test.
func TestDropGuardCatchesWrongDrop(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	env.serve(t)
	d := startDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever})
	d.guard.mu.Lock()
	d.guard.expectBad = true
	d.guard.mu.Unlock()
	env.expectAllOK(t, "not shedding", 5)
	st := d.nextTick(t, d.nextTick(t, d.nextTick(t, d.mustStatus(t))))
	if p := portP(st); p != 0 {
		t.Fatalf("port p = %v, want 0 (the controller must not shed here)", p)
	}
	writePinnedP(t, d.pinDir, ^uint32(0)) // the wrong drop
	env.expectAllDropped(t, "after the wrong write", 5)
	d.nextTick(t, d.nextTick(t, d.nextTick(t, d.mustStatus(t))))
	testutil.Eventually(t, 5*time.Second, interval, func() (bool, error) {
		d.guard.mu.Lock()
		defer d.guard.mu.Unlock()
		return len(d.guard.violations) > 0, nil
	}, "the drop guard reports the wrong drop")
	writePinnedP(t, d.pinDir, 0)
}

// writePinnedP sets the drop probability (fixed point) of every protected
// port in the pinned policies map, as no olcd would.
func writePinnedP(t *testing.T, pinDir string, p uint32) {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, "olcd_policies"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var k uint32
	var v []byte
	var keys []uint32
	var vals [][]byte
	for it := m.Iterate(); it.Next(&k, &v); {
		if len(v) >= 7 && v[6]&1 != 0 && v[6]&2 == 0 {
			keys, vals = append(keys, k), append(vals, slices.Clone(v))
		}
	}
	if len(keys) == 0 {
		t.Fatal("no protected port in the pinned policies map")
	}
	for i, k := range keys {
		binary.LittleEndian.PutUint32(vals[i][0:4], p)
		if err := m.Update(k, vals[i], ebpf.UpdateExist); err != nil {
			t.Fatal(err)
		}
	}
}
