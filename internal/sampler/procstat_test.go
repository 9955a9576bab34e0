package sampler

import (
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/prometheus/procfs"

	"github.com/olcd/olcd/internal/olc"
)

func TestParseProcStat(t *testing.T) {
	longIntr := "intr " + strings.Repeat("12345 ", 60000) + "\n" // ~360 KB
	tests := []struct {
		name    string
		in      string
		fields  int
		cpu     [cpuMaxFields]uint64
		online  int
		running uint64
		runOK   bool
		cpuOK   bool
		errHas  string // "" = no error
	}{
		{
			name:   "ten columns",
			in:     "cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\ncpu1 0 0 0 0 0 0 0 0 0 0\nintr 1 2\nprocs_running 3\nprocs_blocked 0\n",
			fields: 10, cpu: [cpuMaxFields]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, online: 2, running: 3, runOK: true, cpuOK: true,
		},
		{
			name:   "four columns (Linux 2.4)",
			in:     "cpu 10 0 5 85\ncpu0 10 0 5 85\nprocs_running 1\n",
			fields: 4, cpu: [cpuMaxFields]uint64{10, 0, 5, 85}, online: 1, running: 1, runOK: true, cpuOK: true,
		},
		{
			name:   "eight columns, blank line, negative processes, long intr",
			in:     "cpu  200 0 200 1400 0 0 0 0\ncpu0 200 0 200 1400 0 0 0 0\n\n" + longIntr + "ctxt 1\nprocesses -2049041839\nprocs_running 1\n",
			fields: 8, cpu: [cpuMaxFields]uint64{200, 0, 200, 1400}, online: 1, running: 1, runOK: true, cpuOK: true,
		},
		{
			name:   "eleven columns: a future column is ignored",
			in:     "cpu 1 2 3 4 5 6 7 8 9 10 11\nprocs_running 2\n",
			fields: 10, cpu: [cpuMaxFields]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, running: 2, runOK: true, cpuOK: true,
		},
		{
			name: "three columns is an error naming the line",
			in:   "cpu 1 2 3\nprocs_running 2\n", running: 2, runOK: true,
			errHas: "line 1: cpu line has 3 columns",
		},
		{
			name: "non-numeric cpu column",
			in:   "cpu 1 2 x 4\nprocs_running 2\n", running: 2, runOK: true,
			errHas: "cpu column 3",
		},
		{
			name: "negative cpu column",
			in:   "cpu 1 -2 3 4\nprocs_running 2\n", running: 2, runOK: true,
			errHas: "cpu column 2",
		},
		{
			name:   "procs_running malformed keeps cpu",
			in:     "cpu 1 2 3 4\ncpu0 1 2 3 4\nprocs_running -1\n",
			fields: 4, cpu: [cpuMaxFields]uint64{1, 2, 3, 4}, online: 1, cpuOK: true,
			errHas: "line 3: procs_running",
		},
		{
			name:   "no procs_running",
			in:     "cpu 1 2 3 4\n",
			fields: 4, cpu: [cpuMaxFields]uint64{1, 2, 3, 4}, cpuOK: true,
			errHas: "no procs_running",
		},
		{
			name: "no cpu line", in: "procs_running 4\n", running: 4, runOK: true,
			errHas: "no aggregate cpu line",
		},
		{
			name:   "CRLF and tabs, no final newline",
			in:     "cpu\t1 2 3 4\r\ncpu0 1 2 3 4\r\ncpu1 1 2 3 4\r\nprocs_running 7",
			fields: 4, cpu: [cpuMaxFields]uint64{1, 2, 3, 4}, online: 2, running: 7, runOK: true, cpuOK: true,
		},
		{
			name:   "cpuN-like labels are not CPUs",
			in:     "cpu 1 2 3 4\ncpu0 1 2 3 4\ncpufreq 9\ncpux 1\nprocs_running 1\n",
			fields: 4, cpu: [cpuMaxFields]uint64{1, 2, 3, 4}, online: 1, running: 1, runOK: true, cpuOK: true,
		},
		{name: "empty", in: "", errHas: "no aggregate cpu line"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A one-byte reader exercises every buffer boundary; the small
			// buffer forces the long intr line through the skip path.
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
				st, err := parseProcStat(r, make([]byte, 64))
				if tc.errHas == "" && err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)) {
					t.Fatalf("error %v, want one containing %q", err, tc.errHas)
				}
				if st.cpuOK != tc.cpuOK || st.runningOK != tc.runOK {
					t.Fatalf("cpuOK=%v runningOK=%v, want %v %v", st.cpuOK, st.runningOK, tc.cpuOK, tc.runOK)
				}
				if tc.cpuOK && (st.fields != tc.fields || st.cpu != tc.cpu) {
					t.Errorf("cpu %v (%d fields), want %v (%d)", st.cpu, st.fields, tc.cpu, tc.fields)
				}
				if st.online != tc.online {
					t.Errorf("online %d, want %d", st.online, tc.online)
				}
				if tc.runOK && st.running != tc.running {
					t.Errorf("running %d, want %d", st.running, tc.running)
				}
			}
		})
	}
}

