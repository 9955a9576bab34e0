package sampler

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/prometheus/procfs"
)

// cgMount is one cgroup hierarchy mount, by its path inside the root.
type cgMount struct {
	point string // absolute, cleaned, e.g. "/sys/fs/cgroup/cpu,cpuacct"
	v2    bool
	// v1 controllers bound to this hierarchy (from the superblock options).
	cpu, cpuacct, cpuset bool
}

// cgroupMounts picks the cgroup and cgroup2 mounts out of mountinfo.
func cgroupMounts(infos []*procfs.MountInfo) []cgMount {
	var out []cgMount
	for _, mi := range infos {
		m := cgMount{point: path.Clean(unescapeMountPath(mi.MountPoint))}
		switch mi.FSType {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			_, m.cpu = mi.SuperOptions["cpu"]
			_, m.cpuacct = mi.SuperOptions["cpuacct"]
			_, m.cpuset = mi.SuperOptions["cpuset"]
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

// layoutMounts infers the cgroup mounts from the conventional layout under
// <root>/sys/fs/cgroup when mountinfo cannot be read (fixture roots, or a
// root that is a copy rather than a live system): a cgroup.controllers file
// at the top means a v2 mount there; otherwise each directory named after
// controllers ("cpu", "cpuacct", "cpu,cpuacct", "cpuset") is a v1 hierarchy
// and "unified" is the hybrid v2 mount (systemd's name for it).
func layoutMounts(root string) []cgMount {
	const base = "/sys/fs/cgroup"
	if fileExists(filepath.Join(root, base, "cgroup.controllers")) {
		return []cgMount{{point: base, v2: true}}
	}
	entries, err := os.ReadDir(filepath.Join(root, base))
	if err != nil {
		return nil
	}
	var out []cgMount
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := path.Join(base, e.Name())
		if e.Name() == "unified" {
			out = append(out, cgMount{point: p, v2: true})
			continue
		}
		m := cgMount{point: p}
		for _, c := range strings.Split(e.Name(), ",") {
			switch c {
			case "cpu":
				m.cpu = true
			case "cpuacct":
				m.cpuacct = true
			case "cpuset":
				m.cpuset = true
			}
		}
		if m.cpu || m.cpuacct || m.cpuset {
			out = append(out, m)
		}
	}
	return out
}

// cgPaths says where each cgroup value is read, as full paths under the root.
// An empty field means the value does not exist for this cgroup.
type cgPaths struct {
	// cpuDir holds the quota (cpu.max or cpu.cfs_quota_us/cfs_period_us)
	// and cpu.stat with the throttling counters.
	cpuDir string
	cpuV2  bool
	// usageDir holds the usage counter: cpu.stat usage_usec (v2) or
	// cpuacct.usage (v1, which may be a separate hierarchy from cpu).
	usageDir string
	usageV2  bool
	// cpusetFile lists the CPUs the cgroup may run on.
	cpusetFile string
	// psiDir holds cpu.pressure, memory.pressure and io.pressure (v2).
	psiDir string
	// anchor is the directory whose disappearance means the cgroup is gone.
	anchor string

	// The files read each tick, joined once by setFiles so a tick builds
	// no paths. "" = not read.
	quotaFile, periodFile, statFile, usageFile string
	psiFiles                                   [numPSIResources]string
}

// setFiles derives the per-tick file paths from the directories.
func (p *cgPaths) setFiles() {
	if p.cpuDir != "" {
		p.statFile = filepath.Join(p.cpuDir, "cpu.stat")
		if p.cpuV2 {
			p.quotaFile = filepath.Join(p.cpuDir, "cpu.max")
		} else {
			p.quotaFile = filepath.Join(p.cpuDir, "cpu.cfs_quota_us")
			p.periodFile = filepath.Join(p.cpuDir, "cpu.cfs_period_us")
		}
	}
	if p.usageDir != "" {
		if p.usageV2 {
			p.usageFile = filepath.Join(p.usageDir, "cpu.stat")
		} else {
			p.usageFile = filepath.Join(p.usageDir, "cpuacct.usage")
		}
	}
	if p.psiDir != "" {
		for r := range numPSIResources {
			p.psiFiles[r] = filepath.Join(p.psiDir, cgroupPSIFile[r])
		}
	}
}

// describe is for the log line written when the cgroup is resolved.
func (p cgPaths) describe() []any {
	ver := "v1"
	if p.cpuV2 {
		ver = "v2"
	}
	return []any{"cpu_version", ver, "cpu_dir", p.cpuDir, "usage_dir", p.usageDir,
		"cpuset_file", p.cpusetFile, "psi_dir", p.psiDir}
}

// resolveCgroup finds the watched cgroup. name is either
//   - an absolute path inside the root ("/sys/fs/cgroup/system.slice/x.service",
//     "/sys/fs/cgroup/cpu,cpuacct/app"): the mount holding it gives the path
//     inside the hierarchy, which is then looked up in every hierarchy;
//   - a path inside the hierarchy ("system.slice/nginx.service", or with a
//     leading slash as /proc/<pid>/cgroup prints it, when no such directory
//     exists under the root).
//
// Each value comes from the hierarchy that carries its controller: cpu quota
// and throttling from the v1 cpu hierarchy when the cgroup exists there,
// otherwise from v2; v1 usage from cpuacct (combined with cpu or a separate
// mount); the cpuset from the cpuset hierarchy, walking up to the nearest
// ancestor that has the file (a v2 cgroup without the cpuset controller runs
// on its parent's CPUs); PSI from the v2 directory, hybrid hosts included.
// A directory under no known mount is read as it is: v2 when it holds
// cgroup.controllers, v1 otherwise.
func resolveCgroup(root, name string, mounts []cgMount) (cgPaths, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return cgPaths{}, errors.New("empty cgroup name")
	}
	var rel string
	if path.IsAbs(name) {
		p := path.Clean(name)
		if real, err := filepath.EvalSymlinks(filepath.Join(root, p)); err == nil {
			if r, ok := insideRoot(root, real); ok {
				p = r
			}
		}
		if m := mountOf(mounts, p); m != nil {
			rel = strings.TrimPrefix(strings.TrimPrefix(p, m.point), "/")
		} else {
			// Not under a cgroup mount: a cgroup path as /proc/<pid>/cgroup
			// prints it ("/system.slice/x.service", "/" for the root), or
			// failing that a cgroup directory outside the known mounts.
			got, err := resolveRel(root, name, strings.TrimPrefix(p, "/"), mounts)
			if err != nil && p != "/" && dirExists(filepath.Join(root, p)) {
				return standaloneCgroup(filepath.Join(root, p)), nil
			}
			return got, err
		}
	} else {
		rel = path.Clean(name)
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return cgPaths{}, fmt.Errorf("cgroup %q: leaves the hierarchy", name)
		}
		if rel == "." {
			rel = ""
		}
	}
	return resolveRel(root, name, rel, mounts)
}

