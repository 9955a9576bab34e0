package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/testutil"
)

// counterValue reads a counter of the daemon's metrics.
func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestReloadRefusesEmptyTruncatedAndSpecial: a reload of an empty, white
// space only or truncated file, or of a FIFO, device or directory in the
// file's place, is refused without blocking: the running config stays, the
// refusal is counted in olcd_config_reload_failures_total and shown in the
// status with its problems. (Taken as the embedded default, an empty file
// would switch a node to observe mode, ports: auto; a FIFO would block the
// loop.)
func TestReloadRefusesEmptyTruncatedAndSpecial(t *testing.T) {
	good := testConfig(2, "500ms", "5s", 4)
	tests := []struct {
		name     string
		replace  func(t *testing.T, path string)
		want     string
		problems bool
	}{
		{"empty", writeContent(""), "the file is empty", true},
		{"white space", writeContent("\n \t \n"), "only white space", true},
		{"comments only", writeContent("# mode: enforce\n"), "holds no setting", true},
		{"truncated", writeContent(good[:len(good)-12]), "yaml syntax", true},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "a FIFO (named pipe), not a regular file", false},
		{"device", func(t *testing.T, path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}, "a character device, not a regular file", false},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "a directory, not a regular file", false},
	}
	d := startTestDaemon(t, good)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			running := d.eng.cfg
			fail0 := counterValue(t, d.metrics.reloadFailures)
			if err := os.RemoveAll(d.path); err != nil {
				t.Fatal(err)
			}
			tt.replace(t, d.path)
			done := make(chan error, 1)
			go func() { done <- d.reload("SIGHUP") }()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("reload blocked")
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("reload: %v, want %q", err, tt.want)
			}
			if d.eng.cfg != running || d.eng.cfg.Mode != olc.ModeEnforce || d.eng.cfg.PortsAuto || len(d.eng.ports) != 2 {
				t.Errorf("running config changed: mode %v, auto %v, %d ports", d.eng.cfg.Mode, d.eng.cfg.PortsAuto, len(d.eng.ports))
			}
			if got := counterValue(t, d.metrics.reloadFailures); got != fail0+1 {
				t.Errorf("olcd_config_reload_failures_total %v, want %v", got, fail0+1)
			}
			d.publish()
			rf := d.Status().ReloadRefused
			if rf == nil || rf.Trigger != "SIGHUP" || !strings.Contains(rf.Error, tt.want) || (len(rf.Problems) > 0) != tt.problems {
				t.Errorf("status reload_refused %+v, want %q (problems listed: %v)", rf, tt.want, tt.problems)
			}
			d.tick()
		})
	}
	if err := os.RemoveAll(d.path); err != nil {
		t.Fatal(err)
	}
	d.write(t, good)
	if err := d.reload("SIGHUP"); err != nil {
		t.Fatal(err)
	}
	if d.publish(); d.Status().ReloadRefused != nil {
		t.Errorf("a good reload left reload_refused %+v", d.Status().ReloadRefused)
	}
	d.noErrorsLogged(t)
}

func writeContent(doc string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConfigReadOffTickLoop: while a reload's read of the config file
// hangs (here held by the test, as a hung NFS mount would), the tick loop
// keeps ticking and writing the heartbeat and answers the kill switch,
// for a SIGHUP and for POST /v1/reload alike; the reload applies when the
// read returns. A read on the loop would stop it.
func TestConfigReadOffTickLoop(t *testing.T) {
	testutil.RequireRoot(t, "loads the BPF datapath")
	dir := t.TempDir()
	path := filepath.Join(dir, "olcd.yaml")
	if err := os.WriteFile(path, []byte(testConfig(1, "100ms", "1s", 4)), 0o644); err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	entered, release := make(chan struct{}, 8), make(chan struct{})
	origRead, origOpen := readConfigFile, openDatapath
	readConfigFile = func(p string) ([]byte, error) {
		if armed.Load() {
			entered <- struct{}{}
			<-release
		}
		return rules.ReadFile(p)
	}
	openDatapath = loader.Load // attached nowhere: olcdtest0 need not exist
	checkStartInterfaces = func(*rules.Config, []string) error { return nil }
	t.Cleanup(func() { readConfigFile, openDatapath, checkStartInterfaces = origRead, origOpen, checkListed })

	buf := &syncBuffer{}
	ready := make(chan struct{})
	d, err := New(Options{ConfigPath: path, Logger: slog.New(slog.NewTextHandler(buf, nil)), Ready: ready,
		AdminSocket: filepath.Join(dir, "olcd.sock"), MetricsAddress: "off", DecisionLog: "-"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.Run(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", buf)
		}
	})
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("daemon not ready:\n%s", buf)
	}
	armed.Store(true)

	// loopAlive: ticks go on and the kill switch answers within a second
	// while the read hangs.
	loopAlive := func(what string) {
		t.Helper()
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the config file was not read", what)
		}
		t0 := d.Status().Ticks
		if err := testutil.WaitFor(3*time.Second, 20*time.Millisecond, func() (bool, error) {
			return d.Status().Ticks >= t0+5, nil
		}); err != nil {
			t.Errorf("%s: %d ticks in 3 s while the config read hangs, want ≥ 5 at 100ms", what, d.Status().Ticks-t0)
		}
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		defer scancel()
		if err := d.SetMode(sctx, "off"); err != nil {
			t.Errorf("%s: set mode off while the config read hangs: %v", what, err)
		}
		if st := d.Status(); st.Mode != "off" {
			t.Errorf("%s: mode %s after set mode off", what, st.Mode)
		}
	}
	applied := func(what string) {
		t.Helper()
		if err := testutil.WaitFor(5*time.Second, 20*time.Millisecond, func() (bool, error) {
			st := d.Status()
			return st.Mode == "enforce" && len(st.Overrides) == 0, nil
		}); err != nil {
			t.Errorf("%s: reload not applied after the read returned: %+v", what, d.Status())
		}
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	loopAlive("SIGHUP")
	release <- struct{}{}
	applied("SIGHUP")

	rerr := make(chan error, 1)
	go func() { rerr <- d.Reload(context.Background()) }()
	loopAlive("admin API reload")
	release <- struct{}{}
	if err := <-rerr; err != nil {
		t.Errorf("admin API reload: %v", err)
	}
	applied("admin API reload")
	armed.Store(false)
	if n := counterValue(t, d.metrics.reloads); n < 2 {
		t.Errorf("olcd_config_reloads_total %v, want 2", n)
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		t.Error("context cancelled early")
	}
}
