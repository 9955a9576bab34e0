package sampler

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/procfs"

	"github.com/olcd/olcd/internal/olc"
)

// reading is one tick's raw values, before any delta is taken. collect fills
// it from one root; compute turns two of them into a Snapshot. Keeping the
// two steps apart lets the field-case test sample a "before" root and an
// "after" root with a given interval through the same code Sample uses.
type reading struct {
	at time.Time

	stat statReading

	load1   float64
	load1OK bool

	psi [numPSIResources]psiReading

	overflows   uint64
	overflowsOK bool

	cg cgroupReading

	// fills has one entry per protected port, in port order.
	fills  []portFill
	diagOK bool

	errs []olc.SourceError
}

type portFill struct {
	port  uint16
	fill  float64
	found bool // at least one listener on the port
}

// cgroupReading is the watched cgroup's raw counters.
type cgroupReading struct {
	present bool   // a cgroup is configured and was resolved this tick
	gen     uint64 // changes when the cgroup was (re)resolved

	usageNs uint64
	usageOK bool

	// quotaCPUs is quota ÷ period; quotaOK is false when unlimited or unknown.
	quotaCPUs float64
	quotaOK   bool
	// periodS is the CFS period in seconds; 0 unknown.
	periodS float64
	// cpuset is the number of CPUs in the effective cpuset; 0 unknown.
	cpuset int

	stat cpuStat // throttling counters (and v2 usage)

	psi [numPSIResources]psiReading
}

func (r *reading) reset() {
	errs, fills := r.errs[:0], r.fills[:0]
	*r = reading{errs: errs, fills: fills}
}

func (r *reading) addErr(source string, err error) {
	r.errs = append(r.errs, olc.SourceError{Source: source, Err: err})
}

// collect reads every source into r. Each source is independent: a failure
// is recorded in r.errs (or, for a source absent on this node, logged once)
// and the others are still read.
func (s *Sampler) collect(r *reading) {
	r.reset()
	s.collectStat(r)
	s.collectLoad(r)
	for res := range numPSIResources {
		s.collectNodePSI(r, res)
	}
	s.collectNetstat(r)
	s.collectCgroup(r)
	s.collectListeners(r)
	r.at = time.Now()
}

func (s *Sampler) collectStat(r *reading) {
	f, err := os.Open(s.pathStat)
	if err != nil {
		r.addErr(SourceProcStat, fmt.Errorf("open %s: %w", s.pathStat, err))
		return
	}
	st, err := parseProcStat(f, s.statBuf)
	f.Close()
	r.stat = st
	if err != nil {
		r.addErr(SourceProcStat, fmt.Errorf("%s: %w", s.pathStat, err))
	}
}

func (s *Sampler) collectLoad(r *reading) {
	v, err := s.loadAvg()
	if err != nil {
		r.addErr(SourceLoadavg, fmt.Errorf("read %s: %w", filepath.Join(s.root, "proc/loadavg"), err))
		return
	}
	if v < 0 || v != v {
		r.addErr(SourceLoadavg, fmt.Errorf("read %s: load1 %v is not a load", filepath.Join(s.root, "proc/loadavg"), v))
		return
	}
	r.load1, r.load1OK = v, true
}

// collectNodePSI reads /proc/pressure/<res> with procfs. The watched
// cgroup's pressure files, which procfs does not read, go through parsePSI.
func (s *Sampler) collectNodePSI(r *reading, res psiResource) {
	path := s.pathPSI[res]
	st, err := s.nodePSI(res)
	switch {
	case err != nil && isAbsent(err):
		// No /proc/pressure (kernel < 4.20, CONFIG_PSI off, psi=0) or
		// EOPNOTSUPP: unavailable, and only this resource.
		if s.first(nodePSISource[res], "absent") {
			s.log.Info("pressure file unavailable; its signals stay unavailable", "path", path, "err", err)
		}
		return
	case err != nil && errors.Is(err, procfs.ErrFileRead):
		r.addErr(nodePSISource[res], fmt.Errorf("read %s: %w", path, err))
		return
	case err != nil:
		r.addErr(nodePSISource[res], fmt.Errorf("parse %s: %w", path, s.explainPSI(path, err)))
		return
	}
	p, err := fromPSIStats(st)
	if err != nil {
		r.addErr(nodePSISource[res], fmt.Errorf("parse %s: %w", path, s.explainPSI(path, err)))
		return
	}
	r.psi[res] = p
	if p.some.ok && !p.full.ok && s.first(nodePSISource[res], "no_full") {
		s.log.Info("pressure file has no full line; its full signals stay unavailable", "path", path)
	}
}

