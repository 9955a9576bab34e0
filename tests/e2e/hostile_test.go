package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/testutil"
)

// TestStartFailuresLeaveNothing: a daemon that cannot start exits non-zero
// with an error naming the cause, and leaves nothing behind: no program on
// the interface, no socket file of its own, and a running daemon it collided
// with keeps running undisturbed.
func TestStartFailuresLeaveNothing(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name  string
		setup func(t *testing.T, env *netEnv, d *olcd, cfg *daemonConfig) (keep *olcd)
		want  string // in the daemon's output
	}{
		{"metrics address busy", func(t *testing.T, env *netEnv, d *olcd, cfg *daemonConfig) *olcd {
			var ln net.Listener
			if err := env.InNode(func() (err error) { ln, err = net.Listen("tcp", d.metrics); return err }); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			return nil
		}, "listen for metrics on 127.0.0.1:9477"},
		{"unknown interface after a good one", func(t *testing.T, env *netEnv, d *olcd, cfg *daemonConfig) *olcd {
			return nil
		}, "olcdnosuch0"},
		{"another daemon on the same socket", func(t *testing.T, env *netEnv, d *olcd, cfg *daemonConfig) *olcd {
			first := startDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever})
			d.socket, d.metrics = first.socket, "127.0.0.1:9478"
			return first
		}, "another olcd is running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newNetEnv(t)
			cfg := daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever}
			d := prepareDaemon(t, env, cfg)
			keep := tt.setup(t, env, d, &cfg)
			doc := renderConfig(t, startedConfig(d, cfg))
			if tt.want == "olcdnosuch0" {
				doc = []byte(strings.Replace(string(doc), "interfaces: ["+env.NodeIf+"]", "interfaces: ["+env.NodeIf+", olcdnosuch0]", 1))
			}
			writeFileAtomic(t, d.realCfg, doc)

			d.proc = startProc(t, d.logPath, "ip", "netns", "exec", env.Node,
				bins.olcd, "run", "--config", d.cfgPath, "--log-level", "debug", "--pin-dir", d.pinDir, "--state-dir", d.stateDir)
			if !d.wait(20 * time.Second) {
				logData, _ := os.ReadFile(d.logPath)
				t.Fatalf("olcd did not exit within 20s:\n%s", logData)
			}
			logData, _ := os.ReadFile(d.logPath)
			if d.err == nil {
				t.Fatalf("olcd exited 0:\n%s", logData)
			}
			if !strings.Contains(string(logData), tt.want) {
				t.Errorf("output does not name the cause %q:\n%s", tt.want, logData)
			}
			if tt.name == "metrics address busy" && strings.Contains(string(logData), "datapath attached") {
				t.Errorf("olcd attached before it found the metrics address busy:\n%s", logData)
			}
			progs := env.attachedProgs(t)
			if keep == nil {
				if len(progs) != 0 {
					t.Errorf("left on %s: %+v", env.NodeIf, progs)
				}
				if _, err := os.Lstat(d.socket); !os.IsNotExist(err) {
					t.Errorf("socket file %s left behind (%v)", d.socket, err)
				}
				return
			}
			if len(progs) != 1 || progs[0].Name != "olcd_tc" {
				t.Errorf("the running daemon's attachment changed: %+v", progs)
			}
			if st := keep.mustStatus(t); len(st.Interfaces) != 1 {
				t.Errorf("the running daemon's status changed: %+v", st.Interfaces)
			}
		})
	}
}

