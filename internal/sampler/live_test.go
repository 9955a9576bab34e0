package sampler

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/testutil"
)

// The live machine: real /proc gives every node signal the controller relies
// on, in range, with the interval measured on the monotonic clock.
func TestLiveNode(t *testing.T) {
	s, logs := newLogged(t, Config{Root: "/"})
	first := s.Sample()
	if first.Interval != 0 {
		t.Fatalf("first sample has interval %v, want 0", first.Interval)
	}
	if _, ok := first.Get(olc.CPUBusy); ok {
		t.Fatal("cpu_busy available on the first sample, which has nothing to compare with")
	}
	time.Sleep(300 * time.Millisecond)
	snap := s.Sample()
	if len(snap.Errors) != 0 {
		t.Fatalf("errors on the live machine: %v", snap.Errors)
	}
	if snap.Interval < 300*time.Millisecond || snap.Interval > 5*time.Second {
		t.Fatalf("interval %v, want about 300ms", snap.Interval)
	}
	check := func(sig olc.Signal, lo, hi float64) {
		t.Helper()
		v, ok := snap.Get(sig)
		if !ok {
			t.Errorf("%s unavailable on the live machine", sig)
			return
		}
		if v < lo || v > hi {
			t.Errorf("%s = %v, want within [%v, %v]", sig, v, lo, hi)
		}
	}
	check(olc.CPUBusy, 0, 1)
	check(olc.Load1, 0, 1e4)
	check(olc.Load1PerCore, 0, 1e4)
	check(olc.Runnable, 1, 1e5) // counts the sampling thread itself
	check(olc.RunqPerCore, 0, 1e5)
	check(olc.ListenOverflowsPerS, 0, 1e9)

	// Online CPUs come from the cpuN lines of /proc/stat; on the live
	// machine they must match /sys/devices/system/cpu/online.
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	n, err := parseCPUList(online)
	if err != nil {
		t.Fatal(err)
	}
	load, _ := snap.Get(olc.Load1)
	perCore, _ := snap.Get(olc.Load1PerCore)
	if load > 0 && abs(load/perCore-float64(n)) > 1e-9 {
		t.Errorf("load1/load1_per_core = %v CPUs, /sys says %d online", load/perCore, n)
	}

	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		t.Logf("PSI not checked: %v (kernel without CONFIG_PSI or booted with psi=0); log: %s", err, logs)
		return
	}
	for _, sig := range []olc.Signal{
		olc.PSICPUSomeAvg10, olc.PSIMemorySomeAvg10, olc.PSIMemoryFullAvg10, olc.PSIIOSomeAvg10, olc.PSIIOFullAvg10,
		olc.PSICPUSome, olc.PSIMemorySome, olc.PSIMemoryFull, olc.PSIIOSome, olc.PSIIOFull,
	} {
		check(sig, 0, 1)
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// testCgroup is a cgroup the live test creates in every hierarchy it needs
// and removes in Cleanup.
type testCgroup struct {
	name string   // path inside the hierarchy
	dirs []string // created directories, one per hierarchy
	v2   bool
	psi  bool // a v2 directory exists, so the cgroup's PSI must be read
}

// makeQuotaCgroup creates a cgroup limited to quotaUs per 100 ms period on
// whichever hierarchy has the cpu controller: the v1 cpu hierarchy (plus
// cpuacct when it is a separate mount, as on this VM) or v2 (enabling +cpu in
// the root's subtree_control).
func makeQuotaCgroup(t *testing.T, quotaUs int) *testCgroup {
	t.Helper()
	infos, err := procfs.GetMounts()
	if err != nil {
		t.Fatalf("read mountinfo: %v", err)
	}
	mounts := cgroupMounts(infos)
	cg := &testCgroup{name: fmt.Sprintf("olcd-sampler-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	t.Cleanup(func() { cg.remove(t) })
	mk := func(dir string) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("create test cgroup: %v", err)
		}
		cg.dirs = append(cg.dirs, dir)
	}
	write := func(p, v string) {
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	var cpuM, acctM, v2 *cgMount
	for i := range mounts {
		m := &mounts[i]
		switch {
		case m.v2 && v2 == nil:
			v2 = m
		case m.cpu && cpuM == nil:
			cpuM = m
		}
		if !m.v2 && m.cpuacct && acctM == nil {
			acctM = m
		}
	}
	switch {
	case cpuM != nil:
		d := filepath.Join(cpuM.point, cg.name)
		mk(d)
		write(filepath.Join(d, "cpu.cfs_period_us"), "100000")
		write(filepath.Join(d, "cpu.cfs_quota_us"), strconv.Itoa(quotaUs))
		// The largest weight, so that sibling groups busy with other test
		// packages cannot starve the loop below its quota (seen in a fresh-machine run).
		write(filepath.Join(d, "cpu.shares"), "262144")
		if acctM != nil && acctM != cpuM {
			mk(filepath.Join(acctM.point, cg.name))
		}
		if v2 != nil {
			// Hybrid: the v2 hierarchy carries the cgroup's PSI files.
			mk(filepath.Join(v2.point, cg.name))
			cg.psi = true
		}
	case v2 != nil:
		ctrl, err := os.ReadFile(filepath.Join(v2.point, "cgroup.controllers"))
		if err != nil || !slices.Contains(strings.Fields(string(ctrl)), "cpu") {
			t.Skipf("no cpu controller available on cgroup v2 (%q, %v)", ctrl, err)
		}
		write(filepath.Join(v2.point, "cgroup.subtree_control"), "+cpu")
		d := filepath.Join(v2.point, cg.name)
		mk(d)
		write(filepath.Join(d, "cpu.max"), fmt.Sprintf("%d 100000", quotaUs))
		write(filepath.Join(d, "cpu.weight"), "10000") // as cpu.shares above
		cg.v2, cg.psi = true, true
	default:
		t.Skip("no cgroup hierarchy with the cpu controller is mounted")
	}
	return cg
}

// add moves the process into the cgroup in every hierarchy.
func (cg *testCgroup) add(t *testing.T, pid int) {
	t.Helper()
	for _, d := range cg.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatalf("move %d into %s: %v", pid, d, err)
		}
	}
}

