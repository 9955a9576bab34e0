package sampler

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

func TestParseCPUMax(t *testing.T) {
	tests := []struct {
		in      string
		cpus    float64
		limited bool
		errHas  string
	}{
		{"max 100000\n", 0, false, ""},
		{"max\n", 0, false, ""},
		{"125000 100000\n", 1.25, true, ""},
		{"50000 100000", 0.5, true, ""},
		{"1000 1000\n", 1, true, ""},
		{"100000 0\n", 0, false, "period"},
		{"100000\n", 0, false, "period"},
		{"-1 100000\n", 0, false, "quota"},
		{"max 100000 7\n", 0, false, "want"},
		{"\n", 0, false, "want"},
	}
	for _, tc := range tests {
		cpus, limited, err := parseCPUMax([]byte(tc.in))
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.errHas)
			}
			continue
		}
		if err != nil || cpus != tc.cpus || limited != tc.limited {
			t.Errorf("%q: got %v %v %v, want %v %v", tc.in, cpus, limited, err, tc.cpus, tc.limited)
		}
	}
}

func TestParseCFSQuota(t *testing.T) {
	tests := []struct {
		in      string
		quota   uint64
		limited bool
		bad     bool
	}{
		{"-1\n", 0, false, false},
		{"100000\n", 100000, true, false},
		{"0\n", 0, true, false},
		{"-2\n", 0, false, true},
		{"1 2\n", 0, false, true},
		{"", 0, false, true},
	}
	for _, tc := range tests {
		q, limited, err := parseCFSQuota([]byte(tc.in))
		if (err != nil) != tc.bad || q != tc.quota || limited != tc.limited {
			t.Errorf("%q: got %v %v %v", tc.in, q, limited, err)
		}
	}
}