// explainPSI returns parsePSI's error for a pressure file procfs could not
// parse: procfs's errors ("expected integer") name no line or field. It
// falls back to procfs's error when the file now reads cleanly.
func (s *Sampler) explainPSI(path string, procfsErr error) error {
	data, err := s.readFile(path, s.buf)
	s.keep(data)
	if err != nil {
		return procfsErr
	}
	if _, err := parsePSI(data); err != nil {
		return err
	}
	return procfsErr
}

func (s *Sampler) collectNetstat(r *reading) {
	data, err := s.readFile(s.pathNetstat, s.buf)
	s.keep(data)
	if err != nil {
		if isAbsent(err) {
			if s.first(SourceNetstat, "absent") {
				s.log.Info("netstat unavailable; listen_overflows_per_s stays unavailable", "path", s.pathNetstat, "err", err)
			}
			return
		}
		r.addErr(SourceNetstat, fmt.Errorf("read %s: %w", s.pathNetstat, err))
		return
	}
	v, found, err := parseListenOverflows(data)
	if err != nil {
		r.addErr(SourceNetstat, fmt.Errorf("parse %s: %w", s.pathNetstat, err))
		return
	}
	if !found {
		if s.first(SourceNetstat, "no_key") {
			s.log.Info("netstat has no TcpExt ListenOverflows; listen_overflows_per_s stays unavailable", "path", s.pathNetstat)
		}
		return
	}
	r.overflows, r.overflowsOK = v, true
}

// keep retains a grown read buffer for the next read.
func (s *Sampler) keep(data []byte) {
	if cap(data) > cap(s.buf) {
		s.buf = data[:0]
	}
}

// cgRead reads one file of the watched cgroup. ok is false when there is no
// data: the file is absent while the cgroup exists (logged once under what;
// a missing interface file is a configuration, not an error), a read failed
// (recorded under source), or the cgroup itself is gone, which also reports
// gone: it has been marked for re-resolution and an error recorded, and the
// caller must stop reading it this tick.
func (s *Sampler) cgRead(r *reading, source, what, path string) (data []byte, ok, gone bool) {
	data, err := s.readFile(path, s.buf)
	s.keep(data)
	switch {
	case err == nil:
		return data, true, false
	case !isAbsent(err):
		r.addErr(source, fmt.Errorf("read %s: %w", path, err))
		return nil, false, false
	case !dirExists(s.cg.anchor):
		s.cgOK = false
		s.cgNextRetry = time.Time{} // look again on the next tick
		r.addErr(SourceCgroup, fmt.Errorf("cgroup %s vanished: %w", s.cg.anchor, err))
		return nil, false, true
	}
	if s.first(source, what) {
		s.log.Info("cgroup file unavailable; its signals stay unavailable", "path", path, "err", err)
	}
	return nil, false, false
}

func (s *Sampler) collectCgroup(r *reading) {
	if s.cgName == "" {
		return
	}
	if !s.cgOK {
		now := time.Now()
		if now.Before(s.cgNextRetry) {
			r.addErr(SourceCgroup, s.cgErr)
			return
		}
		mounts, _ := s.mountInfo()
		s.resolve(cgroupMountsOrLayout(s.root, mounts), now)
		if !s.cgOK {
			r.addErr(SourceCgroup, s.cgErr)
			return
		}
	}
	p := &s.cg
	c := &r.cg
	c.present, c.gen = true, s.cgGen

	if p.quotaFile != "" && s.cgQuota(r, p) {
		return
	}
	if p.statFile != "" {
		data, ok, gone := s.cgRead(r, SourceCgroupCPU, "cpu.stat", p.statFile)
		if gone {
			return
		}
		if ok {
			if st, err := parseCPUStat(data); err != nil {
				r.addErr(SourceCgroupCPU, fmt.Errorf("parse %s: %w", p.statFile, err))
			} else {
				c.stat = st
			}
		}
	}

	switch {
	case p.usageFile == "":
	case p.usageFile == p.statFile:
		c.usageNs, c.usageOK = c.stat.usageNs, c.stat.usageOK
	default:
		data, ok, gone := s.cgRead(r, SourceCgroupCPU, "usage", p.usageFile)
		if gone {
			return
		}
		if ok {
			var err error
			if p.usageV2 {
				var st cpuStat
				st, err = parseCPUStat(data)
				c.usageNs, c.usageOK = st.usageNs, st.usageOK
			} else {
				c.usageNs, err = parseSingleUint(data)
				c.usageOK = err == nil
			}
			if err != nil {
				r.addErr(SourceCgroupCPU, fmt.Errorf("parse %s: %w", p.usageFile, err))
			}
		}
	}

	if p.cpusetFile != "" {
		// The cpuset file may live in an ancestor (inherited cpuset), so
		// its absence does not mean the cgroup is gone.
		data, err := s.readFile(p.cpusetFile, s.buf)
		s.keep(data)
		switch {
		case err != nil && isAbsent(err):
			if s.first(SourceCgroupCpuset, "absent") {
				s.log.Info("cpuset file unavailable; the quota is bounded by the online CPUs", "path", p.cpusetFile, "err", err)
			}
		case err != nil:
			r.addErr(SourceCgroupCpuset, fmt.Errorf("read %s: %w", p.cpusetFile, err))
		default:
			if n, err := parseCPUList(data); err != nil {
				r.addErr(SourceCgroupCpuset, fmt.Errorf("parse %s: %w", p.cpusetFile, err))
			} else {
				c.cpuset = n
			}
		}
	}

	for res, f := range p.psiFiles {
		if f == "" {
			continue
		}
		// Missing (PSI off for this cgroup, kernel < 4.20) or EOPNOTSUPP
		// (psi=0 on kernels that keep the files): unavailable, logged once.
		data, ok, gone := s.cgRead(r, cgroupPSISource[res], "absent", f)
		if gone {
			return
		}
		if ok {
			if v, err := parsePSI(data); err != nil {
				r.addErr(cgroupPSISource[res], fmt.Errorf("parse %s: %w", f, err))
			} else {
				c.psi[res] = v
			}
		}
	}
}

