package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/testutil"
)

// TestDaemonEndToEnd drives one `olcd run` through its life: attach, live
// status, a live threshold change, a refused reload (SIGHUP and file change)
// and a good one, observe mode, the kill switch and back, and a clean stop.
// Every count is checked against the connections the test made. Each step
// is a sub-test checking one thing; a step builds on the state the earlier
// ones left, so a step that stops (Fatal) ends the run.
func TestDaemonEndToEnd(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	env.serve(t)
	cfg := daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever}
	d := startDaemon(t, env, cfg)
	top := t // what outlives a step (the CPU burner) is cleaned up with the test

	var (
		tcProg     ebpf.ProgramID // the attached ingress program, gone after SIGTERM
		stopBurn   func()
		fail0, ok0 float64 // reload counters before the reload steps
	)
	steps := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"status and kernel agree on the tcx attachment", func(t *testing.T) {
			st := d.mustStatus(t)
			want := api.InterfaceStatus{Name: env.NodeIf, Hook: "tc", Mode: "tcx", Egress: "tcx"}
			if len(st.Interfaces) != 1 || st.Interfaces[0] != want {
				t.Fatalf("status interfaces = %+v, want [%+v]", st.Interfaces, want)
			}
			progs := env.attachedProgs(t)
			if len(progs) != 1 || progs[0].Hook != "tcx" || progs[0].Name != "olcd_tc" {
				t.Fatalf("kernel lists %+v on %s, want one tcx program olcd_tc", progs, env.NodeIf)
			}
			tcProg = progs[0].ID
			if eg := env.egressProgs(t); len(eg) != 1 || eg[0].Name != "olcd_tc_egress" {
				t.Fatalf("kernel lists %+v at egress of %s, want one tcx program olcd_tc_egress (response timing)", eg, env.NodeIf)
			}
		}},
		{"status table names interface, hook, port, signal and mode", func(t *testing.T) {
			human := d.mustCLI(t, "status")
			for _, s := range []string{env.NodeIf, "tcx", fmt.Sprintf("tcp/%d", serverPort), "cpu_busy", "ENFORCE"} {
				if !strings.Contains(human, s) {
					t.Errorf("olcd status (table) does not mention %q:\n%s", s, human)
				}
			}
		}},
		{"ticks advance and the status is live", func(t *testing.T) {
			first := d.mustStatus(t)
			st := d.pollStatus(t, "three more ticks", 5*time.Second, func(s *api.Status) bool { return s.Ticks >= first.Ticks+3 })
			if !st.UpdatedAt.After(first.UpdatedAt) {
				t.Errorf("updated_at did not advance over 3 ticks: %v then %v", first.UpdatedAt, st.UpdatedAt)
			}
			if age := time.Since(st.UpdatedAt); age > 5*time.Second || age < -time.Second {
				t.Errorf("last tick %v ago: not live", age)
			}
		}},
		{"cpu_busy is read and below the threshold nothing is shed", func(t *testing.T) {
			st := d.mustStatus(t)
			cb := cpuBusy(st)
			if cb == nil || !cb.Available || cb.Value == nil || cb.Threshold == nil || *cb.Threshold != thresholdNever {
				t.Fatalf("cpu_busy in status = %+v, want available with threshold %v", cb, thresholdNever)
			}
			if st.Overload.Active || portP(st) != 0 {
				t.Fatalf("overloaded at threshold %v, which cpu_busy cannot exceed: %s", thresholdNever, summary(st))
			}
			if ps := port(t, st); ps.Mode != "enforce" || ps.Class != "normal" || ps.Source != "config" {
				t.Fatalf("port status = %+v, want enforce/normal/config", ps)
			}
		}},
		{"status counters follow accepted connections exactly", func(t *testing.T) {
			before := port(t, d.mustStatus(t)).Totals
			const nOK = 20
			env.expectAllOK(t, "below the threshold", nOK)
			st := d.pollStatus(t, "the 20 connections counted", 5*time.Second, func(s *api.Status) bool {
				return port(t, s).Totals.NewConns >= before.NewConns+nOK
			})
			tot := port(t, st).Totals
			if got := (api.PortTotals{
				NewConns: tot.NewConns - before.NewConns, Passed: tot.Passed - before.Passed, Dropped: tot.Dropped - before.Dropped,
				SYNRetransmits: tot.SYNRetransmits - before.SYNRetransmits, WouldDrop: tot.WouldDrop - before.WouldDrop,
			}); got != (api.PortTotals{NewConns: nOK, Passed: nOK}) {
				t.Fatalf("status counters moved by %+v for %d accepted connections, want new_conns = passed = %d", got, nOK, nOK)
			}
		}},
		// PATCH /v1/config via `olcd set threshold`: the next tick uses the
		// new threshold, and the decision follows it.
		{"a live threshold applies at the next tick", func(t *testing.T) {
			stopBurn = burnCPU(top)
			d.pollStatus(t, "cpu_busy above 0.1 with one CPU burning", 10*time.Second, func(s *api.Status) bool {
				c := cpuBusy(s)
				return c != nil && c.Value != nil && *c.Value > 0.1
			})
			out := d.mustCLI(t, "set", "threshold", "cpu_busy", fmt.Sprint(thresholdAlways))
			if !strings.HasPrefix(out, "ok:") {
				t.Fatalf("olcd set threshold printed %q", out)
			}
			st := d.mustStatus(t)
			if len(st.Overrides) != 1 || st.Overrides[0].Kind != "patch" || !strings.Contains(st.Overrides[0].Value, "cpu_busy") {
				t.Fatalf("overrides after the patch = %+v, want one patch of cpu_busy", st.Overrides)
			}
			st = d.nextTick(t, st)
			cb := cpuBusy(st)
			if cb == nil || cb.Threshold == nil || *cb.Threshold != thresholdAlways || cb.Value == nil || cb.Pressure == nil {
				t.Fatalf("first tick after the patch: cpu_busy = %+v, want threshold %v", cb, thresholdAlways)
			}
			if !approx(*cb.Pressure, *cb.Value/thresholdAlways) {
				t.Errorf("cpu_busy pressure %v, want value/threshold = %v", *cb.Pressure, *cb.Value/thresholdAlways)
			}
			if !st.Overload.Active || portP(st) <= 0 {
				t.Fatalf("first tick after the patch is not shedding: %s", summary(st))
			}
			d.waitShedding(t)
		}},
		// Counters read from the maps at scrape time match the SYNs sent.
		// At p = 1 every SYN is dropped; retransmits are counted both as new
		// connections and as retransmits, so unique = new − retransmits.
		{"metrics count every dropped SYN and agree with the status", func(t *testing.T) {
			m0 := scrapePort(t, d.scrape(t))
			if m0.P != 1 {
				t.Fatalf("olcd_port_drop_probability_ratio = %v while status shows p = 1", m0.P)
			}
			const nDrop = 30
			env.expectAllDropped(t, "p = 1 in enforce mode", nDrop)
			m1 := scrapePort(t, d.scrape(t))
			dm := m1.sub(m0)
			if dm.New-dm.Retransmits != nDrop || dm.Dropped != dm.New || dm.Passed != 0 || dm.WouldDrop != 0 {
				t.Fatalf("metrics moved by %+v for %d dropped connection attempts: want new − retransmits = %d, dropped = new, passed = 0",
					dm, nDrop, nDrop)
			}
			st := d.nextTick(t, d.mustStatus(t))
			if got := port(t, st).Totals; float64(got.Dropped) != m1.Dropped || float64(got.NewConns) != m1.New {
				t.Fatalf("status totals %+v disagree with the scrape %+v", got, m1)
			}
		}},
		// The file olcd reads is a symlink whose target lives in another
		// directory: the watch sees the target replaced and refuses it, and
		// so does the SIGHUP sent at once: the failure counter moves by two.
		{"a SIGHUP with a broken file is refused and the running config stays", func(t *testing.T) {
			mfs := d.scrape(t)
			fail0 = mustMetric(t, mfs, "olcd_config_reload_failures_total")
			ok0 = mustMetric(t, mfs, "olcd_config_reloads_total")
			writeFileAtomic(t, d.realCfg, []byte("mode: sometimes\ninterval: 5ms\n"))
			if err := d.signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			d.pollMetric(t, "olcd_config_reload_failures_total", fail0+2)
			st := d.nextTick(t, d.mustStatus(t))
			if d.exited() {
				t.Fatalf("olcd exited after SIGHUP with a broken config: %v", d.err)
			}
			cb := cpuBusy(st)
			if st.Mode != "enforce" || len(st.Overrides) != 1 || cb == nil || cb.Threshold == nil || *cb.Threshold != thresholdAlways || portP(st) != 1 {
				t.Fatalf("after the refused reload the running config changed: %s, overrides %+v", summary(st), st.Overrides)
			}
			if v := mustMetric(t, d.scrape(t), "olcd_config_reloads_total"); v != ok0 {
				t.Fatalf("olcd_config_reloads_total = %v after a refused reload, want %v", v, ok0)
			}
			env.expectAllDropped(t, "after the refused reload", 5)
		}},
		{"the refused reload is logged with every problem", func(t *testing.T) {
			failed := records(d.decisionRecords(t), "config_reload_failed")
			triggers := map[any]bool{}
			for _, f := range failed {
				triggers[f["trigger"]] = true
				if e, _ := f["err"].(string); !strings.Contains(e, "mode") || !strings.Contains(e, "interval") {
					t.Errorf("refused reload logged as %q: want both problems (mode, interval) listed", e)
				}
			}
			if len(failed) != 2 || !triggers["SIGHUP"] || !triggers["file change"] {
				t.Fatalf("decision log config_reload_failed records = %v, want one with trigger SIGHUP and one with \"file change\"", failed)
			}
		}},
		// A new symlink renamed over the config path is a file change.
		{"the broken file through the watched path is refused", func(t *testing.T) {
			tmpLink := d.cfgPath + ".new"
			if err := os.Symlink("real/olcd.yaml", tmpLink); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmpLink, d.cfgPath); err != nil {
				t.Fatal(err)
			}
			d.pollMetric(t, "olcd_config_reload_failures_total", fail0+3)
			failed := records(d.decisionRecords(t), "config_reload_failed")
			if len(failed) != 3 || failed[2]["trigger"] != "file change" {
				t.Fatalf("decision log config_reload_failed records = %v, want a third with trigger \"file change\"", failed)
			}
		}},
		// The file's own threshold now keeps the node overloaded.
		{"a good file reloads and drops the live override", func(t *testing.T) {
			good := cfg
			good.Threshold = thresholdAlways
			writeFileAtomic(t, d.realCfg, renderConfig(t, startedConfig(d, good)))
			if err := d.signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			// The SIGHUP and the watch each reload it (the later one finds
			// it in force and applies nothing).
			d.pollMetric(t, "olcd_config_reloads_total", ok0+2)
			st := d.nextTick(t, d.mustStatus(t))
			if len(st.Overrides) != 0 {
				t.Fatalf("live overrides after a reload = %+v, want none", st.Overrides)
			}
			if v := mustMetric(t, d.scrape(t), "olcd_config_reload_failures_total"); v != fail0+3 {
				t.Fatalf("olcd_config_reload_failures_total = %v, want %v: a good reload or a duplicate event counted as failure", v, fail0+3)
			}
			d.waitShedding(t)
		}},
		{"observe mode drops nothing and counts every SYN as would-drop", func(t *testing.T) {
			d.mustCLI(t, "set", "mode", "observe")
			st := d.nextTick(t, d.mustStatus(t))
			if st.Mode != "observe" || port(t, st).Mode != "observe" || portP(st) != 1 {
				t.Fatalf("after set mode observe: %s, port mode %q", summary(st), port(t, st).Mode)
			}
			m0 := scrapePort(t, d.scrape(t))
			const nObserve = 10
			env.expectAllOK(t, "observe mode at p = 1", nObserve)
			dm := scrapePort(t, d.scrape(t)).sub(m0)
			if dm.New != nObserve || dm.WouldDrop != nObserve || dm.Passed != nObserve || dm.Dropped != 0 {
				t.Fatalf("observe mode: metrics moved by %+v for %d connections, want new = would_drop = passed = %d, dropped = 0",
					dm, nObserve, nObserve)
			}
		}},
		// From enforce at p = 1, `set mode off` stops drops at once (the
		// datapath mode is written before the command returns) and the next
		// tick publishes p = 0.
		{"the kill switch stops drops at once", func(t *testing.T) {
			d.mustCLI(t, "set", "mode", "enforce")
			d.waitShedding(t)
			env.expectAllDropped(t, "enforce again before the kill switch", 5)
			m0 := scrapePort(t, d.scrape(t))
			d.mustCLI(t, "set", "mode", "off")
			const nOff = 20
			env.expectAllOK(t, "right after set mode off", nOff)
			st := d.nextTick(t, d.mustStatus(t))
			if st.Mode != "off" || portP(st) != 0 || port(t, st).Mode != "off" {
				t.Fatalf("first tick after set mode off: %s, port mode %q; want mode off and p = 0", summary(st), port(t, st).Mode)
			}
			mfs := d.scrape(t)
			m1 := scrapePort(t, mfs)
			if dm := m1.sub(m0); dm.Dropped != 0 || dm.New != nOff || m1.P != 0 {
				t.Fatalf("kill switch: metrics moved by %+v for %d connections, want dropped 0, new %d, p 0", dm, nOff, nOff)
			}
			if v := mustMetric(t, mfs, "olcd_mode", "mode", "off"); v != 1 {
				t.Errorf("olcd_mode{mode=\"off\"} = %v, want 1", v)
			}
			env.expectAllOK(t, "a tick after set mode off", nOff)
			if m2 := scrapePort(t, d.scrape(t)); m2.Dropped != m1.Dropped || m2.New != m1.New+nOff {
				t.Fatalf("drop counter moved in mode off: %+v then %+v", m1, m2)
			}
		}},
		// Nothing the controller computed while off may reach the datapath.
		// With 10 activation ticks (2 s) shedding cannot start before then,
		// so the connects made right after the switch must pass; then
		// shedding resumes.
		{"leaving the kill switch restarts the controller from p = 0", func(t *testing.T) {
			patch := d.dir + "/activation.yaml"
			if err := os.WriteFile(patch, []byte("controller: {activation_ticks: 10}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			d.mustCLI(t, "set", "patch", patch)
			d.mustCLI(t, "set", "mode", "enforce")
			env.expectAllOK(t, "right after leaving the kill switch (the controller restarts from p = 0)", 5)
			d.waitShedding(t)
			env.expectAllDropped(t, "enforce after the kill switch", 5)
			stopBurn()
		}},
		{"the decision log has the overload start and the change of p", func(t *testing.T) {
			recs := d.decisionRecords(t)
			var sawStart, sawChange bool
			for _, r := range records(recs, "overload_start") {
				sig, _ := r["signals"].(map[string]any)
				sawStart = sawStart || (r["mode"] == "enforce" && sig["cpu_busy"] != nil && r["reason"] != "")
			}
			for _, r := range records(recs, "probability_change") {
				// From 0 to 1 in one step, or in several when cpu_busy is
				// pinned near 1 (the controller caps a saturated signal's
				// step). One record per tick groups the ports that moved
				// alike.
				groups, _ := r["ports"].([]any)
				for _, g := range groups {
					g, _ := g.(map[string]any)
					names, _ := g["ports"].([]any)
					to, _ := g["to"].(float64)
					sawChange = sawChange || (slices.Contains(names, any(fmt.Sprintf("tcp/%d", serverPort))) && g["from"] == 0.0 && to > 0)
				}
			}
			if !sawStart || !sawChange {
				t.Errorf("decision log lacks an overload_start with signals (%v) or a probability_change of tcp/%d from 0 (%v)",
					sawStart, serverPort, sawChange)
			}
		}},
		{"the decision log has every override in order", func(t *testing.T) {
			var kinds []string
			for _, r := range records(d.decisionRecords(t), "config_override") {
				kinds = append(kinds, fmt.Sprint(r["kind"]))
			}
			if strings.Join(kinds, ",") != "patch,mode,mode,mode,patch,mode" {
				t.Errorf("config_override records %v, want patch, three mode changes, patch, mode", kinds)
			}
		}},
		{"SIGTERM exits cleanly and keeps the datapath pinned; olcd detach removes it", func(t *testing.T) {
			d.stop(t, "clean stop")
			if d.err != nil {
				t.Fatalf("olcd exited with %v after SIGTERM, want status 0", d.err)
			}
			if progs := env.attachedProgs(t); len(progs) != 1 || progs[0].ID != tcProg {
				t.Fatalf("after SIGTERM the kernel lists %+v on %s, want the pinned program %d (a restart keeps it)", progs, env.NodeIf, tcProg)
			}
			t.Logf("olcd detach:\n%s", d.detach(t))
			// The kernel frees an unpinned link in a work item.
			testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() (bool, error) {
				return len(append(env.attachedProgs(t), env.egressProgs(t)...)) == 0, nil
			}, "nothing attached to %s after olcd detach", env.NodeIf)
			waitProgGone(t, tcProg)
			if _, err := os.Lstat(d.socket); !os.IsNotExist(err) {
				t.Errorf("admin socket %s left after a clean stop (lstat: %v)", d.socket, err)
			}
		}},
	}
	for _, s := range steps {
		completed := false
		t.Run(s.name, func(t *testing.T) { s.fn(t); completed = true })
		if !completed {
			return // stopped by a Fatal: the later steps build on its state
		}
	}
}

// pollMetric scrapes until the unlabelled metric name equals want.
func (d *olcd) pollMetric(t *testing.T, name string, want float64) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 50*time.Millisecond, func() (bool, error) {
		v, ok := metricValue(d.scrape(t), name)
		return ok && v == want, fmt.Errorf("%s = %v (exported: %v)", name, v, ok)
	}, "metric %s = %v", name, want)
}

// waitProgGone fails the test unless the kernel frees program id within
// 5 s (it frees a program asynchronously after its last reference).
func waitProgGone(t *testing.T, id ebpf.ProgramID) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 50*time.Millisecond, func() (bool, error) { return !progExists(t, id), nil },
		"BPF program %d (%s) freed", id, loader.ProgramName(id))
}