func (cg *testCgroup) remove(t *testing.T) {
	for i := len(cg.dirs) - 1; i >= 0; i-- {
		d := cg.dirs[i]
		// The killed child may take a moment to leave.
		if err := testutil.WaitFor(time.Second, 20*time.Millisecond, func() (bool, error) {
			err := syscall.Rmdir(d)
			return err == nil || errors.Is(err, syscall.ENOENT), err
		}); err != nil {
			t.Errorf("remove test cgroup %s: %v", d, err)
		}
	}
}

// startBusyChild re-executes the test binary as a CPU-bound child that spins
// for at most secs seconds; Cleanup kills it.
func startBusyChild(t *testing.T, secs int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), busyChildEnv+"="+strconv.Itoa(secs), "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // killed: its exit status says so
	})
	return cmd
}

// A cgroup with a 0.2-CPU quota running a busy loop uses its whole quota:
// cgroup_cpu_usage_of_quota near 1, and the kernel throttles it. On this VM
// the cpu and cpuacct hierarchies are separate v1 mounts and the cgroup is
// named by its path inside the hierarchy, so this also exercises mountinfo
// resolution and the split-mount reads on a real kernel.
func TestLiveCgroupQuota(t *testing.T) {
	requireRoot(t)
	if testing.Short() {
		t.Skip("live cgroup test takes a few seconds")
	}
	const quotaUs = 20000 // 0.2 CPU: attainable even on a busy 2-CPU machine
	cg := makeQuotaCgroup(t, quotaUs)
	child := startBusyChild(t, 20)
	cg.add(t, child.Process.Pid)

	s, logs := newLogged(t, Config{Root: "/", Cgroup: cg.name})
	if !s.cgOK {
		t.Fatalf("test cgroup %q not resolved: %v", cg.name, s.cgErr)
	}
	t.Logf("resolved: %s", strings.TrimSpace(logs.String()))
	time.Sleep(200 * time.Millisecond) // let the child settle under the quota
	s.Sample()
	var (
		usage, ratio float64
		ok           bool
	)
	// The machine is shared with other test runs; take up to three 1-second
	// windows and require one to show the quota used up.
	for attempt := 1; attempt <= 3; attempt++ {
		time.Sleep(time.Second)
		snap := s.Sample()
		if len(snap.Errors) != 0 {
			t.Fatalf("errors: %v", snap.Errors)
		}
		usage, ok = snap.Get(olc.CgroupCPUUsageOfQuota)
		if !ok {
			t.Fatal("cgroup_cpu_usage_of_quota unavailable for a cgroup with a quota")
		}
		ratio, _ = snap.Get(olc.CgroupThrottledRatio)
		throttled, _ := snap.Get(olc.CgroupThrottledS)
		t.Logf("window %d: usage_of_quota %.3f, throttled_ratio %.2f, throttled_s %.3f over %v",
			attempt, usage, ratio, throttled, snap.Interval)
		if cg.psi {
			for _, sig := range []olc.Signal{olc.CgroupPSICPUSomeAvg10, olc.CgroupPSICPUSome, olc.CgroupPSIMemorySome, olc.CgroupPSIIOSome} {
				if v, ok := snap.Get(sig); !ok || v < 0 || v > 1 {
					t.Fatalf("%s = %v (ok %v), want a fraction: the test cgroup has a v2 directory", sig, v, ok)
				}
			}
		}
		if usage >= 0.85 && usage <= 1.15 && ratio > 0 {
			return
		}
	}
	t.Fatalf("cgroup_cpu_usage_of_quota = %.3f, throttled_ratio = %.2f: want near 1 and > 0 for a busy loop under a quota", usage, ratio)
}
