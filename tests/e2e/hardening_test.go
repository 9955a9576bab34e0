package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemonNOFILE is the RLIMIT_NOFILE the flooded daemon runs with: below the
// flood's 20,000 connections, as on hosts whose limit is 16384 or 65536 and
// a flood that is larger still.
const daemonNOFILE = 16384

// TestMetricsFloodByUnprivilegedUser: 20,000 idle connections to the metrics
// listener, opened by a process running as nobody, take nothing the daemon
// needs. While they are held the tick keeps its interval, every signal stays
// available, `olcd status` and `olcd set mode off` answer within 1 s, and the
// daemon holds few file descriptors: the metrics listener is capped and
// closes the excess at once.
func TestMetricsFloodByUnprivilegedUser(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) not found: it sets the daemon's file descriptor limit")
	}
	env := newNetEnv(t)
	d := prepareDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever})
	t.Cleanup(func() {
		if t.Failed() {
			dumpFile(t, "olcd log", d.logPath)
		}
	})
	d.proc = startProc(t, d.logPath, "prlimit", fmt.Sprintf("--nofile=%d:%d", daemonNOFILE, daemonNOFILE), "--",
		"ip", "netns", "exec", d.env.Node, bins.olcd, "run", "--config", d.cfgPath, "--pin-dir", d.pinDir, "--state-dir", d.stateDir)
	before := d.waitReady(t)
	// Let every rate-based signal have its first delta.
	before = d.nextTick(t, d.nextTick(t, before))
	var avail []string
	for _, s := range before.Signals {
		if s.Available {
			avail = append(avail, s.Name)
		}
	}
	if len(avail) == 0 {
		t.Fatalf("no signal available before the flood: %+v", before.Signals)
	}

	// Several processes, each within the hard RLIMIT_NOFILE of a container
	// without CAP_SYS_RESOURCE.
	const conns, procs = 20000, 4
	dir := t.TempDir()
	opened := make(chan string, procs)
	for i := range procs {
		holdLog := fmt.Sprintf("%s/hold-%d.log", dir, i)
		hold := exec.Command("ip", "netns", "exec", env.Node, bins.loadgen, "hold",
			"-target", d.metrics, "-conns", fmt.Sprint(conns/procs), "-duration", "45s", "-user", "65534:65534")
		stdout, err := hold.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		errLog, err := os.Create(holdLog)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { errLog.Close() })
		hold.Stderr = errLog
		if err := hold.Start(); err != nil {
			t.Fatalf("start loadgen hold: %v", err)
		}
		t.Cleanup(func() { _ = hold.Process.Kill(); _ = hold.Wait() })
		go func() {
			lines := bufio.NewScanner(stdout)
			if lines.Scan() {
				opened <- lines.Text()
				return
			}
			b, _ := os.ReadFile(holdLog)
			opened <- "ended: " + string(b)
		}()
	}
	deadline := time.After(60 * time.Second)
	for range procs {
		select {
		case l := <-opened:
			if strings.HasPrefix(l, "ended: ") {
				t.Fatalf("loadgen hold ended before opening its connections: %s", l)
			}
			t.Logf("unprivileged flood (uid 65534) against %s: %s", d.metrics, l)
		case <-deadline:
			t.Fatal("loadgen hold did not open its connections within 60s")
		}
	}

	// The daemon's answers while the flood is held.
	start := d.mustStatus(t)
	startAt := time.Now()
	for i := range 5 {
		t0 := time.Now()
		st, err := d.status()
		took := time.Since(t0)
		if err != nil {
			t.Fatalf("olcd status during the flood: %v", err)
		}
		if took > time.Second {
			t.Errorf("olcd status %d took %v during the flood, want < 1s", i, took.Round(time.Millisecond))
		}
		for _, name := range avail {
			if s := signalNamed(st, name); s == nil || !s.Available {
				t.Errorf("signal %s unavailable during the flood (sample errors: %v)", name, st.SampleErrors)
			}
		}
		time.Sleep(time.Second)
	}
	end := d.mustStatus(t)
	wall := time.Since(startAt)
	want := float64(wall) / float64(interval)
	if got := float64(end.Ticks - start.Ticks); got < 0.8*want {
		t.Errorf("%.0f ticks in %v during the flood, want about %.0f (interval %v)", got, wall.Round(time.Millisecond), want, interval)
	}

	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.pid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("daemon holds %d file descriptors during the flood (limit %d)", len(fds), daemonNOFILE)
	if len(fds) > 500 {
		t.Errorf("daemon holds %d file descriptors during the flood, want the metrics listener capped (< 500)", len(fds))
	}

	t0 := time.Now()
	if _, err := d.cli("set", "mode", "off"); err != nil {
		t.Fatalf("olcd set mode off during the flood: %v", err)
	}
	if took := time.Since(t0); took > time.Second {
		t.Errorf("olcd set mode off took %v during the flood, want < 1s", took.Round(time.Millisecond))
	}
	if st := d.mustStatus(t); st.Mode != "off" {
		t.Errorf("mode %q after olcd set mode off, want off", st.Mode)
	}
	if b, _ := os.ReadFile(d.logPath); strings.Contains(string(b), "too many open files") {
		t.Errorf("the daemon ran out of file descriptors:\n%s", b)
	}
}

// TestDecisionLogReopenOnUSR1: logrotate's postrotate (deploy/logrotate/olcd)
// sends SIGUSR1 after moving the decision log away; olcd then writes to a new
// file at the configured path, and keeps its config and live overrides
// (SIGHUP would reload and drop them).
func TestDecisionLogReopenOnUSR1(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	d := startDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever})
	patch := d.dir + "/activation.yaml"
	if err := os.WriteFile(patch, []byte("controller: {activation_ticks: 7}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.mustCLI(t, "set", "patch", patch)
	d.mustCLI(t, "set", "mode", "observe")

	rotated := d.decPath + ".1"
	if err := os.Rename(d.decPath, rotated); err != nil {
		t.Fatal(err)
	}
	if err := d.signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the decision log reopened at its path", func() bool {
		_, err := os.Stat(d.decPath)
		return err == nil
	})
	if d.exited() {
		t.Fatalf("olcd exited on SIGUSR1: %v", d.err)
	}
	st := d.mustStatus(t)
	if len(st.Overrides) != 2 || st.Mode != "observe" {
		t.Errorf("after SIGUSR1: mode %q, %d overrides, want observe and the 2 overrides kept", st.Mode, len(st.Overrides))
	}
	d.mustCLI(t, "set", "mode", "enforce")
	var inNew, inOld bool
	for _, r := range records(d.decisionRecords(t), "config_override") {
		inNew = inNew || r["value"] == "enforce"
	}
	old, err := os.ReadFile(rotated)
	if err != nil {
		t.Fatal(err)
	}
	inOld = strings.Contains(string(old), `"value":"observe"`)
	if !inNew || !inOld {
		t.Errorf("config_override of enforce in the new file: %v; of observe in the rotated one: %v", inNew, inOld)
	}
}