// cgQuota reads the CPU quota into r.cg; it returns true when the cgroup
// vanished. No quota ("max", −1, or no cpu controller so no file) leaves
// quotaOK false without an error.
func (s *Sampler) cgQuota(r *reading, p *cgPaths) (gone bool) {
	c := &r.cg
	data, ok, gone := s.cgRead(r, SourceCgroupCPU, "quota", p.quotaFile)
	if !ok {
		return gone
	}
	if p.cpuV2 {
		cpus, period, limited, err := parseCPUMaxPeriod(data)
		if err != nil {
			r.addErr(SourceCgroupCPU, fmt.Errorf("parse %s: %w", p.quotaFile, err))
			return false
		}
		c.quotaCPUs, c.periodS, c.quotaOK = cpus, period, limited
		return false
	}
	quota, limited, err := parseCFSQuota(data)
	if err != nil {
		r.addErr(SourceCgroupCPU, fmt.Errorf("parse %s: %w", p.quotaFile, err))
		return false
	}
	if !limited {
		return false
	}
	data, ok, gone = s.cgRead(r, SourceCgroupCPU, "period", p.periodFile)
	if !ok {
		return gone
	}
	period, err := parseSingleUint(data)
	if err == nil && period == 0 {
		err = errors.New("period 0")
	}
	if err != nil {
		r.addErr(SourceCgroupCPU, fmt.Errorf("parse %s: %w", p.periodFile, err))
		return false
	}
	c.quotaCPUs, c.periodS, c.quotaOK = float64(quota)/float64(period), float64(period)/1e6, true
	return false
}

// fillVisitor folds sock_diag LISTEN sockets into per-port fills.
type fillVisitor struct {
	idx   map[uint16]int
	fills []portFill
}

func (v *fillVisitor) visit(m diagMsg) {
	i, ok := v.idx[m.port]
	if !ok {
		return
	}
	f := acceptFill(m.rqueue, m.wqueue)
	pf := &v.fills[i]
	if !pf.found || f > pf.fill {
		pf.fill = f
	}
	pf.found = true
}

func (s *Sampler) collectListeners(r *reading) {
	s.portsMu.Lock()
	for _, p := range s.ports {
		r.fills = append(r.fills, portFill{port: p})
	}
	gen := s.portsGen
	s.portsMu.Unlock()
	if len(r.fills) == 0 {
		return
	}
	if gen != s.idxGen || len(s.portIdx) != len(r.fills) {
		clear(s.portIdx)
		for i, f := range r.fills {
			s.portIdx[f.port] = i
		}
		s.idxGen = gen
	}
	s.fillV = fillVisitor{idx: s.portIdx, fills: r.fills}
	buf, err := dumpListeners(s.diagBuf, &s.fillV)
	s.diagBuf = buf
	s.fillV.fills = nil
	if err != nil {
		r.addErr(SourceSockDiag, err)
		return
	}
	r.diagOK = true
}