func TestParseCPUStat(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   cpuStat
		errHas string
	}{
		{
			name: "v2 with cpu controller",
			in:   "usage_usec 1323899\nuser_usec 992924\nsystem_usec 330974\nnr_periods 20\nnr_throttled 6\nthrottled_usec 139381\nnr_bursts 0\nburst_usec 0\n",
			want: cpuStat{usageNs: 1323899000, usageOK: true, nrPeriods: 20, nrThrottled: 6, periodsOK: true, throttledOK: true, throttledNs: 139381000, throttledNsOK: true},
		},
		{
			name: "v2 without cpu controller: usage only",
			in:   "usage_usec 501000\nuser_usec 501000\nsystem_usec 0\n",
			want: cpuStat{usageNs: 501000000, usageOK: true},
		},
		{
			name: "v1 throttled_time is nanoseconds",
			in:   "nr_periods 17\nnr_throttled 7\nthrottled_time 627918677\nnr_bursts 0\nburst_time 0\nwait_sum 5\n",
			want: cpuStat{nrPeriods: 17, nrThrottled: 7, periodsOK: true, throttledOK: true, throttledNs: 627918677, throttledNsOK: true},
		},
		{
			name: "throttle keys missing",
			in:   "nr_periods 3\n",
			want: cpuStat{nrPeriods: 3, periodsOK: true},
		},
		{name: "bad value names the line", in: "usage_usec 1\nnr_throttled x\n", errHas: "line 2: nr_throttled"},
		{name: "overflowing microseconds", in: "usage_usec 18446744073709551615\n", errHas: "overflows"},
		{name: "unknown key with junk is ignored", in: "core_sched.force_idle_usec x y\nusage_usec 2\n", want: cpuStat{usageNs: 2000, usageOK: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCPUStat([]byte(tc.in))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v, want one containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in  string
		n   int
		bad bool
	}{
		{"0-3\n", 4, false},
		{"0-3,8,10-11\n", 7, false},
		{"5", 1, false},
		{"\n", 0, false},
		{"0-1,", 0, true},
		{"3-1", 0, true},
		{"a-b", 0, true},
		{"0-99999999", 0, true},
		{"-1", 0, true},
	}
	for _, tc := range tests {
		n, err := parseCPUList([]byte(tc.in))
		if (err != nil) != tc.bad || n != tc.n {
			t.Errorf("%q: got %d, %v; want %d, bad %v", tc.in, n, err, tc.n, tc.bad)
		}
	}
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/sys/fs/cgroup`:     "/sys/fs/cgroup",
		`/srv/my\040cgroups`: "/srv/my cgroups",
		`/a\011b\012c\134d`:  "/a\tb\nc\\d",
		`/trailing\04`:       `/trailing\04`,
		`/not\999octal`:      `/not\999octal`,
		`/big\777`:           `/big\777`,
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// Resolution of the watched cgroup through mountinfo (fixtures in
// testdata/mountinfo) for every layout: the hybrid VM with split v1 cpu and
// cpuacct mounts, systemd's combined cpu,cpuacct, pure v2, and escaped mount
// points; names given as a hierarchy path, a /proc/<pid>/cgroup path, or an
// absolute path (including through the cpu → cpu,cpuacct symlink).
func TestResolveCgroup(t *testing.T) {
	hybrid := map[string]string{
		"proc/self/mountinfo":                            readTestdata(t, "mountinfo/hybrid-split"),
		"sys/fs/cgroup/cpu/app/cpu.cfs_quota_us":         "-1\n",
		"sys/fs/cgroup/cpuacct/app/cpuacct.usage":        "0\n",
		"sys/fs/cgroup/cpuset/cpuset.effective_cpus":     "0-1\n",
		"sys/fs/cgroup/unified/app/cgroup.controllers":   "\n",
		"sys/fs/cgroup/unified/only2/cgroup.controllers": "\n",
		"sys/fs/cgroup/memory/app/":                      "",
	}
	combined := map[string]string{
		"proc/self/mountinfo": readTestdata(t, "mountinfo/v1-combined"),
		"sys/fs/cgroup/cpu,cpuacct/system.slice/x.service/cpu.stat": "nr_periods 0\n",
		"sys/fs/cgroup/cpuset/system.slice/":                        "",
		"sys/fs/cgroup/cpuset/system.slice/cpuset.cpus":             "0-3\n",
		"sys/fs/cgroup/unified/system.slice/x.service/":             "",
	}
	v2 := map[string]string{
		"proc/self/mountinfo":                               readTestdata(t, "mountinfo/v2"),
		"sys/fs/cgroup/cgroup.controllers":                  "cpuset cpu io memory pids\n",
		"sys/fs/cgroup/system.slice/cpuset.cpus.effective":  "0-5\n",
		"sys/fs/cgroup/system.slice/nginx.service/cpu.stat": "usage_usec 0\n",
	}
	escaped := map[string]string{
		"proc/self/mountinfo":        readTestdata(t, "mountinfo/escaped"),
		"srv/my cgroups/app/cpu.max": "max 100000\n",
	}
	tests := []struct {
		name  string
		tree  map[string]string
		links map[string]string // symlink path → target (relative)
		cg    string
		want  cgPaths // paths relative to the root
		err   string
	}{
		{
			name: "split v1 cpu and cpuacct, hierarchy path", tree: hybrid, cg: "app",
			want: cgPaths{cpuDir: "sys/fs/cgroup/cpu/app", usageDir: "sys/fs/cgroup/cpuacct/app",
				cpusetFile: "sys/fs/cgroup/cpuset/cpuset.effective_cpus", psiDir: "sys/fs/cgroup/unified/app", anchor: "sys/fs/cgroup/cpu/app"},
		},
		{
			name: "split v1, absolute path in another hierarchy", tree: hybrid, cg: "/sys/fs/cgroup/unified/app",
			want: cgPaths{cpuDir: "sys/fs/cgroup/cpu/app", usageDir: "sys/fs/cgroup/cpuacct/app",
				cpusetFile: "sys/fs/cgroup/cpuset/cpuset.effective_cpus", psiDir: "sys/fs/cgroup/unified/app", anchor: "sys/fs/cgroup/cpu/app"},
		},
		{
			name: "split v1, /proc/<pid>/cgroup form", tree: hybrid, cg: "/app",
			want: cgPaths{cpuDir: "sys/fs/cgroup/cpu/app", usageDir: "sys/fs/cgroup/cpuacct/app",
				cpusetFile: "sys/fs/cgroup/cpuset/cpuset.effective_cpus", psiDir: "sys/fs/cgroup/unified/app", anchor: "sys/fs/cgroup/cpu/app"},
		},
		{
			name: "hybrid, cgroup only in the v2 hierarchy", tree: hybrid, cg: "only2",
			want: cgPaths{cpuDir: "sys/fs/cgroup/unified/only2", cpuV2: true, usageDir: "sys/fs/cgroup/unified/only2", usageV2: true,
				cpusetFile: "sys/fs/cgroup/cpuset/cpuset.effective_cpus", psiDir: "sys/fs/cgroup/unified/only2", anchor: "sys/fs/cgroup/unified/only2"},
		},
		{
			name: "combined cpu,cpuacct through the cpu symlink", tree: combined,
			links: map[string]string{"sys/fs/cgroup/cpu": "cpu,cpuacct", "sys/fs/cgroup/cpuacct": "cpu,cpuacct"},
			cg:    "/sys/fs/cgroup/cpu/system.slice/x.service",
			want: cgPaths{cpuDir: "sys/fs/cgroup/cpu,cpuacct/system.slice/x.service", usageDir: "sys/fs/cgroup/cpu,cpuacct/system.slice/x.service",
				cpusetFile: "sys/fs/cgroup/cpuset/system.slice/cpuset.cpus", psiDir: "sys/fs/cgroup/unified/system.slice/x.service",
				anchor: "sys/fs/cgroup/cpu,cpuacct/system.slice/x.service"},
		},
		{
			name: "pure v2, cpuset inherited from the parent", tree: v2, cg: "system.slice/nginx.service",
			want: cgPaths{cpuDir: "sys/fs/cgroup/system.slice/nginx.service", cpuV2: true, usageDir: "sys/fs/cgroup/system.slice/nginx.service", usageV2: true,
				cpusetFile: "sys/fs/cgroup/system.slice/cpuset.cpus.effective", psiDir: "sys/fs/cgroup/system.slice/nginx.service",
				anchor: "sys/fs/cgroup/system.slice/nginx.service"},
		},
		{
			name: "pure v2, absolute path", tree: v2, cg: "/sys/fs/cgroup/system.slice/nginx.service/",
			want: cgPaths{cpuDir: "sys/fs/cgroup/system.slice/nginx.service", cpuV2: true, usageDir: "sys/fs/cgroup/system.slice/nginx.service", usageV2: true,
				cpusetFile: "sys/fs/cgroup/system.slice/cpuset.cpus.effective", psiDir: "sys/fs/cgroup/system.slice/nginx.service",
				anchor: "sys/fs/cgroup/system.slice/nginx.service"},
		},
		{
			name: "escaped mount point", tree: escaped, cg: "app",
			want: cgPaths{cpuDir: "srv/my cgroups/app", cpuV2: true, usageDir: "srv/my cgroups/app", usageV2: true,
				psiDir: "srv/my cgroups/app", anchor: "srv/my cgroups/app"},
		},
		{name: "not found", tree: v2, cg: "system.slice/absent.service", err: "no such cgroup"},
		{name: "no cgroup mounts at all", tree: map[string]string{"proc/self/mountinfo": "1 0 8:1 / / rw - ext4 /dev/sda rw\n"}, cg: "x", err: "no cgroup mount"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := mkTree(t, tc.tree)
			for l, target := range tc.links {
				if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
					t.Fatal(err)
				}
			}
			s, _ := newLogged(t, Config{Root: root, Cgroup: tc.cg})
			if tc.err != "" {
				if s.cgOK || s.cgErr == nil || !strings.Contains(s.cgErr.Error(), tc.err) {
					t.Fatalf("resolved %+v (err %v), want error containing %q", s.cg, s.cgErr, tc.err)
				}
				snap := s.Sample()
				if !slices.Contains(errSources(snap), SourceCgroup) {
					t.Fatalf("unresolved cgroup not in Errors: %v", snap.Errors)
				}
				return
			}
			if !s.cgOK {
				t.Fatalf("not resolved: %v", s.cgErr)
			}
			got := s.cg
			// Compare the directories; setFiles only joins names onto them.
			got.quotaFile, got.periodFile, got.statFile, got.usageFile, got.psiFiles = "", "", "", "", [numPSIResources]string{}
			for _, p := range []*string{&got.cpuDir, &got.usageDir, &got.cpusetFile, &got.psiDir, &got.anchor} {
				if *p != "" {
					r, err := filepath.Rel(root, *p)
					if err != nil {
						t.Fatal(err)
					}
					*p = r
				}
			}
			if got != tc.want {
				t.Fatalf("resolved\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

func TestNewRejectsEscapingCgroup(t *testing.T) {
	if _, err := New(Config{Root: t.TempDir(), Cgroup: "../../etc"}, discardLogger()); err == nil {
		t.Fatal("a relative cgroup path leaving the hierarchy must be rejected")
	}
	if _, err := New(Config{}, nil); err == nil {
		t.Fatal("nil logger must be rejected")
	}
}

// cgroupTrees builds before/after roots from per-tick file sets sharing the
// common ones.
func cgroupTrees(t *testing.T, common, before, after map[string]string) (string, string) {
	t.Helper()
	mk := func(extra map[string]string) string {
		m := map[string]string{
			"proc/stat":    "cpu 0 0 0 100\ncpu0 0 0 0 25\ncpu1 0 0 0 25\ncpu2 0 0 0 25\ncpu3 0 0 0 25\nprocs_running 1\n",
			"proc/loadavg": "0.00 0.00 0.00 1/1 1\n",
		}
		for k, v := range common {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return mkTree(t, m)
	}
	return mk(before), mk(after)
}

func TestCgroupValues(t *testing.T) {
	splitMounts := map[string]string{
		"proc/self/mountinfo":                          readTestdata(t, "mountinfo/hybrid-split"),
		"sys/fs/cgroup/cpu/app/cpu.cfs_quota_us":       "50000\n",
		"sys/fs/cgroup/cpu/app/cpu.cfs_period_us":      "100000\n",
		"sys/fs/cgroup/cpuset/cpuset.effective_cpus":   "0-1\n",
		"sys/fs/cgroup/unified/app/cgroup.controllers": "\n",
	}
	v2 := func(extra map[string]string) map[string]string {
		m := map[string]string{
			"sys/fs/cgroup/cgroup.controllers":     "cpuset cpu io memory pids\n",
			"sys/fs/cgroup/app/cgroup.controllers": "cpuset cpu io memory pids\n",
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	type want map[olc.Signal]*float64
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name          string
		cg            string
		common        map[string]string
		before, after map[string]string
		interval      float64
		want          want
		quota         float64 // Snapshot.CgroupQuotaCPUs
		gap           float64 // Snapshot.CgroupThrottleGap
		errSources    []string
	}{
		{
			// Usage from the separate cpuacct mount (ns), throttling from
			// the cpu mount (ns), PSI from the unified v2 mount.
			name: "split v1 mounts", cg: "app", common: splitMounts, interval: 2,
			before: map[string]string{
				"sys/fs/cgroup/cpuacct/app/cpuacct.usage": "1000000000\n",
				"sys/fs/cgroup/cpu/app/cpu.stat":          "nr_periods 100\nnr_throttled 10\nthrottled_time 0\n",
				"sys/fs/cgroup/unified/app/cpu.pressure":  psiFile(20, 0, true),
			},
			after: map[string]string{
				"sys/fs/cgroup/cpuacct/app/cpuacct.usage": "1900000000\n",
				"sys/fs/cgroup/cpu/app/cpu.stat":          "nr_periods 120\nnr_throttled 25\nthrottled_time 1100000000\n",
				"sys/fs/cgroup/unified/app/cpu.pressure":  psiFile(20, 400000, true),
			},
			// 0.9 CPU-s over 2 s at a 0.5-CPU quota = 0.9; 15/20 throttled;
			// 1.1 s throttled; Δsome 0.4 s over 2 s = 0.2. The gap: 1.1 s ÷
			// 15 periods = 73.3 ms of run-queue time per throttled period,
			// 73.3 × 100 ÷ (73.3 + 50) = 59.5 ms of wall time.
			want: want{olc.CgroupCPUUsageOfQuota: f(0.9), olc.CgroupThrottledRatio: f(0.75), olc.CgroupThrottledS: f(1.1),
				olc.CgroupPSICPUSomeAvg10: f(0.2), olc.CgroupPSICPUSome: f(0.2), olc.CgroupPSIMemorySomeAvg10: nil},
			quota: 0.5, gap: 0.11 / 1.5 * 0.1 / (0.11/1.5 + 0.05),
		},
		{
			// Half a CPU spent on both CPUs at once: 25 ms of running, then
			// each CPU's run queue waits 75 ms: 150 ms per throttled period
			// in throttled_usec, a 75 ms gap.
			name: "v2 throttle gap on two CPUs", cg: "/sys/fs/cgroup/app", interval: 1,
			common: v2(map[string]string{"sys/fs/cgroup/app/cpu.max": "50000 100000\n"}),
			before: map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 0\nnr_periods 100\nnr_throttled 40\nthrottled_usec 6000000\n"},
			after:  map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 500000\nnr_periods 110\nnr_throttled 50\nthrottled_usec 7500000\n"},
			want:   want{olc.CgroupCPUUsageOfQuota: f(1), olc.CgroupThrottledRatio: f(1), olc.CgroupThrottledS: f(1.5)},
			quota:  0.5, gap: 0.075,
		},
		{
			// Throttled in 2 of 10 periods, 4 ms each on a 1-CPU quota: the
			// quota ran out late in those periods.
			name: "v1 short throttle gap", cg: "/sys/fs/cgroup/cpu,cpuacct/app", interval: 1,
			common: map[string]string{"sys/fs/cgroup/cpu,cpuacct/app/cpu.cfs_quota_us": "100000\n", "sys/fs/cgroup/cpu,cpuacct/app/cpu.cfs_period_us": "100000\n"},
			before: map[string]string{"sys/fs/cgroup/cpu,cpuacct/app/cpu.stat": "nr_periods 5\nnr_throttled 0\nthrottled_time 0\n", "sys/fs/cgroup/cpu,cpuacct/app/cpuacct.usage": "0\n"},
			after:  map[string]string{"sys/fs/cgroup/cpu,cpuacct/app/cpu.stat": "nr_periods 15\nnr_throttled 2\nthrottled_time 8000000\n", "sys/fs/cgroup/cpu,cpuacct/app/cpuacct.usage": "900000000\n"},
			want:   want{olc.CgroupCPUUsageOfQuota: f(0.9), olc.CgroupThrottledRatio: f(0.2), olc.CgroupThrottledS: f(0.008)},
			quota:  1, gap: 0.004 * 0.1 / (0.004 + 0.1),
		},
		{
			name: "max quota: unavailable, not 0, not an error", cg: "/sys/fs/cgroup/app", interval: 1,
			common: v2(map[string]string{"sys/fs/cgroup/app/cpu.max": "max 100000\n"}),
			before: map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n"},
			after:  map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 3000000\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n"},
			want:   want{olc.CgroupCPUUsageOfQuota: nil, olc.CgroupThrottledRatio: nil, olc.CgroupThrottledS: f(0)},
		},
		{
			// 4 CPUs of quota but only CPUs 0-1 to run on: 2 CPU-s in 1 s is
			// the whole usable quota (1.0), not half of it.
			name: "cpuset-bounded quota", cg: "app", interval: 1,
			common: v2(map[string]string{
				"proc/self/mountinfo":                     readTestdata(t, "mountinfo/v2"),
				"sys/fs/cgroup/app/cpu.max":               "400000 100000\n",
				"sys/fs/cgroup/app/cpuset.cpus.effective": "0-1\n",
			}),
			before: map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 1000000\n"},
			after:  map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 3000000\n"},
			want:   want{olc.CgroupCPUUsageOfQuota: f(1), olc.CgroupThrottledRatio: nil, olc.CgroupThrottledS: nil},
			quota:  2,
		},
		{
			// No cpuset file anywhere: the 4 online CPUs (cpuN lines) bound
			// an 8-CPU quota.
			name: "quota above the online CPUs", cg: "/sys/fs/cgroup/app", interval: 1,
			common: v2(map[string]string{"sys/fs/cgroup/app/cpu.max": "800000 100000\n"}),
			before: map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 0\n"},
			after:  map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 2000000\n"},
			want:   want{olc.CgroupCPUUsageOfQuota: f(0.5)},
			quota:  4,
		},
		{
			// CFS enforces the quota per 100 ms period; a tick not aligned
			// with the periods holds up to one period's quota more. 1.08
			// CPU-s in 1 s at a 1-CPU quota is the quota used in full.
			name: "usage over the quota by period alignment reads 1", cg: "/sys/fs/cgroup/app", interval: 1,
			common: v2(map[string]string{"sys/fs/cgroup/app/cpu.max": "100000 100000\n"}),
			before: map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 1000000\n"},
			after:  map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 2080000\n"},
			want:   want{olc.CgroupCPUUsageOfQuota: f(1)},
			quota:  1,
		},
		{
			// The same on v1 with a 0.5-CPU quota: 0.6 CPU-s in 1 s.
			name: "v1 usage over the quota by period alignment reads 1", cg: "app", common: splitMounts, interval: 1,
			before: map[string]string{"sys/fs/cgroup/cpuacct/app/cpuacct.usage": "1000000000\n"},
			after:  map[string]string{"sys/fs/cgroup/cpuacct/app/cpuacct.usage": "1600000000\n"},
			want:   want{olc.CgroupCPUUsageOfQuota: f(1)},
			quota:  0.5,
		},
		{
			// 3.5 CPU-s in 1 s at a 1-CPU quota is no alignment effect: the
			// reading stays as it is, and the controller discards it.
			name: "usage far over the quota stays as read", cg: "/sys/fs/cgroup/app", interval: 1,
			common: v2(map[string]string{"sys/fs/cgroup/app/cpu.max": "100000 100000\n"}),
			before: map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 0\n"},
			after:  map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 3500000\n"},
			want:   want{olc.CgroupCPUUsageOfQuota: f(3.5)},
			quota:  1,
		},
		{
			name: "v1 -1 quota and missing throttled_time", cg: "/sys/fs/cgroup/cpu,cpuacct/app", interval: 1,
			common: map[string]string{"sys/fs/cgroup/cpu,cpuacct/app/cpu.cfs_quota_us": "-1\n", "sys/fs/cgroup/cpu,cpuacct/app/cpu.cfs_period_us": "100000\n"},
			before: map[string]string{"sys/fs/cgroup/cpu,cpuacct/app/cpu.stat": "nr_periods 5\nnr_throttled 0\n", "sys/fs/cgroup/cpu,cpuacct/app/cpuacct.usage": "0\n"},
			after:  map[string]string{"sys/fs/cgroup/cpu,cpuacct/app/cpu.stat": "nr_periods 9\nnr_throttled 1\n", "sys/fs/cgroup/cpu,cpuacct/app/cpuacct.usage": "500\n"},
			want:   want{olc.CgroupCPUUsageOfQuota: nil, olc.CgroupThrottledRatio: f(0.25), olc.CgroupThrottledS: nil},
		},
		{
			// A counter reset (the service's cgroup was recreated) is not a
			// measurement.
			name: "usage went backwards", cg: "/sys/fs/cgroup/app", interval: 1,
			common: v2(map[string]string{"sys/fs/cgroup/app/cpu.max": "100000 100000\n"}),
			before: map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 9000000\nnr_periods 50\nnr_throttled 5\nthrottled_usec 900\n"},
			after:  map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 10\nnr_periods 1\nnr_throttled 0\nthrottled_usec 0\n"},
			want:   want{olc.CgroupCPUUsageOfQuota: nil, olc.CgroupThrottledRatio: nil, olc.CgroupThrottledS: nil},
		},
		{
			name: "corrupt quota is an error for the cgroup cpu source only", cg: "/sys/fs/cgroup/app", interval: 1,
			common:     v2(map[string]string{"sys/fs/cgroup/app/cpu.max": "lots 100000\n", "sys/fs/cgroup/app/memory.pressure": psiFile(1, 0, true)}),
			before:     map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 0\nnr_periods 0\nnr_throttled 0\n"},
			after:      map[string]string{"sys/fs/cgroup/app/cpu.stat": "usage_usec 1\nnr_periods 10\nnr_throttled 1\n"},
			want:       want{olc.CgroupCPUUsageOfQuota: nil, olc.CgroupThrottledRatio: f(0.1), olc.CgroupPSIMemorySomeAvg10: f(0.01)},
			errSources: []string{SourceCgroupCPU},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, after := cgroupTrees(t, tc.common, tc.before, tc.after)
			snap := sampleRoots(t, before, after, Config{Cgroup: tc.cg}, tc.interval)
			for sig, w := range tc.want {
				got, ok := snap.Get(sig)
				switch {
				case w == nil && ok:
					t.Errorf("%s = %v, want unavailable", sig, got)
				case w != nil && !ok:
					t.Errorf("%s unavailable, want %v; errors %v", sig, *w, snap.Errors)
				case w != nil && math.Abs(got-*w) > 1e-9:
					t.Errorf("%s = %v, want %v", sig, got, *w)
				}
			}
			if snap.CgroupQuotaCPUs != tc.quota {
				t.Errorf("CgroupQuotaCPUs = %v, want %v", snap.CgroupQuotaCPUs, tc.quota)
			}
			if math.Abs(snap.CgroupThrottleGap-tc.gap) > 1e-9 {
				t.Errorf("CgroupThrottleGap = %v, want %v", snap.CgroupThrottleGap, tc.gap)
			}
			got := errSources(snap)
			if !slices.Equal(got, tc.errSources) {
				t.Errorf("error sources %v, want %v: %v", got, tc.errSources, snap.Errors)
			}
		})
	}
}

// A cgroup that disappears (service stopped) is an error while it is gone;
// when it comes back it is resolved again, and the first tick after that
// gives no deltas, because the new cgroup's counters started from zero.
func TestCgroupVanishesAndReturns(t *testing.T) {
	root := mkTree(t, map[string]string{
		"proc/stat":                            "cpu 0 0 0 100\ncpu0 0 0 0 100\nprocs_running 1\n",
		"proc/loadavg":                         "0.00 0.00 0.00 1/1 1\n",
		"sys/fs/cgroup/cgroup.controllers":     "cpu\n",
		"sys/fs/cgroup/app/cgroup.controllers": "cpu\n",
		"sys/fs/cgroup/app/cpu.max":            "100000 100000\n",
		"sys/fs/cgroup/app/cpu.stat":           "usage_usec 0\n",
	})
	s, _ := newLogged(t, Config{Root: root, Cgroup: "/sys/fs/cgroup/app"})
	s.cgRetry = 0
	s.Sample()
	snap := s.Sample()
	if _, ok := snap.Get(olc.CgroupCPUUsageOfQuota); !ok {
		t.Fatalf("usage_of_quota unavailable with the cgroup present: %v", snap.Errors)
	}
	app := filepath.Join(root, "sys/fs/cgroup/app")
	if err := os.RemoveAll(app); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		snap = s.Sample()
		if !slices.Contains(errSources(snap), SourceCgroup) {
			t.Fatalf("vanished cgroup not reported: %v", snap.Errors)
		}
		if _, ok := snap.Get(olc.CgroupCPUUsageOfQuota); ok {
			t.Fatal("a value for a vanished cgroup")
		}
	}
	writeFiles(t, root, map[string]string{
		"sys/fs/cgroup/app/cgroup.controllers": "cpu\n",
		"sys/fs/cgroup/app/cpu.max":            "100000 100000\n",
		"sys/fs/cgroup/app/cpu.stat":           "usage_usec 5000000\n",
	})
	snap = s.Sample()
	if len(snap.Errors) != 0 {
		t.Fatalf("errors after the cgroup returned: %v", snap.Errors)
	}
	if v, ok := snap.Get(olc.CgroupCPUUsageOfQuota); ok {
		t.Fatalf("usage_of_quota = %v on the first tick of a new cgroup, want unavailable", v)
	}
	snap = s.Sample()
	if _, ok := snap.Get(olc.CgroupCPUUsageOfQuota); !ok {
		t.Fatalf("usage_of_quota unavailable on the second tick: %v", snap.Errors)
	}
}

// A cgroup missing at start (the daemon started before the service) is
// looked up again later, not only at New.
func TestCgroupAppearsLater(t *testing.T) {
	root := mkTree(t, map[string]string{
		"proc/self/mountinfo":              readTestdata(t, "mountinfo/v2"),
		"sys/fs/cgroup/cgroup.controllers": "cpu\n",
	})
	s, logs := newLogged(t, Config{Root: root, Cgroup: "system.slice/late.service"})
	if s.cgOK {
		t.Fatal("resolved a cgroup that does not exist")
	}
	s.cgRetry, s.cgNextRetry = 0, time.Time{}
	s.Sample()
	s.Sample()
	if n := logs.count("watched cgroup not found"); n != 1 {
		t.Errorf("not-found warning logged %d times, want once", n)
	}
	writeFiles(t, root, map[string]string{"sys/fs/cgroup/system.slice/late.service/cpu.stat": "usage_usec 1\n"})
	snap := s.Sample()
	if !s.cgOK || slices.Contains(errSources(snap), SourceCgroup) {
		t.Fatalf("not resolved after the cgroup appeared: %v %v", s.cgErr, snap.Errors)
	}
}

func TestLXCFSWarnsOnce(t *testing.T) {
	for _, tc := range []struct {
		mountinfo string
		warnings  int
	}{
		{"mountinfo/lxcfs", 1},
		{"mountinfo/v2", 0},
		{"mountinfo/hybrid-split", 0},
	} {
		t.Run(tc.mountinfo, func(t *testing.T) {
			root := mkTree(t, map[string]string{
				"proc/self/mountinfo": readTestdata(t, tc.mountinfo),
				"proc/loadavg":        "9.00 9.00 9.00 1/1 1\n",
			})
			s, logs := newLogged(t, Config{Root: root})
			for range 3 {
				s.Sample()
			}
			if n := logs.count("path=/proc/loadavg"); n != tc.warnings {
				t.Errorf("lxcfs loadavg warning logged %d times, want %d:\n%s", n, tc.warnings, logs)
			}
			if tc.warnings > 0 && !strings.Contains(logs.String(), "level=WARN") {
				t.Errorf("lxcfs notice is not a warning:\n%s", logs)
			}
		})
	}
}

// TestThrottleGap: the wall time per throttled period from the throttled
// run-queue time per throttled period (kernel/sched/fair.c sums it over the
// CPUs), the quota and the period.
func TestThrottleGap(t *testing.T) {
	tests := []struct {
		name      string
		sum, q, P float64
		want      float64
	}{
		{"half a CPU on one CPU: 50 ms run, 50 ms wait", 0.05, 0.5, 0.1, 0.05},
		{"half a CPU on two CPUs: 25 ms run, 75 ms wait on each", 0.15, 0.5, 0.1, 0.075},
		{"a quarter CPU on two CPUs: 12.5 ms run, 87.5 ms wait on each", 0.175, 0.25, 0.1, 0.0875},
		{"a quota that ran out late: at most the sum", 0.005, 0.5, 0.1, 0.005},
		{"no throttled time", 0, 0.5, 0.1, 0},
		{"unknown period", 0.05, 0.5, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := throttleGap(tc.sum, tc.q, tc.P); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("throttleGap(%v, %v, %v) = %v, want %v", tc.sum, tc.q, tc.P, got, tc.want)
			}
		})
	}
}