// TestConfigChurnAndSignals: SIGHUPs sprayed at a starting daemon and a
// storm of them at a running one neither kill it nor change its config;
// the config file deleted, replaced by a directory, then replaced by rename
// (as editors and config management do) is refused while broken, the
// running config stays, and the watcher picks up the good file afterwards.
func TestConfigChurnAndSignals(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	cfg := daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever}
	d := prepareDaemon(t, env, cfg)

	// SIGHUP while olcd starts (not `ip netns exec`, which the default
	// action would kill), every millisecond until it is ready.
	d.proc = startProc(t, d.logPath, "ip", "netns", "exec", env.Node,
		bins.olcd, "run", "--config", d.cfgPath, "--log-level", "debug", "--pin-dir", d.pinDir, "--state-dir", d.stateDir)
	t.Cleanup(func() {
		if t.Failed() {
			dumpFile(t, "olcd log", d.logPath)
		}
	})
	// From its first log line on: before it, only the Go runtime's own
	// start-up is left, which no program can guard.
	deadline := time.Now().Add(20 * time.Second)
	testutil.Eventually(t, 20*time.Second, time.Millisecond, func() (bool, error) {
		if d.exited() {
			t.Fatalf("olcd did not start: %v", d.err)
		}
		fi, err := os.Stat(d.logPath)
		return err == nil && fi.Size() > 0 && procComm(d.pid()) == "olcd", err
	}, "olcd's first log line")
	sent := 0
	for ready := false; !ready; sent++ {
		if err := d.signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if d.exited() {
			t.Fatalf("olcd died of a SIGHUP during start-up (after %d): %v", sent+1, d.err)
		}
		if time.Now().After(deadline) {
			t.Fatal("olcd not ready after 20s of SIGHUPs")
		}
		if sent%20 == 19 {
			st, err := d.status()
			ready = err == nil && st.Ticks >= 1 && len(st.Interfaces) == 1
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("%d SIGHUPs sent during start-up", sent)

	failures := func() float64 { return mustMetric(t, d.scrape(t), "olcd_config_reload_failures_total") }
	reloads := func() float64 { return mustMetric(t, d.scrape(t), "olcd_config_reloads_total") }

	// 100 SIGHUPs in about a second on a running daemon.
	r0 := reloads()
	for range 100 {
		if err := d.signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Still ticking: a tick after the storm, not a status published before it.
	d.nextTick(t, d.mustStatus(t))
	if d.exited() || reloads() <= r0 || failures() != 0 {
		t.Fatalf("after 100 SIGHUPs: exited %v, reloads %v → %v, failures %v", d.exited(), r0, reloads(), failures())
	}

	// Deleted: nothing to reload, a SIGHUP is refused, the config stays.
	if err := os.Remove(d.cfgPath); err != nil {
		t.Fatal(err)
	}
	if err := d.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, "refused reload of a deleted file", failures, 1)

	// A directory in its place: the watcher sees it, the reload is refused.
	if err := os.Mkdir(d.cfgPath, 0o755); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, "refused reload of a directory", failures, 2)
	st := d.mustStatus(t)
	if st.Mode != "enforce" || cpuThreshold(st) != thresholdNever || d.exited() {
		t.Fatalf("running config lost: mode %s, threshold %v", st.Mode, cpuThreshold(st))
	}

	// A good file renamed into place: the watcher still works.
	if err := os.Remove(d.cfgPath); err != nil {
		t.Fatal(err)
	}
	cfg.Threshold = 0.99
	tmp := filepath.Join(d.dir, ".olcd.yaml.swp")
	if err := os.WriteFile(tmp, renderConfig(t, startedConfig(d, cfg)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, d.cfgPath); err != nil {
		t.Fatal(err)
	}
	d.pollStatus(t, "the renamed file applied", 5*time.Second, func(s *api.Status) bool { return cpuThreshold(s) == 0.99 })
	if f := failures(); f != 2 {
		t.Errorf("reload failures %v, want 2", f)
	}
}

// waitMetric polls a counter until it reaches want.
func waitMetric(t *testing.T, what string, read func() float64, want float64) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 50*time.Millisecond, func() (bool, error) {
		got := read()
		if got > want {
			t.Fatalf("%s: counter at %v, past %v", what, got, want)
		}
		return got == want, fmt.Errorf("counter at %v", got)
	}, "%s: counter at %v", what, want)
}

