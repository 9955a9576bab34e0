package sampler

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/olcd/olcd/internal/olc"
)

func TestParsePSI(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		some, full psiLine
		errHas     string
	}{
		{
			name: "both lines",
			in:   "some avg10=2.65 avg60=0.00 avg300=0.00 total=111749368752\nfull avg10=0.50 avg60=0.00 avg300=0.00 total=7000\n",
			some: psiLine{2.65, 111749368752, true}, full: psiLine{0.5, 7000, true},
		},
		{
			name: "no full line (cpu before 5.13) and an unknown line",
			in:   "some avg10=1.00 avg60=0.00 avg300=0.00 total=5\nfoo x=1\n",
			some: psiLine{1, 5, true},
		},
		{name: "empty file", in: ""},
		{name: "fields in another order", in: "some total=9 avg300=0 avg10=100.00 avg60=1\n", some: psiLine{100, 9, true}},
		{name: "percent above 100", in: "some avg10=100.01 avg60=0 avg300=0 total=1\n", errHas: "avg10"},
		{name: "negative avg10", in: "some avg10=-1 avg60=0 avg300=0 total=1\n", errHas: "avg10"},
		{name: "NaN avg10", in: "some avg10=NaN avg60=0 avg300=0 total=1\n", errHas: "avg10"},
		{name: "negative total", in: "full avg10=0 avg60=0 avg300=0 total=-1\n", errHas: "line 1 (full): total"},
		{name: "missing total", in: "some avg10=0 avg60=0 avg300=0\n", errHas: "missing"},
		{name: "not key=value", in: "some avg10\n", errHas: "key=value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePSI([]byte(tc.in))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v, want one containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.some != tc.some || got.full != tc.full {
				t.Fatalf("got %+v, want some %+v full %+v", got, tc.some, tc.full)
			}
		})
	}
}

// The cgroup parser (ours) and the /proc parser (procfs) must agree on every
// well-formed file, so node and cgroup PSI mean the same thing.
func TestParsePSIAgreesWithProcfs(t *testing.T) {
	inputs := []string{
		readTestdata(t, "proc/pressure-cpu"),
		readTestdata(t, "proc/pressure-memory"),
		readTestdata(t, "proc/pressure-io"),
		"some avg10=2.65 avg60=0.00 avg300=0.00 total=111749368752\nfoo x=1\n",
		"some avg10=99.99 avg60=12.00 avg300=3.00 total=18446744073709551615\nfull avg10=0.01 avg60=0.00 avg300=0.00 total=0\n",
		"",
	}
	for i, in := range inputs {
		dir := mkTree(t, map[string]string{"pressure/cpu": in})
		pfs, err := procfs.NewFS(dir)
		if err != nil {
			t.Fatal(err)
		}
		st, err := pfs.PSIStatsForResource("cpu")
		if err != nil {
			t.Fatalf("input %d: procfs: %v", i, err)
		}
		want := fromProcfs(st)
		got, err := parsePSI([]byte(in))
		if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		if got != want {
			t.Errorf("input %d: ours %+v, procfs %+v", i, got, want)
		}
	}
}

func psiFile(someAvg float64, someTotal uint64, full bool) string {
	s := fmt.Sprintf("some avg10=%.2f avg60=0.00 avg300=0.00 total=%d\n", someAvg, someTotal)
	if full {
		s += fmt.Sprintf("full avg10=%.2f avg60=0.00 avg300=0.00 total=%d\n", someAvg/2, someTotal/2)
	}
	return s
}

