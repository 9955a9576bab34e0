package loader

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// fairSource is one source of a fairness test: an address and how many
// SYNs it sends per round.
type fairSource struct {
	addr   netip.Addr
	perRnd int
}

// fairRun loads a datapath with the draw seeded, one port (8080, fair or
// not) at drop probability p, the sketch's clock fixed (no epoch passes:
// the counts are the whole run's), and runs rounds of SYNs from srcs, each
// round in a seeded random order, on one CPU through h. Returns per source
// the SYNs sent and passed after the first warm rounds, and the datapath.
func fairRun(t *testing.T, h hook, fair bool, p float64, srcs []fairSource, rounds, warm int) (sent, passed []int, d *Datapath) {
	t.Helper()
	return fairRunPrefix(t, h, fair, 0, p, srcs, rounds, warm)
}

// fairRunPrefix is fairRun with the port's IPv6 prefix length (0: the
// default).
func fairRunPrefix(t *testing.T, h hook, fair bool, prefix6 int, p float64, srcs []fairSource, rounds, warm int) (sent, passed []int, d *Datapath) {
	t.Helper()
	d = loadTest(t, Config{StaleAfter: time.Hour, DrawSeed: 11})
	must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: p, Fair: fair, FairPrefix6: prefix6}}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	must(t, d.setFairClock(1<<40))
	var order []int
	for i, s := range srcs {
		for range s.perRnd {
			order = append(order, i)
		}
	}
	sent, passed = make([]int, len(srcs)), make([]int, len(srcs))
	rng := rand.New(rand.NewPCG(5, 6))
	var err error
	seq := uint32(0)
	onOneCPU(t, func() {
		for r := range rounds {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, i := range order {
				seq++
				seg := tcpSeg{uint16(10000 + seq%50000), 8080, seq, tcpSYN}.bytes()
				var frame []byte
				if srcs[i].addr.Is6() {
					frame = ipv6Frame(srcs[i].addr, server6, 6, 0, nil, seg)
				} else {
					frame = ipv4Frame(srcs[i].addr, server4, 6, 0, seg)
				}
				var ret uint32
				if ret, err = d.prog(h).Run(&ebpf.RunOptions{Data: frame}); err != nil {
					return
				}
				if r < warm {
					continue
				}
				sent[i]++
				if toVerdict(t, h, ret) == verdictPass {
					passed[i]++
				}
			}
		}
	})
	must(t, err)
	return sent, passed, d
}

func share(passed, sent []int, from, to int) float64 {
	var p, s int
	for i := from; i < to; i++ {
		p += passed[i]
		s += sent[i]
	}
	return float64(p) / float64(s)
}

// heavyMix is TestFairHeavySource's sources, per round: a heavy one at
// 250 SYNs (10 × the fair share at p = 0.5) and 50 light ones at 4.
func heavyMix() []fairSource {
	srcs := []fairSource{{netip.MustParseAddr("198.51.100.200"), 250}}
	for i := range 50 {
		srcs = append(srcs, fairSource{netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}), 4})
	}
	return srcs
}

// TestFairHeavySource is must-show 1 of issue 29: a heavy source at 10 ×
// the fair share and 50 light ones, p = 0.5. The fair share f is where the
// port keeps half its new work: 50 light sources at 0.16 f each (8 f) and
// the heavy one at 10 f offer 18 f, and keeping 9 f leaves the light
// sources all of theirs (8 f) and the heavy one f, a tenth. Per round:
// heavy 250 SYNs, light 4 each (f = 25). With the draw seeded the figures
// are exact; they are checked after 5 warm rounds (the fair share settles
// from "everyone passes" in a few hundred SYNs), and the port's total
// shed must still be p.
func TestFairHeavySource(t *testing.T) {
	const p, rounds, warm = 0.5, 40, 5
	srcs := heavyMix()
	for _, h := range hooks {
		t.Run(string(h), func(t *testing.T) {
			sent, passed, _ := fairRun(t, h, true, p, srcs, rounds, warm)
			heavy, light, total := share(passed, sent, 0, 1), share(passed, sent, 1, len(srcs)), share(passed, sent, 0, len(srcs))
			minLight := 1.0
			for i := 1; i < len(srcs); i++ {
				minLight = math.Min(minLight, float64(passed[i])/float64(sent[i]))
			}
			t.Logf("fair: heavy pass share %.4f, light %.4f (lowest single light source %.3f), total %.4f", heavy, light, minLight, total)
			if light < 0.9 {
				t.Errorf("light sources passed %.4f of their SYNs, want >= 0.9", light)
			}
			if heavy > 0.1 {
				t.Errorf("heavy source passed %.4f of its SYNs, want <= 0.1", heavy)
			}
			if math.Abs(total-(1-p)) > 0.02 {
				t.Errorf("port passed %.4f of its SYNs, want the controller's 1 - p = %.2f within 0.02", total, 1-p)
			}
			// Today's even shedding, same SYNs: every source pays alike.
			sent, passed, _ = fairRun(t, h, false, p, srcs, rounds, warm)
			t.Logf("even: heavy pass share %.4f, light %.4f, total %.4f",
				share(passed, sent, 0, 1), share(passed, sent, 1, len(srcs)), share(passed, sent, 0, len(srcs)))
		})
	}
}

