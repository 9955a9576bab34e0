package sampler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/olcd/olcd/internal/olc"
)

// DefaultInterval is the tick used by Run when it is given none.
const DefaultInterval = 500 * time.Millisecond

// cgroupRetry is how often a watched cgroup that cannot be found is looked
// up again (it re-reads mountinfo, which is large on busy hosts).
const cgroupRetry = 5 * time.Second

// Source names used in SourceError.Source and as a metrics label. They are
// stable: renaming one breaks dashboards.
const (
	SourceProcStat        = "proc_stat"         // /proc/stat
	SourceLoadavg         = "loadavg"           // /proc/loadavg
	SourcePSICPU          = "psi_cpu"           // /proc/pressure/cpu
	SourcePSIMemory       = "psi_memory"        // /proc/pressure/memory
	SourcePSIIO           = "psi_io"            // /proc/pressure/io
	SourceNetstat         = "netstat"           // /proc/net/netstat
	SourceSockDiag        = "sock_diag"         // NETLINK_SOCK_DIAG LISTEN dump
	SourceCgroup          = "cgroup"            // finding the watched cgroup
	SourceCgroupCPU       = "cgroup_cpu"        // quota, cpu.stat, cpuacct.usage
	SourceCgroupCpuset    = "cgroup_cpuset"     // effective cpuset
	SourceCgroupPSICPU    = "cgroup_psi_cpu"    // <cgroup>/cpu.pressure
	SourceCgroupPSIMemory = "cgroup_psi_memory" // <cgroup>/memory.pressure
	SourceCgroupPSIIO     = "cgroup_psi_io"     // <cgroup>/io.pressure
)

// Config says what to sample.
type Config struct {
	// Root is the filesystem root holding proc/ and sys/: "/" in
	// production, a fixture tree in tests. "" means "/".
	Root string
	// Cgroup is the watched cgroup: an absolute path under Root
	// ("/sys/fs/cgroup/system.slice/nginx.service") or a path inside the
	// cgroup hierarchy ("system.slice/nginx.service"), resolved through
	// Root/proc/self/mountinfo. "" watches no cgroup.
	Cgroup string
	// TCPPorts are the protected TCP ports whose accept queues are read.
	TCPPorts []uint16
}

// Sampler reads the canonical signals. Sample and Run may be called from one
// goroutine at a time; SetTCPPorts may be called from any goroutine.
type Sampler struct {
	log  *slog.Logger
	root string

	pathStat, pathNetstat string
	pathPSI               [numPSIResources]string

	// Injection points; tests replace them to simulate kernel behaviour a
	// fixture tree cannot (EOPNOTSUPP from a pressure file with psi=0).
	readFile readFileFunc
	loadAvg  func() (float64, error)
	nodePSI  func(res psiResource) (procfs.PSIStats, error)

	procFS   procfs.FS
	procFSOK bool

	cgName      string
	cg          cgPaths
	cgOK        bool
	cgGen       uint64
	cgErr       error
	cgNextRetry time.Time
	cgRetry     time.Duration // cgroupRetry; tests shorten it

	portsMu  sync.Mutex
	ports    []uint16 // sorted, unique; copied into fills each tick
	portsGen uint64

	mu       sync.Mutex
	prev     reading
	cur      reading
	havePrev bool
	buf      []byte // whole-file reads
	statBuf  []byte // /proc/stat streaming
	diagBuf  []byte
	portIdx  map[uint16]int
	fillV    fillVisitor
	idxGen   uint64
	noted    map[noteKey]struct{}
}

// noteKey identifies a condition logged once per Sampler.
type noteKey struct {
	source string
	what   string
}

// New returns a Sampler for cfg. It reads Root/proc/self/mountinfo once to
// resolve the cgroup and to warn when /proc/loadavg is an lxcfs mount. A
// cgroup that does not exist yet is not an error: it is looked up again every
// few seconds and reported in Snapshot.Errors meanwhile. Errors: a nil
// logger, or a relative cgroup path that leaves the hierarchy ("../x").
func New(cfg Config, log *slog.Logger) (*Sampler, error) {
	if log == nil {
		return nil, errors.New("new sampler: nil logger")
	}
	root := cfg.Root
	if root == "" {
		root = "/"
	}
	root = filepath.Clean(root)
	cg := strings.TrimSpace(cfg.Cgroup)
	if cg != "" && !path.IsAbs(cg) {
		if c := path.Clean(cg); c == ".." || strings.HasPrefix(c, "../") {
			return nil, fmt.Errorf("new sampler: cgroup %q leaves the cgroup hierarchy", cfg.Cgroup)
		}
	}
	s := &Sampler{
		log:         log,
		root:        root,
		pathStat:    filepath.Join(root, "proc/stat"),
		pathNetstat: filepath.Join(root, "proc/net/netstat"),
		readFile:    readFileInto,
		cgName:      cg,
		cgRetry:     cgroupRetry,
		buf:         make([]byte, 8192),
		statBuf:     make([]byte, statLineBuf),
		noted:       make(map[noteKey]struct{}),
		portIdx:     make(map[uint16]int),
	}
	for r := range numPSIResources {
		s.pathPSI[r] = filepath.Join(root, "proc/pressure", psiResourceNames[r])
	}
	s.loadAvg = func() (float64, error) {
		fs, err := s.fs()
		if err != nil {
			return 0, err
		}
		la, err := fs.LoadAvg()
		if err != nil {
			return 0, err
		}
		return la.Load1, nil
	}
	s.nodePSI = func(res psiResource) (procfs.PSIStats, error) {
		fs, err := s.fs()
		if err != nil {
			return procfs.PSIStats{}, fmt.Errorf("%w: %w", procfs.ErrFileRead, err)
		}
		return fs.PSIStatsForResource(psiResourceNames[res])
	}
	s.SetTCPPorts(cfg.TCPPorts)

	mounts, err := s.mountInfo()
	if err != nil {
		log.Debug("mountinfo unreadable; cgroup mounts inferred from the /sys/fs/cgroup layout",
			"path", filepath.Join(root, "proc/self/mountinfo"), "err", err)
	}
	s.checkLXCFS(mounts)
	if s.cgName != "" {
		s.resolve(cgroupMountsOrLayout(root, mounts), time.Now())
	}
	return s, nil
}