// A reader that fails after the needed lines proves that parsing stops
// there: the rest of /proc/stat (softirq, a long intr on some kernels) is
// never read.
func TestParseProcStatStopsEarly(t *testing.T) {
	head := "cpu 1 2 3 4\ncpu0 1 2 3 4\nintr 1\nprocs_running 2\nprocs_blocked 0\n"
	r := io.MultiReader(strings.NewReader(head), iotest.ErrReader(errors.New("read past procs_running")))
	st, err := parseProcStat(iotest.OneByteReader(r), make([]byte, 64))
	if err != nil {
		t.Fatalf("read beyond what is needed: %v", err)
	}
	if !st.cpuOK || !st.runningOK || st.running != 2 || st.online != 1 {
		t.Fatalf("got %+v", st)
	}
	// A real read error before the needed lines is reported.
	r = io.MultiReader(strings.NewReader("cpu 1 2 3 4\n"), iotest.ErrReader(errors.New("boom")))
	if _, err := parseProcStat(r, nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("error %v, want the read error", err)
	}
}

func TestParseProcStatRealFile(t *testing.T) {
	st, err := parseProcStat(strings.NewReader(readTestdata(t, "proc/stat-real")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.cpuOK || st.fields != 10 || st.online != 2 || !st.runningOK {
		t.Fatalf("got %+v", st)
	}
}

func cpuLine(user, nice, system, idle, iowait, irq, softirq, steal, guest, guestNice uint64) [cpuMaxFields]uint64 {
	return [cpuMaxFields]uint64{user, nice, system, idle, iowait, irq, softirq, steal, guest, guestNice}
}

func TestCPUBusyRules(t *testing.T) {
	tests := []struct {
		name      string
		prev, cur [cpuMaxFields]uint64
		want      float64
		ok        bool
	}{
		{"plain", cpuLine(100, 0, 100, 800, 0, 0, 0, 0, 0, 0), cpuLine(200, 0, 200, 1400, 0, 0, 0, 0, 0, 0), 0.25, true},
		{"iowait is not busy", cpuLine(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), cpuLine(10, 0, 0, 50, 40, 0, 0, 0, 0, 0), 0.1, true},
		{"irq, softirq and nice are busy", cpuLine(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), cpuLine(0, 10, 0, 50, 0, 20, 20, 0, 0, 0), 0.5, true},
		// A VM that was denied half its time: idle 50, steal 50 → busy 0.5.
		{"steal is busy", cpuLine(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), cpuLine(0, 0, 0, 50, 0, 0, 0, 50, 0, 0), 0.5, true},
		// Guest time is already inside user/nice: user 60 (of which guest
		// 40), nice 20 (of which guest_nice 20), idle 20 → 0.8. Adding the
		// guest columns would give 140/180 = 0.78 and, with idle 0, >1.
		{"guest columns not added", cpuLine(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), cpuLine(60, 20, 0, 20, 0, 0, 0, 0, 40, 20), 0.8, true},
		{"guest equals user, no idle", cpuLine(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), cpuLine(100, 0, 0, 0, 0, 0, 0, 0, 100, 0), 1, true},
		// iowait going backwards (known on NO_HZ kernels) contributes 0:
		// Δ = user 10, idle 30, iowait 0 → 0.25, not a negative idle.
		{"iowait went backwards", cpuLine(100, 0, 0, 100, 500, 0, 0, 0, 0, 0), cpuLine(110, 0, 0, 130, 400, 0, 0, 0, 0, 0), 0.25, true},
		{"idle went backwards", cpuLine(100, 0, 0, 1000, 0, 0, 0, 0, 0, 0), cpuLine(150, 0, 0, 10, 0, 0, 0, 0, 0, 0), 1, true},
		{"every counter went backwards", cpuLine(100, 100, 100, 100, 100, 0, 0, 0, 0, 0), cpuLine(1, 1, 1, 1, 1, 0, 0, 0, 0, 0), 0, false},
		{"zero total skips", cpuLine(5, 5, 5, 5, 5, 5, 5, 5, 0, 0), cpuLine(5, 5, 5, 5, 5, 5, 5, 5, 9, 9), 0, false},
		{"only idle", cpuLine(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), cpuLine(0, 0, 0, 100, 0, 0, 0, 0, 0, 0), 0, true},
		// An idle counter that underflowed to near 2^64 (seen with lxcfs):
		// the deltas sum past 2^64; wrapped, the total was 4 and the busy
		// share 1.0 on an idle CPU.
		{"total of deltas overflows", cpuLine(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), cpuLine(10, 0, 0, 1<<64-6, 0, 0, 0, 0, 0, 0), 0, false},
		{"largest total that fits", cpuLine(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), cpuLine(0, 0, 0, 1<<64-1, 0, 0, 0, 0, 0, 0), 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := cpuBusy(&tc.prev, &tc.cur)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v (value %v)", ok, tc.ok, got)
			}
			if ok && math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("cpu_busy = %v, want %v", got, tc.want)
			}
			if got < 0 || got > 1 {
				t.Fatalf("cpu_busy = %v outside [0, 1]", got)
			}
		})
	}
}