// TestFairOnset: a port's shed falls behind p by at most the debt's bound
// while the fair share is still far from where it settles: over the first
// 450 SYNs of TestFairHeavySource's mix (one CPU) the port passes at most
// (1 - p)·450 + OLCD_FAIR_DEBT_MAX + 2 sd of the draw's scatter. Without
// the debt it passed 0.631 of them, 59 beyond 1 - p (0.66 from "the whole
// port"), as the step takes about ln(f₀/f) · 2^STEP_SHIFT / p arrivals to
// come down, and the onset admitted that much more.
func TestFairOnset(t *testing.T) {
	const p = 0.5
	for _, h := range hooks {
		t.Run(string(h), func(t *testing.T) {
			sent, passed, _ := fairRun(t, h, true, p, heavyMix(), 1, 0)
			got, n := float64(sum(passed)), float64(sum(sent))
			limit := (1-p)*n + float64(olcdOlcdFairGeometryOLCD_FAIR_DEBT_MAX) + 2*math.Sqrt(n*p*(1-p))
			t.Logf("the first %.0f SYNs of the first shed: passed %.0f (%.3f), 1 - p asks %.0f, at most %.0f", n, got, got/n, (1-p)*n, limit)
			if got > limit {
				t.Errorf("the first %.0f SYNs of the first shed: passed %.0f, want at most %.0f: (1 - p)·n, the debt's bound and 2 sd", n, got, limit)
			}
		})
	}
}

// TestFairEvenDemand: with even demand fairness is today's law: every
// source meets p. And a spoofed-source flood (every SYN from a new random
// address) is shed evenly at p, never more.
func TestFairEvenDemand(t *testing.T) {
	const p = 0.5
	var even []fairSource
	for i := range 50 {
		even = append(even, fairSource{netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}), 10})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var spoofed []fairSource
	for range 20000 {
		spoofed = append(spoofed, fairSource{netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}), 1})
	}
	tests := []struct {
		name         string
		srcs         []fairSource
		rounds, warm int
	}{
		{"even", even, 40, 5},
		{"spoofed", spoofed, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent, passed, _ := fairRun(t, hookXDP, true, p, tt.srcs, tt.rounds, tt.warm)
			total := share(passed, sent, 0, len(tt.srcs))
			_, evPassed, _ := fairRun(t, hookXDP, false, p, tt.srcs, tt.rounds, tt.warm)
			even := share(evPassed, sent, 0, len(tt.srcs))
			t.Logf("%s: pass share %.4f fair, %.4f even shedding (%d SYNs)", tt.name, total, even, sum(sent))
			// Binomial noise at n SYNs: 3 sigma.
			tol := 3 * math.Sqrt(p*(1-p)/float64(sum(sent)))
			if total < 1-p-tol || total > 1-p+0.02+tol {
				t.Errorf("pass share %.4f, want 1 - p = %.2f (not below, by more than 3 sigma = %.4f)", total, 1-p, tol)
			}
			if tt.name == "even" {
				lo := 1.0
				for i := range tt.srcs {
					lo = math.Min(lo, float64(passed[i])/float64(sent[i]))
				}
				// 350 SYNs each: 3 sigma is 0.08.
				if lo < 1-p-0.1 {
					t.Errorf("a source of even demand passed %.3f, want about 1 - p = %.2f", lo, 1-p)
				}
			}
		})
	}
}