// fs returns the procfs view of Root/proc, retrying when it was missing.
func (s *Sampler) fs() (procfs.FS, error) {
	if s.procFSOK {
		return s.procFS, nil
	}
	fs, err := procfs.NewFS(filepath.Join(s.root, "proc"))
	if err != nil {
		return procfs.FS{}, err
	}
	s.procFS, s.procFSOK = fs, true
	return fs, nil
}

func (s *Sampler) mountInfo() ([]*procfs.MountInfo, error) {
	fs, err := s.fs()
	if err != nil {
		return nil, err
	}
	return fs.GetMounts()
}

func cgroupMountsOrLayout(root string, infos []*procfs.MountInfo) []cgMount {
	if m := cgroupMounts(infos); len(m) > 0 {
		return m
	}
	return layoutMounts(root)
}

// checkLXCFS warns once when a file the sampler reads is served by lxcfs:
// the values then describe the container lxcfs emulates, not the host.
func (s *Sampler) checkLXCFS(mounts []*procfs.MountInfo) {
	for _, m := range mounts {
		if m.FSType != "fuse.lxcfs" {
			continue
		}
		switch mp := unescapeMountPath(m.MountPoint); mp {
		case "/proc/loadavg", "/proc/stat":
			s.log.Warn("lxcfs serves this file: it describes a container, not the host; load and cpu signals follow the container",
				"path", mp)
		}
	}
}

// resolve looks the watched cgroup up and records the result.
func (s *Sampler) resolve(mounts []cgMount, now time.Time) {
	p, err := resolveCgroup(s.root, s.cgName, mounts)
	if err != nil {
		s.cgOK, s.cgErr = false, fmt.Errorf("resolve cgroup: %w", err)
		s.cgNextRetry = now.Add(s.cgRetry)
		if s.first(SourceCgroup, "unresolved") {
			s.log.Warn("watched cgroup not found; cgroup signals unavailable until it appears",
				"cgroup", s.cgName, "err", err)
		}
		return
	}
	p.setFiles()
	s.cg, s.cgOK, s.cgErr = p, true, nil
	s.cgGen++
	s.log.Info("watching cgroup", append([]any{"cgroup", s.cgName}, p.describe()...)...)
}

// first reports whether (source, what) is seen for the first time, so a
// condition is logged once; the map only grows by the fixed set of keys.
func (s *Sampler) first(source, what string) bool {
	k := noteKey{source, what}
	if _, ok := s.noted[k]; ok {
		return false
	}
	s.noted[k] = struct{}{}
	return true
}

// SetTCPPorts replaces the protected TCP ports whose accept queues are read
// (duplicates and port 0 are ignored). It is safe while Run is running; the
// next tick uses the new set.
func (s *Sampler) SetTCPPorts(ports []uint16) {
	ps := make([]uint16, 0, len(ports))
	for _, p := range ports {
		if p != 0 {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	ps = slices.Compact(ps)
	s.portsMu.Lock()
	s.ports = ps
	s.portsGen++
	s.portsMu.Unlock()
}

// Sample reads every source once and returns the snapshot. Rates and deltas
// are computed against the previous Sample over the elapsed time measured
// with the monotonic clock; on the first call they are unavailable and
// Interval is 0. It never panics and never blocks longer than the sock_diag
// receive timeout (1 s); what could not be read is listed in Errors.
func (s *Sampler) Sample() olc.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.collect(&s.cur)
	var interval time.Duration
	if s.havePrev {
		interval = s.cur.at.Sub(s.prev.at)
	}
	snap := compute(&s.prev, &s.cur, s.havePrev, interval)
	s.prev, s.cur = s.cur, s.prev
	s.havePrev = true
	return snap
}

// Run samples immediately and then every interval (DefaultInterval if ≤ 0)
// until ctx is done, passing each snapshot to fn on the calling goroutine.
// A slow fn delays the next tick rather than overlapping it; the snapshot's
// Interval is the time actually elapsed.
func (s *Sampler) Run(ctx context.Context, interval time.Duration, fn func(olc.Snapshot)) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if ctx.Err() != nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	fn(s.Sample())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(s.Sample())
		}
	}
}
