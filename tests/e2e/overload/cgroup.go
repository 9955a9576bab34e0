package overload

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/olcd/olcd/internal/testutil"
)

// cfsPeriod is the CFS period the harness sets (the kernel default, 100 ms).
const cfsPeriod = 100 * time.Millisecond

// Cgroup is the backend's CPU cgroup: cgroup v2 when a cgroup2 hierarchy has
// the cpu controller, otherwise the v1 cpu (and cpuacct) hierarchies.
type Cgroup struct {
	// Name is the cgroup's path inside its hierarchy, as olcd's `cgroup:`
	// key takes it.
	Name string
	// V2 is true on the unified hierarchy.
	V2 bool
	// cpuDir holds the quota files (cpu.max, or cpu.cfs_*); usageDir the
	// usage counter (cpu.stat, or cpuacct.usage). procsDirs are every
	// directory the backend joins.
	cpuDir, usageDir string
	procsDirs        []string
}

// cgroupMounts finds the hierarchies to use: a cgroup2 mount whose root
// offers the cpu controller, or else the v1 mounts with the cpu and cpuacct
// controllers (one mount when they are co-mounted).
func cgroupMounts() (v2 string, cpu, cpuacct string, err error) {
	mounts, err := procfs.GetMounts()
	if err != nil {
		return "", "", "", fmt.Errorf("read mountinfo: %w", err)
	}
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup2":
			ctrl, err := os.ReadFile(filepath.Join(m.MountPoint, "cgroup.controllers"))
			if err == nil && hasWord(string(ctrl), "cpu") && v2 == "" {
				v2 = m.MountPoint
			}
		case "cgroup":
			if _, ok := m.SuperOptions["cpu"]; ok && cpu == "" {
				cpu = m.MountPoint
			}
			if _, ok := m.SuperOptions["cpuacct"]; ok && cpuacct == "" {
				cpuacct = m.MountPoint
			}
		}
	}
	if v2 == "" && (cpu == "" || cpuacct == "") {
		return "", "", "", errors.New("no cgroup hierarchy with the cpu controller: neither a cgroup2 mount offering cpu nor v1 cpu and cpuacct mounts")
	}
	return v2, cpu, cpuacct, nil
}

// cgroupRoots lists the hierarchies the harness creates cgroups in.
func cgroupRoots() []string {
	v2, cpu, cpuacct, err := cgroupMounts()
	switch {
	case err != nil:
		return nil
	case v2 != "":
		return []string{v2}
	case cpu == cpuacct:
		return []string{cpu}
	default:
		return []string{cpu, cpuacct}
	}
}

// newCgroup creates the cgroup name (a single path element) with no quota.
func newCgroup(name string) (*Cgroup, error) {
	v2, cpu, cpuacct, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	c := &Cgroup{Name: name}
	if v2 != "" {
		c.V2 = true
		// The cpu controller must be enabled for the root's children.
		ctl := filepath.Join(v2, "cgroup.subtree_control")
		if b, err := os.ReadFile(ctl); err == nil && !hasWord(string(b), "cpu") {
			if err := os.WriteFile(ctl, []byte("+cpu"), 0); err != nil {
				return nil, fmt.Errorf("enable the cpu controller in %s: %w", ctl, err)
			}
		}
		c.cpuDir = filepath.Join(v2, name)
		c.usageDir = c.cpuDir
		c.procsDirs = []string{c.cpuDir}
	} else {
		c.cpuDir = filepath.Join(cpu, name)
		c.usageDir = filepath.Join(cpuacct, name)
		c.procsDirs = []string{c.cpuDir}
		if c.usageDir != c.cpuDir {
			c.procsDirs = append(c.procsDirs, c.usageDir)
		}
	}
	for _, d := range c.procsDirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			c.Close()
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
	}
	return c, nil
}

// ProcsFiles are the cgroup.procs files a process writes its PID to in
// order to join the cgroup.
func (c *Cgroup) ProcsFiles() []string {
	var files []string
	for _, d := range c.procsDirs {
		files = append(files, filepath.Join(d, "cgroup.procs"))
	}
	return files
}

// SetQuota limits the cgroup to cpus CPUs (e.g. 1 or 0.5) per CFS period.
func (c *Cgroup) SetQuota(cpus float64) error {
	quota := int64(cpus * float64(cfsPeriod/time.Microsecond))
	period := int64(cfsPeriod / time.Microsecond)
	if c.V2 {
		f := filepath.Join(c.cpuDir, "cpu.max")
		if err := os.WriteFile(f, fmt.Appendf(nil, "%d %d", quota, period), 0); err != nil {
			return fmt.Errorf("set quota in %s: %w", f, err)
		}
		return nil
	}
	for _, kv := range []struct {
		file string
		v    int64
	}{{"cpu.cfs_period_us", period}, {"cpu.cfs_quota_us", quota}} {
		f := filepath.Join(c.cpuDir, kv.file)
		if err := os.WriteFile(f, strconv.AppendInt(nil, kv.v, 10), 0); err != nil {
			return fmt.Errorf("set quota in %s: %w", f, err)
		}
	}
	return nil
}

// Usage returns the CPU time the cgroup's tasks used since it was created.
func (c *Cgroup) Usage() (time.Duration, error) {
	if c.V2 {
		f := filepath.Join(c.usageDir, "cpu.stat")
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", f, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("parse usage_usec in %s: %w", f, err)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
		return 0, fmt.Errorf("%s: no usage_usec line", f)
	}
	f := filepath.Join(c.usageDir, "cpuacct.usage")
	b, err := os.ReadFile(f)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", f, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", f, err)
	}
	return time.Duration(ns), nil
}

// Close kills whatever still runs in the cgroup and removes it.
func (c *Cgroup) Close() {
	for _, d := range c.procsDirs {
		killCgroup(d)
	}
	for _, d := range c.procsDirs {
		// The killed tasks leave asynchronously; what stays is reported by
		// the next run's leftover removal.
		_ = testutil.WaitFor(time.Second, 20*time.Millisecond, func() (bool, error) {
			err := os.Remove(d)
			return err == nil || os.IsNotExist(err), err
		})
	}
}

// killCgroup sends SIGKILL to every process in the cgroup directory dir.
func killCgroup(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// hasWord reports whether the space-separated list s contains w.
func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}
