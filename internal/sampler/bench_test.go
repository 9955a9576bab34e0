package sampler

import (
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// benchPorts opens 16 loopback listeners (backlog 64) and returns their
// ports: the protected ports of a tick under test.
func benchPorts(tb testing.TB) []uint16 {
	tb.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	ports := make([]uint16, 16)
	for i := range ports {
		ports[i] = listenRaw(tb, lo, 0, 64)
	}
	return ports
}

// benchRootV2 is a fixture root shaped like a pure cgroup v2 host, with the
// real /proc/stat and /proc/net/netstat captured from this VM.
func benchRootV2(tb testing.TB) (root, cgroup string) {
	tb.Helper()
	return mkTree(tb, map[string]string{
		"proc/self/mountinfo":                     readTestdata(tb, "mountinfo/v2"),
		"proc/stat":                               readTestdata(tb, "proc/stat-real"),
		"proc/loadavg":                            "0.50 0.40 0.30 2/120 999\n",
		"proc/pressure/cpu":                       readTestdata(tb, "proc/pressure-cpu"),
		"proc/pressure/memory":                    readTestdata(tb, "proc/pressure-memory"),
		"proc/pressure/io":                        readTestdata(tb, "proc/pressure-io"),
		"proc/net/netstat":                        readTestdata(tb, "proc/netstat-real"),
		"sys/fs/cgroup/cgroup.controllers":        "cpuset cpu io memory pids\n",
		"sys/fs/cgroup/app/cgroup.controllers":    "cpuset cpu io memory pids\n",
		"sys/fs/cgroup/app/cpu.max":               "125000 100000\n",
		"sys/fs/cgroup/app/cpuset.cpus.effective": "0-1\n",
		"sys/fs/cgroup/app/cpu.stat":              "usage_usec 1323899\nuser_usec 992924\nsystem_usec 330974\nnr_periods 20\nnr_throttled 6\nthrottled_usec 139381\nnr_bursts 0\nburst_usec 0\n",
		"sys/fs/cgroup/app/cpu.pressure":          readTestdata(tb, "proc/pressure-cpu"),
		"sys/fs/cgroup/app/memory.pressure":       readTestdata(tb, "proc/pressure-memory"),
		"sys/fs/cgroup/app/io.pressure":           readTestdata(tb, "proc/pressure-io"),
	}), "app"
}

// cpuTime is the process's user+system CPU time.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// filesOf lists the files one tick reads for the sampler's configuration,
// for the baseline that only reads them.
func filesOf(s *Sampler) []string {
	fs := []string{s.pathStat, filepath.Join(s.root, "proc/loadavg"), s.pathNetstat}
	fs = append(fs, s.pathPSI[:]...)
	p := s.cg
	if p.cpuV2 {
		fs = append(fs, filepath.Join(p.cpuDir, "cpu.max"), filepath.Join(p.cpuDir, "cpu.stat"))
	} else if p.cpuDir != "" {
		fs = append(fs, filepath.Join(p.cpuDir, "cpu.cfs_quota_us"), filepath.Join(p.cpuDir, "cpu.cfs_period_us"),
			filepath.Join(p.cpuDir, "cpu.stat"), filepath.Join(p.usageDir, "cpuacct.usage"))
	}
	if p.cpusetFile != "" {
		fs = append(fs, p.cpusetFile)
	}
	if p.psiDir != "" {
		for _, f := range cgroupPSIFile {
			fs = append(fs, filepath.Join(p.psiDir, f))
		}
	}
	return fs
}

// BenchmarkTick measures one Sample with a watched cgroup and 16 protected
// ports (16 real loopback listeners, read with sock_diag), on a fixture root
// and on the live machine. It reports CPU time per tick (getrusage, user +
// system, which includes the kernel generating /proc text and the
// sock_diag dump) next to wall time. The "baseline" sub-benchmarks only
// os.ReadFile the same files, no parsing and no sock_diag, in the same run:
// the ratio tick/baseline is what to compare across machines.
func BenchmarkTick(b *testing.B) {
	ports := benchPorts(b)
	fixture, cg := benchRootV2(b)
	for _, tc := range []struct {
		name, root, cgroup string
	}{
		{"fixture-v2", fixture, cg},
		// The root cgroup exists everywhere; on this VM it resolves to the
		// split v1 cpu/cpuacct mounts plus the unified v2 PSI files.
		{"live", "/", "/"},
	} {
		s, err := New(Config{Root: tc.root, Cgroup: tc.cgroup, TCPPorts: ports}, discardLogger())
		if err != nil {
			b.Fatal(err)
		}
		if !s.cgOK {
			b.Fatalf("%s: cgroup not resolved: %v", tc.name, s.cgErr)
		}
		files := filesOf(s)
		b.Run(tc.name+"/tick", func(b *testing.B) {
			b.ReportAllocs()
			s.Sample()
			c0 := cpuTime(b)
			for b.Loop() {
				s.Sample()
			}
			b.ReportMetric(float64((cpuTime(b)-c0).Microseconds())/float64(b.N), "cpu-µs/tick")
		})
		b.Run(tc.name+"/baseline-readfiles", func(b *testing.B) {
			b.ReportAllocs()
			c0 := cpuTime(b)
			for b.Loop() {
				for _, f := range files {
					_, _ = os.ReadFile(f) // the cost measured, not the bytes
				}
			}
			b.ReportMetric(float64((cpuTime(b)-c0).Microseconds())/float64(b.N), "cpu-µs/tick")
		})
	}
}

// One tick keeps no memory: after a warm-up, 10 000 more ticks (cgroup and
// 16 listening protected ports configured) leave the live heap where it was.
// This compares heap sizes after a forced GC, not times.
func TestNoHeapGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("10 000 ticks take a few seconds")
	}
	ports := benchPorts(t)
	root, cg := benchRootV2(t)
	s, _ := newLogged(t, Config{Root: root, Cgroup: cg, TCPPorts: ports})
	for range 500 {
		s.Sample()
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var snap olc.Snapshot
	for range 10000 {
		snap = s.Sample()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(snap.Errors) != 0 || len(snap.AcceptQueueFill) != len(ports) {
		t.Fatalf("ticks were not complete: errors %v, fills %v", snap.Errors, snap.AcceptQueueFill)
	}
	const tolerance = 64 << 10
	grewAlloc := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	grewInuse := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap after warm-up: alloc %d B, inuse %d B; after 10 000 ticks: alloc %d B (%+d), inuse %d B (%+d); %.1f allocations per tick",
		before.HeapAlloc, before.HeapInuse, after.HeapAlloc, grewAlloc, after.HeapInuse, grewInuse,
		float64(after.Mallocs-before.Mallocs)/10000)
	if grewAlloc > tolerance || grewInuse > 4*tolerance {
		t.Fatalf("heap grew across 10 000 ticks: alloc %+d B, inuse %+d B (tolerance %d / %d B)",
			grewAlloc, grewInuse, tolerance, 4*tolerance)
	}
}