// Each pressure file is independent: a missing file, a missing directory, a
// missing full line or EOPNOTSUPP makes only that file's values unavailable,
// is logged once (not reported as a per-tick error) and leaves the other
// resources' values intact. EOPNOTSUPP is what reading a pressure file
// returns when the kernel runs with psi=0 but kept the file (cgroup files on
// 5.2–6.0); a fixture tree cannot produce an errno, so the test injects it
// at the sampler's procfs read of /proc/pressure/memory and at its file-read
// function for the cgroup's cpu.pressure.
func TestPSIUnavailableIsPerResource(t *testing.T) {
	base := map[string]string{
		"proc/stat":                            "cpu 1 0 0 1\ncpu0 1 0 0 1\nprocs_running 1\n",
		"proc/loadavg":                         "0.10 0.10 0.10 1/1 1\n",
		"sys/fs/cgroup/cgroup.controllers":     "cpu memory io\n",
		"sys/fs/cgroup/app/cgroup.controllers": "cpu memory io\n",
		"sys/fs/cgroup/app/cpu.stat":           "usage_usec 10\n",
	}
	withFiles := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	eopnotsupp := func(p string) error { return &fs.PathError{Op: "read", Path: p, Err: syscall.EOPNOTSUPP} }

	tests := []struct {
		name string
		// files present besides base; the injected failures apply on top.
		files      map[string]string
		nodeFail   map[string]error // /proc/pressure file → EOPNOTSUPP
		cgroupFail map[string]error // cgroup file name → EOPNOTSUPP
		avail      []olc.Signal
		unavail    []olc.Signal
		errSources []string
	}{
		{
			name: "memory file missing",
			files: map[string]string{
				"proc/pressure/cpu": psiFile(5, 1000, true), "proc/pressure/io": psiFile(1, 10, true),
			},
			avail:   []olc.Signal{olc.PSICPUSomeAvg10, olc.PSICPUFullAvg10, olc.PSIIOSomeAvg10, olc.PSIIOFullAvg10},
			unavail: []olc.Signal{olc.PSIMemorySomeAvg10, olc.PSIMemoryFullAvg10, olc.PSIMemorySome, olc.PSIMemoryFull},
		},
		{
			name:    "pressure directory missing",
			unavail: []olc.Signal{olc.PSICPUSomeAvg10, olc.PSIMemorySomeAvg10, olc.PSIIOSomeAvg10, olc.PSICPUFull},
			avail:   []olc.Signal{olc.Load1, olc.Runnable},
		},
		{
			name: "EOPNOTSUPP on /proc/pressure/memory",
			files: map[string]string{
				"proc/pressure/cpu": psiFile(5, 1000, true), "proc/pressure/memory": psiFile(5, 1000, true),
				"proc/pressure/io": psiFile(1, 10, true),
			},
			nodeFail: map[string]error{"memory": nil},
			avail:    []olc.Signal{olc.PSICPUSomeAvg10, olc.PSICPUFullAvg10, olc.PSIIOSomeAvg10, olc.PSIIOFullAvg10},
			unavail:  []olc.Signal{olc.PSIMemorySomeAvg10, olc.PSIMemoryFullAvg10},
		},
		{
			name: "EOPNOTSUPP on the cgroup's cpu.pressure",
			files: map[string]string{
				"sys/fs/cgroup/app/cpu.pressure":    psiFile(5, 1000, true),
				"sys/fs/cgroup/app/memory.pressure": psiFile(3, 1000, true),
				"sys/fs/cgroup/app/io.pressure":     psiFile(2, 1000, true),
			},
			cgroupFail: map[string]error{"cpu.pressure": nil},
			avail:      []olc.Signal{olc.CgroupPSIMemorySomeAvg10, olc.CgroupPSIMemoryFullAvg10, olc.CgroupPSIIOSomeAvg10},
			unavail:    []olc.Signal{olc.CgroupPSICPUSomeAvg10, olc.CgroupPSICPUFullAvg10, olc.PSICPUSomeAvg10},
		},
		{
			name: "no full line for cpu",
			files: map[string]string{
				"proc/pressure/cpu": psiFile(5, 1000, false), "proc/pressure/memory": psiFile(5, 1000, true),
			},
			avail:   []olc.Signal{olc.PSICPUSomeAvg10, olc.PSIMemorySomeAvg10, olc.PSIMemoryFullAvg10},
			unavail: []olc.Signal{olc.PSICPUFullAvg10, olc.PSICPUFull, olc.PSIIOSomeAvg10},
		},
		{
			name: "a corrupt file is an error for that resource only",
			files: map[string]string{
				"proc/pressure/cpu": "some avg10=banana avg60=0 avg300=0 total=1\n", "proc/pressure/memory": psiFile(5, 1000, true),
				"sys/fs/cgroup/app/io.pressure": "full avg10=1 total=x\n", "sys/fs/cgroup/app/memory.pressure": psiFile(5, 1000, true),
			},
			avail:      []olc.Signal{olc.PSIMemorySomeAvg10, olc.CgroupPSIMemorySomeAvg10},
			unavail:    []olc.Signal{olc.PSICPUSomeAvg10, olc.CgroupPSIIOSomeAvg10},
			errSources: []string{SourcePSICPU, SourceCgroupPSIIO},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := mkTree(t, withFiles(tc.files))
			s, logs := newLogged(t, Config{Root: root, Cgroup: "/sys/fs/cgroup/app"})
			if tc.nodeFail != nil {
				read := s.nodePSI
				s.nodePSI = func(res psiResource) (procfs.PSIStats, error) {
					if _, ok := tc.nodeFail[psiResourceNames[res]]; ok {
						// As procfs wraps it.
						return procfs.PSIStats{}, fmt.Errorf("%w: %w", procfs.ErrFileRead, eopnotsupp(s.pathPSI[res]))
					}
					return read(res)
				}
			}
			if tc.cgroupFail != nil {
				s.readFile = func(p string, buf []byte) ([]byte, error) {
					if _, ok := tc.cgroupFail[filepath.Base(p)]; ok && strings.Contains(p, "/app/") {
						return buf[:0], eopnotsupp(p)
					}
					return readFileInto(p, buf)
				}
			}
			snap := s.Sample()
			afterFirst := logs.String()
			for range 3 {
				snap = s.Sample()
			}
			for _, sig := range tc.avail {
				if _, ok := snap.Get(sig); !ok {
					t.Errorf("%s unavailable, want a value; errors %v", sig, snap.Errors)
				}
			}
			for _, sig := range tc.unavail {
				if v, ok := snap.Get(sig); ok {
					t.Errorf("%s = %v, want unavailable", sig, v)
				}
			}
			got := errSources(snap)
			slices.Sort(got)
			want := slices.Clone(tc.errSources)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("error sources %v, want %v (%v)", got, want, snap.Errors)
			}
			// Logged once, on the first tick, not once per tick.
			if len(tc.unavail) > 0 && !strings.Contains(afterFirst, "unavailable") && !strings.Contains(afterFirst, "no full line") {
				t.Errorf("unavailable pressure values not logged:\n%s", afterFirst)
			}
			if rest := logs.String()[len(afterFirst):]; rest != "" {
				t.Errorf("later ticks logged again:\n%s", rest)
			}
		})
	}
}