// resolveRel looks up rel, a path inside the cgroup hierarchy, in every
// mounted hierarchy (see resolveCgroup). name is for error messages.
func resolveRel(root, name, rel string, mounts []cgMount) (cgPaths, error) {
	var v2, cpuM, acctM, setM *cgMount
	for i := range mounts {
		m := &mounts[i]
		switch {
		case m.v2 && v2 == nil:
			v2 = m
		case !m.v2:
			if m.cpu && cpuM == nil {
				cpuM = m
			}
			if m.cpuacct && acctM == nil {
				acctM = m
			}
			if m.cpuset && setM == nil {
				setM = m
			}
		}
	}
	in := func(m *cgMount) string {
		if m == nil {
			return ""
		}
		d := filepath.Join(root, m.point, rel)
		if dirExists(d) {
			return d
		}
		return ""
	}
	d2, dCPU, dAcct := in(v2), in(cpuM), in(acctM)

	var p cgPaths
	switch {
	case dCPU != "":
		p.cpuDir, p.anchor = dCPU, dCPU
		switch {
		case dAcct != "":
			p.usageDir = dAcct
		case d2 != "":
			p.usageDir, p.usageV2 = d2, true
		}
	case d2 != "":
		p.cpuDir, p.cpuV2, p.usageDir, p.usageV2, p.anchor = d2, true, d2, true, d2
	case dAcct != "":
		p.usageDir, p.anchor = dAcct, dAcct
	default:
		points := make([]string, 0, len(mounts))
		for _, m := range mounts {
			points = append(points, m.point)
		}
		if len(points) == 0 {
			return cgPaths{}, fmt.Errorf("cgroup %q: no cgroup mount found under %s", name, root)
		}
		return cgPaths{}, fmt.Errorf("cgroup %q: no such cgroup under %s", name, strings.Join(points, ", "))
	}
	p.psiDir = d2
	switch {
	case setM != nil:
		if d := nearestDir(root, setM.point, rel); d != "" {
			p.cpusetFile = firstFile(d, "cpuset.effective_cpus", "cpuset.cpus")
		}
	case v2 != nil && d2 != "":
		p.cpusetFile = nearestFile(root, v2.point, rel, "cpuset.cpus.effective")
	}
	return p, nil
}

