package sampler

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/testutil"
)

// A fixture root whose every source is readable and well formed.
func goodRoot(t *testing.T) map[string]string {
	return map[string]string{
		"proc/stat":                               "cpu 10 0 10 80 0 0 0 0 0 0\ncpu0 10 0 10 80 0 0 0 0 0 0\nprocs_running 3\n",
		"proc/loadavg":                            "1.50 1.00 0.50 3/100 1\n",
		"proc/pressure/cpu":                       psiFile(1, 100, true),
		"proc/pressure/memory":                    psiFile(1, 100, true),
		"proc/pressure/io":                        psiFile(1, 100, true),
		"proc/net/netstat":                        "TcpExt: ListenOverflows\nTcpExt: 3\n",
		"sys/fs/cgroup/cgroup.controllers":        "cpu cpuset\n",
		"sys/fs/cgroup/app/cgroup.controllers":    "cpu cpuset\n",
		"sys/fs/cgroup/app/cpu.max":               "100000 100000\n",
		"sys/fs/cgroup/app/cpu.stat":              "usage_usec 1\nnr_periods 1\nnr_throttled 0\nthrottled_usec 0\n",
		"sys/fs/cgroup/app/cpuset.cpus.effective": "0\n",
		"sys/fs/cgroup/app/cpu.pressure":          psiFile(1, 100, true),
		"sys/fs/cgroup/app/memory.pressure":       psiFile(1, 100, true),
		"sys/fs/cgroup/app/io.pressure":           psiFile(1, 100, true),
	}
}