// TestConfigRefusedWrites: with mode enforce and one listed interface, the
// config file emptied in place (`: > olcd.yaml`), left as white space or
// cut off, or replaced by a FIFO, is refused by the file watch and by
// SIGHUP: counted, listed in the status, and the running config stays (not
// the embedded default: observe, ports: auto, every interface; nor a tick
// loop hung on a FIFO). A slow writer that
// empties the file and writes it 600 ms later
// (`(sleep 0.6; cat good.yaml) > olcd.yaml`) is applied once, complete,
// with no refusal in between.
func TestConfigRefusedWrites(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	cfg := daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever}
	d := startDaemon(t, env, cfg)
	failures := func() float64 { return mustMetric(t, d.scrape(t), "olcd_config_reload_failures_total") }
	reloads := func() float64 { return mustMetric(t, d.scrape(t), "olcd_config_reloads_total") }
	// running checks, every 50 ms for the given time, that the config in
	// force is the file's: enforce, the one interface, ticking.
	running := func(what string, for_ time.Duration, wantPorts int) {
		t.Helper()
		deadline := time.Now().Add(for_)
		for first := true; first || time.Now().Before(deadline); first = false {
			st := d.mustStatus(t)
			if st.Mode != "enforce" || len(st.Interfaces) != 1 || st.Interfaces[0].Name != env.NodeIf ||
				cpuThreshold(st) != thresholdNever || st.Ports[0].Port != serverPort || (wantPorts > 0 && len(st.Ports) != wantPorts) {
				t.Fatalf("%s: the running config changed: %s, interfaces %+v, ports %d", what, summary(st), st.Interfaces, len(st.Ports))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	refused := func(what, want string, failuresWant float64) {
		t.Helper()
		waitMetric(t, what, failures, failuresWant)
		st := d.mustStatus(t)
		if rf := st.ReloadRefused; rf == nil || !strings.Contains(rf.Error, want) {
			t.Fatalf("%s: status reload_refused %+v, want %q", what, st.ReloadRefused, want)
		}
		running(what, 500*time.Millisecond, 0)
	}

	// The file olcd reads is a symlink; a regular file renamed into its
	// place makes the writes below land in the watched directory.
	writeFileAtomic(t, d.cfgPath, renderConfig(t, startedConfig(d, cfg)))
	waitMetric(t, "the regular file renamed into place", reloads, 1)
	f0 := failures()

	shell := func(script string) {
		t.Helper()
		if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("sh -c %q: %v\n%s", script, err, out)
		}
	}
	shell(": > " + d.cfgPath)
	running("file emptied", 800*time.Millisecond, 1)
	refused("file emptied", "the file is empty", f0+1)

	// A second port tells the slow writer's file from the running one
	// (any other threshold than 1 would start an overload on a busy host).
	good := cfg
	good.Ports = []int{serverPort, serverPort + 1}
	goodPath := filepath.Join(d.dir, "good.yaml")
	if err := os.WriteFile(goodPath, renderConfig(t, startedConfig(d, good)), 0o644); err != nil {
		t.Fatal(err)
	}
	r0 := reloads()
	start := time.Now()
	slow := exec.Command("sh", "-c", "(sleep 0.6; cat "+goodPath+") > "+d.cfgPath)
	if err := slow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Wait() })
	running("slow writer at work", 600*time.Millisecond, 1)
	d.pollStatus(t, "the slow writer's file applied", 5*time.Second, func(s *api.Status) bool { return len(s.Ports) == 2 })
	t.Logf("slow writer's file applied %v after it emptied the file", time.Since(start).Round(10*time.Millisecond))
	running("after the slow writer", time.Second, 2)
	if f, r := failures(), reloads(); f != f0+1 || r != r0+1 {
		t.Fatalf("slow writer: failures %v (want %v), reloads %v (want %v): the partial file was acted on", f, f0+1, r, r0+1)
	}

	if err := os.WriteFile(d.cfgPath, []byte("\n   \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused("white space only", "only white space", f0+2)
	doc := renderConfig(t, startedConfig(d, good))
	cut := strings.Index(string(doc), "proto: tcp, class") + len("proto: tcp, cl")
	if err := os.WriteFile(d.cfgPath, doc[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	refused("file cut off", "yaml syntax", f0+3)

	// A FIFO in its place: the watch and a SIGHUP refuse it without
	// blocking, and the loop keeps ticking.
	if err := os.Remove(d.cfgPath); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(d.cfgPath, 0o644); err != nil {
		t.Fatal(err)
	}
	refused("FIFO in place", "a FIFO (named pipe)", f0+4)
	if err := d.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	refused("SIGHUP with a FIFO in place", "a FIFO (named pipe)", f0+5)
	st := d.mustStatus(t)
	for range 3 {
		st = d.nextTick(t, st)
	}
	if d.exited() {
		t.Fatalf("olcd exited: %v", d.err)
	}
	if out, err := exec.Command(bins.olcd, "check-config", d.cfgPath).CombinedOutput(); err == nil || !strings.Contains(string(out), "FIFO") {
		t.Errorf("check-config on a FIFO: %v\n%s", err, out)
	}

	os.Remove(d.cfgPath)
	writeFileAtomic(t, d.cfgPath, doc)
	d.pollStatus(t, "a good file after the refusals", 5*time.Second, func(s *api.Status) bool {
		return s.ReloadRefused == nil && len(s.Ports) == 2
	})
}