// standaloneCgroup reads a directory that is under no known cgroup mount.
// It is v1 when it has a v1-only file (cpu.cfs_quota_us, cpuacct.usage) and
// no v2-only one (cgroup.controllers, cpu.max); v2 otherwise, since every v2
// cgroup has cpu.stat with usage_usec.
func standaloneCgroup(dir string) cgPaths {
	v2 := firstFile(dir, "cgroup.controllers", "cpu.max") != ""
	v1 := firstFile(dir, "cpu.cfs_quota_us", "cpuacct.usage") != ""
	if v1 && !v2 {
		return cgPaths{cpuDir: dir, usageDir: dir, anchor: dir,
			cpusetFile: firstFile(dir, "cpuset.effective_cpus", "cpuset.cpus")}
	}
	return cgPaths{cpuDir: dir, cpuV2: true, usageDir: dir, usageV2: true, psiDir: dir,
		anchor: dir, cpusetFile: firstFile(dir, "cpuset.cpus.effective")}
}

// mountOf returns the mount with the longest mount point containing p.
func mountOf(mounts []cgMount, p string) *cgMount {
	var best *cgMount
	for i := range mounts {
		m := &mounts[i]
		if p == m.point || strings.HasPrefix(p, m.point+"/") || m.point == "/" {
			if best == nil || len(m.point) > len(best.point) {
				best = m
			}
		}
	}
	return best
}

// insideRoot turns a full path back into a path inside root.
func insideRoot(root, full string) (string, bool) {
	r, err := filepath.Rel(root, full)
	if err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return "", false
	}
	return "/" + filepath.ToSlash(r), true
}

// nearestDir returns the deepest existing directory on the way from
// point/rel up to point.
func nearestDir(root, point, rel string) string {
	for {
		d := filepath.Join(root, point, rel)
		if dirExists(d) {
			return d
		}
		if rel == "" || rel == "." {
			return ""
		}
		rel = path.Dir(rel)
		if rel == "." {
			rel = ""
		}
	}
}

// nearestFile returns the file named name in the deepest directory from
// point/rel up to point that has it.
func nearestFile(root, point, rel, name string) string {
	for {
		f := filepath.Join(root, point, rel, name)
		if fileExists(f) {
			return f
		}
		if rel == "" || rel == "." {
			return ""
		}
		rel = path.Dir(rel)
		if rel == "." {
			rel = ""
		}
	}
}

func firstFile(dir string, names ...string) string {
	for _, n := range names {
		if f := filepath.Join(dir, n); fileExists(f) {
			return f
		}
	}
	return ""
}