func TestPSIValues(t *testing.T) {
	files := func(cpuTotal, memTotal uint64) map[string]string {
		return map[string]string{
			"proc/pressure/cpu":    psiFile(12.5, cpuTotal, true),
			"proc/pressure/memory": psiFile(150, memTotal, true), // not a percentage: rejected
		}
	}
	before := mkTree(t, files(1_000_000, 0))
	after := mkTree(t, files(1_250_000, 0))
	snap := sampleRoots(t, before, after, Config{}, 0.5)
	// Δsome 250 000 µs over 0.5 s = 0.5; Δfull 125 000 µs = 0.25.
	for sig, want := range map[olc.Signal]float64{olc.PSICPUSomeAvg10: 0.125, olc.PSICPUFullAvg10: 0.0625, olc.PSICPUSome: 0.5, olc.PSICPUFull: 0.25} {
		if got, ok := snap.Get(sig); !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v (ok %v), want %v", sig, got, ok, want)
		}
	}
	if _, ok := snap.Get(olc.PSIMemorySomeAvg10); ok {
		t.Error("an avg10 of 150% must not become a value")
	}
	// A total that went backwards gives no share (a reset, not a stall).
	snap = sampleRoots(t, after, before, Config{}, 0.5)
	if v, ok := snap.Get(olc.PSICPUSome); ok {
		t.Errorf("psi_cpu_some = %v after the total went backwards, want unavailable", v)
	}
	if v, ok := snap.Get(olc.PSICPUSomeAvg10); !ok || v != 0.125 {
		t.Errorf("psi_cpu_some_avg10 = %v, %v: avg10 needs no delta", v, ok)
	}
}

func TestIsAbsent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&fs.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}, true},
		{&fs.PathError{Op: "read", Path: "x", Err: syscall.EOPNOTSUPP}, true},
		{fmt.Errorf("wrap: %w", &fs.PathError{Op: "open", Path: "x", Err: syscall.ENOTDIR}), true},
		{&fs.PathError{Op: "read", Path: "x", Err: syscall.EIO}, false},
		{&fs.PathError{Op: "open", Path: "x", Err: syscall.EACCES}, false},
		{errors.New("parse"), false},
		{os.ErrNotExist, true},
	} {
		if got := isAbsent(tc.err); got != tc.want {
			t.Errorf("isAbsent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// fromProcfs converts procfs's view of a pressure file into ours.
func fromProcfs(st procfs.PSIStats) psiReading {
	var r psiReading
	if st.Some != nil {
		r.some = psiLine{avg10: st.Some.Avg10, total: st.Some.Total, ok: true}
	}
	if st.Full != nil {
		r.full = psiLine{avg10: st.Full.Avg10, total: st.Full.Total, ok: true}
	}
	return r
}