func sum(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}

// TestFairMemory states the sketch's memory: fixed by its width, the same
// for 1 M distinct sources as for one (the kernel's accounting, checked by
// TestMapMemory, per CPU).
func TestFairMemory(t *testing.T) {
	for _, ncpu := range []int{1, 2, 64} {
		us, err := estimateMapMemory(Config{}, ncpu, 0, 0)
		must(t, err)
		for _, u := range us {
			if u.name == "olcd_fair_cm" {
				t.Logf("sketch at %d CPUs: %d KiB for any number of sources (1 M or more)", ncpu, u.bytes>>10)
				if want := uint64(ncpu) * 2 * DefaultFairWidth * 4; u.bytes < want || u.bytes > want+want/4+4096 {
					t.Errorf("sketch %d bytes, want about %d", u.bytes, want)
				}
			}
		}
	}
}

// TestFairCaps: a port cap and a source prefix cap, at a fixed clock, admit
// their burst and no more; what they refuse is counted capped, of dropped;
// p = 0 does not lift a cap.
func TestFairCaps(t *testing.T) {
	d := loadTest(t, Config{StaleAfter: time.Hour, DrawSeed: 3})
	heavy := netip.MustParseAddr("198.51.100.7")
	must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop,
		Caps: PortCaps{Rate: 1000, Burst: 20}}}))
	must(t, d.SetSourceCaps(map[olc.PortKey][]SourceCap{tcp8080: {{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Rate: 10, Burst: 5}}}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	// Within one jiffy the clock stands still: only the bursts pass.
	var heavyPass, otherPass int
	var err error
	onOneCPU(t, func() {
		for i := range 40 {
			for _, src := range []netip.Addr{heavy, client4} {
				frame := ipv4Frame(src, server4, 6, 0, tcpSeg{uint16(20000 + i), 8080, uint32(i + 1), tcpSYN}.bytes())
				var ret uint32
				if ret, err = d.prog(hookXDP).Run(&ebpf.RunOptions{Data: frame}); err != nil {
					return
				}
				if ret == xdpPass && src == heavy {
					heavyPass++
				} else if ret == xdpPass {
					otherPass++
				}
			}
		}
	})
	must(t, err)
	// The jiffy may turn during the run: a 1000/s bucket then gains a
	// few tokens, a 10/s one none in 10 ms.
	if heavyPass < 5 || heavyPass > 6 {
		t.Errorf("capped prefix passed %d of 40, want its burst of 5 (6 if the clock turned)", heavyPass)
	}
	if otherPass < 15 || otherPass > 20 {
		t.Errorf("other source passed %d of 40, want the port's burst of 20 less the prefix's 5 (+ a jiffy's tokens)", otherPass)
	}
	c := stats(t, d).Ports[tcp8080]
	if c.Capped != c.Dropped || c.Capped != uint64(80-heavyPass-otherPass) {
		t.Errorf("capped %d, dropped %d, want both %d", c.Capped, c.Dropped, 80-heavyPass-otherPass)
	}
	t.Logf("caps: prefix passed %d, others %d, capped %d", heavyPass, otherPass, c.Capped)
}

// TestFairCapAfterDraw: a cap takes its tokens from what the adaptive law's
// draw passes, not from every arrival, so the stricter of the two wins. At
// p = 0.5 (seeded draw, one CPU, the clock standing still within a jiffy)
// 40 SYNs meet the draw; a port bucket of 30 tokens, more than the draw
// passes, refuses none and the draw's verdicts are those of the port
// without a cap; one of 8 tokens, fewer than the draw passes, admits
// exactly 8 and refuses (capped) the rest of what the draw passed. A cap
// asked before the draw would spend its tokens on arrivals the draw then
// sheds: 30 tokens for 40 arrivals refuse the last 10 whatever p does, 8
// tokens admit about 4.
func TestFairCapAfterDraw(t *testing.T) {
	const n, p = 40, 0.5
	run := func(caps PortCaps) (passed []bool, c Counters) {
		d := loadTest(t, Config{StaleAfter: time.Hour, DrawSeed: 3})
		must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: p, Caps: caps}}))
		must(t, d.SetMode(olc.ModeEnforce))
		must(t, d.Heartbeat())
		var err error
		onOneCPU(t, func() {
			for i := range n {
				frame := ipv4Frame(client4, server4, 6, 0, tcpSeg{uint16(20000 + i), 8080, uint32(i + 1), tcpSYN}.bytes())
				var ret uint32
				if ret, err = d.prog(hookXDP).Run(&ebpf.RunOptions{Data: frame}); err != nil {
					return
				}
				passed = append(passed, ret == xdpPass)
			}
		})
		must(t, err)
		return passed, stats(t, d).Ports[tcp8080]
	}
	count := func(b []bool) (k int) {
		for _, x := range b {
			if x {
				k++
			}
		}
		return k
	}
	draw, _ := run(PortCaps{})
	byDraw := count(draw)
	if byDraw < 12 || byDraw > 28 {
		t.Fatalf("the draw at p = %.1f passed %d of %d", p, byDraw, n)
	}
	// A 1/s bucket gains no token within the test's few milliseconds,
	// whether or not the jiffy turns.
	wide, cw := run(PortCaps{Rate: 1, Burst: 30})
	if !slices.Equal(wide, draw) || cw.Capped != 0 {
		t.Errorf("a 30-token cap above the draw's %d passes: %d passed, capped %d; want the draw's verdicts and none capped", byDraw, count(wide), cw.Capped)
	}
	narrow, cn := run(PortCaps{Rate: 1, Burst: 8})
	if got := count(narrow); got != 8 || cn.Capped != uint64(byDraw-8) || cn.Dropped != uint64(n-8) {
		t.Errorf("an 8-token cap under the draw's %d passes: %d passed, capped %d, dropped %d; want 8, %d, %d", byDraw, got, cn.Capped, cn.Dropped, byDraw-8, n-8)
	}
	for i, ok := range narrow {
		if ok && !draw[i] {
			t.Errorf("SYN %d passed the cap but not the draw", i)
		}
	}
	t.Logf("p = %.1f: the draw passed %d of %d; a 30-token cap capped %d, an 8-token cap passed %d and capped %d", p, byDraw, n, cw.Capped, count(narrow), cn.Capped)
}