// The rules end to end through fixture roots: guest columns and steal in a
// real-shaped /proc/stat, and online CPUs from the cpuN lines.
func TestCPUSignalsFromRoots(t *testing.T) {
	before := mkTree(t, map[string]string{
		"proc/stat":    "cpu 1000 0 0 1000 0 0 0 0 500 0\ncpu0 500 0 0 500 0 0 0 0 250 0\ncpu1 500 0 0 500 0 0 0 0 250 0\ncpu2 0 0 0 0 0 0 0 0 0 0\nintr 1\nprocesses -5\nprocs_running 6\n",
		"proc/loadavg": "3.00 2.00 1.00 6/100 42\n",
	})
	after := mkTree(t, map[string]string{
		"proc/stat":    "cpu 1300 0 0 1300 0 0 0 300 800 0\ncpu0 650 0 0 650 0 0 0 150 400 0\ncpu1 650 0 0 650 0 0 0 150 400 0\ncpu2 0 0 0 0 0 0 0 0 0 0\nintr 1\nprocesses -5\nprocs_running 6\n",
		"proc/loadavg": "3.00 2.00 1.00 6/100 42\n",
	})
	snap := sampleRoots(t, before, after, Config{}, 1)
	// Δuser 300 (guest 300 inside it), Δidle 300, Δsteal 300: busy 600/900.
	want := map[olc.Signal]float64{olc.CPUBusy: 2.0 / 3, olc.Load1: 3, olc.Load1PerCore: 1, olc.Runnable: 6, olc.RunqPerCore: 2}
	for sig, w := range want {
		if got, ok := snap.Get(sig); !ok || math.Abs(got-w) > 1e-9 {
			t.Errorf("%s = %v (ok %v), want %v", sig, got, ok, w)
		}
	}
}

// The reason /proc/stat has its own parser: on the field case
// proc-stat-odd-shapes (a negative processes counter) procfs's Stat fails the
// whole file, losing cpu_busy and runnable, while ours reads both. If procfs
// starts reading it, switch to procfs.
func TestProcStatNotProcfs(t *testing.T) {
	const in = "cpu  200 0 200 1400 0 0 0 0\ncpu0 200 0 200 1400 0 0 0 0\n\nprocesses -2049041839\nprocs_running 1\n"
	dir := mkTree(t, map[string]string{"stat": in})
	pfs, err := procfs.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pfs.Stat(); err == nil {
		t.Error("procfs now reads a negative processes counter: /proc/stat can move to procfs")
	}
	st, err := parseProcStat(strings.NewReader(in), nil)
	if err != nil || !st.cpuOK || !st.runningOK || st.running != 1 {
		t.Errorf("ours: %+v, %v", st, err)
	}
}