// Run samples at once and then on every tick; each snapshot's Interval is
// the monotonic time since the previous one, and Run returns when the
// context ends.
func TestRun(t *testing.T) {
	root := mkTree(t, goodRoot(t))
	s, _ := newLogged(t, Config{Root: root, Cgroup: "/sys/fs/cgroup/app"})
	ctx, cancel := context.WithCancel(context.Background())
	var snaps []olc.Snapshot
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, 10*time.Millisecond, func(sn olc.Snapshot) {
			snaps = append(snaps, sn)
			if len(snaps) == 5 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if len(snaps) != 5 {
		t.Fatalf("%d snapshots, want 5", len(snaps))
	}
	if snaps[0].Interval != 0 {
		t.Fatalf("first interval %v, want 0", snaps[0].Interval)
	}
	for i := 1; i < len(snaps); i++ {
		if snaps[i].Interval <= 0 || snaps[i].At.Sub(snaps[i-1].At) != snaps[i].Interval {
			t.Fatalf("tick %d: interval %v, At difference %v", i, snaps[i].Interval, snaps[i].At.Sub(snaps[i-1].At))
		}
		if len(snaps[i].Errors) != 0 {
			t.Fatalf("tick %d: errors %v", i, snaps[i].Errors)
		}
	}
	// An already cancelled context: no sample at all.
	called := false
	s.Run(ctx, 0, func(olc.Snapshot) { called = true })
	if called {
		t.Fatal("Run sampled with a cancelled context")
	}
}

// Every source that cannot be read is reported once per tick under its
// stable source name, with the file in the message, and never takes another
// source's values with it.
func TestErrorsBySource(t *testing.T) {
	files := goodRoot(t)
	files["proc/stat"] = "cpu 1 2\nprocs_running 3\n"
	files["proc/loadavg"] = "lots\n"
	files["proc/pressure/io"] = "some avg10=x total=1\n"
	files["proc/net/netstat"] = "TcpExt: ListenOverflows\nTcpExt: many\n"
	files["sys/fs/cgroup/app/cpu.max"] = "100000 0\n"
	files["sys/fs/cgroup/app/cpuset.cpus.effective"] = "9-1\n"
	files["sys/fs/cgroup/app/memory.pressure"] = "full avg10=1\n"
	root := mkTree(t, files)
	s, _ := newLogged(t, Config{Root: root, Cgroup: "/sys/fs/cgroup/app"})
	s.Sample()
	snap := s.Sample()
	want := map[string]string{
		SourceProcStat:        "proc/stat line 1",
		SourceLoadavg:         "proc/loadavg",
		SourcePSIIO:           "proc/pressure/io",
		SourceNetstat:         "net/netstat line 2",
		SourceCgroupCPU:       "cpu.max",
		SourceCgroupCpuset:    "cpuset.cpus.effective",
		SourceCgroupPSIMemory: "memory.pressure",
	}
	got := map[string]string{}
	for _, e := range snap.Errors {
		if _, dup := got[e.Source]; dup {
			t.Errorf("source %s reported twice", e.Source)
		}
		got[e.Source] = e.Err.Error()
	}
	for src, sub := range want {
		if msg, ok := got[src]; !ok || !strings.Contains(msg, sub) {
			t.Errorf("source %s: error %q, want one naming %q", src, msg, sub)
		}
	}
	if len(got) != len(want) {
		t.Errorf("error sources %v, want %d of them", got, len(want))
	}
	for _, sig := range []olc.Signal{olc.Runnable, olc.PSICPUSomeAvg10, olc.PSIMemorySome, olc.CgroupThrottledS, olc.CgroupPSICPUSomeAvg10, olc.CgroupPSIIOSome} {
		if _, ok := snap.Get(sig); !ok {
			t.Errorf("%s lost because another source failed", sig)
		}
	}
}

// A sampler never panics, whatever the root looks like, and reports what
// it could not read.
func TestSampleNeverPanics(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) string
	}{
		{"missing root", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }},
		{"root is a file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "file")
			testutil.Must(t, os.WriteFile(p, []byte("x"), 0o644))
			return p
		}},
		{"directories where files belong", func(t *testing.T) string {
			return mkTree(t, map[string]string{"proc/stat/": "", "proc/loadavg/": "", "proc/pressure/cpu/": "", "proc/net/netstat/": "",
				"sys/fs/cgroup/app/cpu.max/": "", "sys/fs/cgroup/app/cpu.stat/": "", "sys/fs/cgroup/cgroup.controllers": ""})
		}},
		{"files where directories belong", func(t *testing.T) string {
			return mkTree(t, map[string]string{"proc/pressure": "x", "proc/net": "x", "sys/fs/cgroup": "x", "proc/self": "x"})
		}},
		{"binary garbage", func(t *testing.T) string {
			junk := strings.Repeat("\x00\xff\n\tcpu \x01", 5000)
			return mkTree(t, map[string]string{"proc/stat": junk, "proc/loadavg": junk, "proc/pressure/cpu": junk, "proc/net/netstat": junk,
				"proc/self/mountinfo": junk, "sys/fs/cgroup/app/cpu.stat": junk, "sys/fs/cgroup/app/cpu.max": junk, "sys/fs/cgroup/app/cgroup.controllers": junk})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := tc.setup(t)
			for _, cg := range []string{"", "/sys/fs/cgroup/app", "app"} {
				s, _ := newLogged(t, Config{Root: root, Cgroup: cg})
				s.cgRetry = 0
				for range 3 {
					snap := s.Sample()
					if len(snap.Errors) == 0 {
						t.Errorf("cgroup %q: nothing reported for a root with nothing readable", cg)
					}
					for _, sig := range olc.Signals() {
						if v, ok := snap.Get(sig); ok && (v != v || v < 0) {
							t.Errorf("%s = %v", sig, v)
						}
					}
				}
			}
		})
	}
}

// SetTCPPorts may be called while Run is sampling (run with -race).
func TestSetTCPPortsWhileRunning(t *testing.T) {
	root := mkTree(t, goodRoot(t))
	s, _ := newLogged(t, Config{Root: root, TCPPorts: []uint16{1}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	ticks := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.Run(ctx, time.Millisecond, func(olc.Snapshot) {
			ticks++
			if ticks == 50 {
				cancel()
			}
		})
	}()
	for i := 0; ctx.Err() == nil; i++ {
		s.SetTCPPorts([]uint16{uint16(i%7 + 1), 0, uint16(i%7 + 1), 9})
		time.Sleep(100 * time.Microsecond)
	}
	wg.Wait()
	s.SetTCPPorts([]uint16{5, 0, 3, 5})
	if !slices.Equal(s.ports, []uint16{3, 5}) {
		t.Fatalf("ports %v, want [3 5] (sorted, unique, no 0)", s.ports)
	}
}