// TestFairIPv6Prefix: IPv6 sources counted by the port's prefix length. The
// heavy load of TestFairHeavySource (250 SYNs a round) comes from 10
// addresses of one /48, 25 each. Counted by /48 they are one source at 10
// times the fair share (25): it keeps 0.1. Counted by /64 (the default)
// they are 10 of 60 sources, all above the max-min share, which is then
// 225 / 60 = 3.75 a round for everyone: the 10 keep 3.75 / 25 = 0.15 each,
// the light ones 3.75 / 4 = 0.94.
func TestFairIPv6Prefix(t *testing.T) {
	const p, rounds, warm = 0.5, 40, 5
	var srcs []fairSource
	for i := range 10 {
		srcs = append(srcs, fairSource{netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x77, 0, byte(i), 15: 1}), 25})
	}
	for i := range 50 {
		srcs = append(srcs, fairSource{netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 1, byte(i), 15: 1}), 4})
	}
	for _, tt := range []struct {
		prefix6  int
		heavyMax float64 // the /48's pass share at most
	}{{48, 0.1}, {0, 0.17}} {
		t.Run(fmt.Sprintf("prefix6=%d", tt.prefix6), func(t *testing.T) {
			sent, passed, _ := fairRunPrefix(t, hookXDP, true, tt.prefix6, p, srcs, rounds, warm)
			heavy, light := share(passed, sent, 0, 10), share(passed, sent, 10, len(srcs))
			t.Logf("/48 of 10 addresses passed %.4f, light sources %.4f", heavy, light)
			if tt.prefix6 == 48 && (heavy > tt.heavyMax || light < 0.9) {
				t.Errorf("by /48: the /48 passed %.4f (want <= %.2f), light %.4f (want >= 0.9)", heavy, tt.heavyMax, light)
			}
			if tt.prefix6 == 0 && (math.Abs(heavy-0.15) > 0.02 || math.Abs(light-0.9375) > 0.03) {
				t.Errorf("by /64: the /48's addresses passed %.4f, light %.4f, want the max-min 0.15 and 0.94", heavy, light)
			}
		})
	}
}
