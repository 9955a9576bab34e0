package sampler

import (
	"bytes"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/olcd/olcd/internal/fieldcases"
	"github.com/olcd/olcd/internal/olc"
)

// Fuzz tests for every parser written here (procfs's own parsers are fuzzed
// upstream). Each checks that the parser never panics and that what it
// returns obeys its contract. Seeds: the testdata files, the field cases'
// files and the shapes from the unit tests.

func addCaseFiles(f *testing.F, name string) {
	dirs, err := fieldcases.Dirs(fieldcases.Sampler)
	if err != nil {
		f.Fatal(err)
	}
	var matches []string
	for _, d := range dirs {
		m, _ := filepath.Glob(filepath.Join(d, "*", "*", "*", name))
		more, _ := filepath.Glob(filepath.Join(d, "*", "*", "sys", "fs", "cgroup", "*", "*", name))
		matches = append(append(matches, m...), more...)
	}
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil {
			f.Add(b)
		}
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte(readTestdata(f, "proc/stat-real")))
	f.Add([]byte("cpu  200 0 200 1400 0 0 0 0\ncpu0 200 0 200 1400 0 0 0 0\n\nintr 7 7 7\nprocesses -2049041839\nprocs_running 1\n"))
	f.Add([]byte("cpu 1 2 3\nprocs_running x\n"))
	f.Add([]byte("cpu 1 2 3 4 5 6 7 8 9 10 11 12\r\ncpu0 1\nprocs_running 18446744073709551615"))
	f.Add([]byte("procs_running 1\ncpu 1 1 1 1\ncpu0 1 1 1 1\n"))
	addCaseFiles(f, "stat")
	f.Fuzz(func(t *testing.T, data []byte) {
		whole, err1 := parseProcStat(bytes.NewReader(data), make([]byte, 64))
		var small io.Reader = iotest.OneByteReader(bytes.NewReader(data))
		if len(data) > 8192 { // keep the long-intr seeds fast
			small = iotest.HalfReader(bytes.NewReader(data))
		}
		bytewise, err2 := parseProcStat(small, make([]byte, 64))
		// Streaming must not depend on how the kernel splits its reads.
		if whole != bytewise || (err1 == nil) != (err2 == nil) {
			t.Fatalf("chunking changed the result: %+v %v vs %+v %v", whole, err1, bytewise, err2)
		}
		if whole.cpuOK && (whole.fields < cpuMinFields || whole.fields > cpuMaxFields) {
			t.Fatalf("cpu line accepted with %d fields", whole.fields)
		}
		if whole.online > bytes.Count(data, []byte("\n"))+1 {
			t.Fatalf("%d online CPUs from %d lines", whole.online, bytes.Count(data, []byte("\n"))+1)
		}
		if whole.cpuOK && whole.runningOK && err1 != nil {
			t.Fatalf("error %v although both needed lines parsed", err1)
		}
		var prev [cpuMaxFields]uint64
		if v, ok := cpuBusy(&prev, &whole.cpu); ok && (v < 0 || v > 1 || math.IsNaN(v)) {
			t.Fatalf("cpu_busy %v", v)
		}
	})
}

func FuzzParsePSI(f *testing.F) {
	for _, n := range []string{"proc/pressure-cpu", "proc/pressure-memory", "proc/pressure-io"} {
		f.Add([]byte(readTestdata(f, n)))
	}
	f.Add([]byte("some avg10=2.65 avg60=0.00 avg300=0.00 total=111749368752\nfoo x=1\n"))
	f.Add([]byte("full avg10=NaN total=1\nsome avg10=1e2 total=0"))
	f.Add([]byte("some avg10=0x1p-2 avg60=inf total=18446744073709551616\n"))
	addCaseFiles(f, "cpu.pressure")
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parsePSI(data)
		if err != nil {
			if r != (psiReading{}) {
				t.Fatalf("values returned with an error: %+v", r)
			}
			return
		}
		for _, l := range []psiLine{r.some, r.full} {
			if l.ok && !validAvg(l.avg10) {
				t.Fatalf("avg10 %v accepted", l.avg10)
			}
			if !l.ok && l != (psiLine{}) {
				t.Fatalf("a missing line carries values: %+v", l)
			}
		}
	})
}

func FuzzParseCPUStat(f *testing.F) {
	f.Add([]byte("usage_usec 1323899\nuser_usec 992924\nsystem_usec 330974\nnr_periods 20\nnr_throttled 6\nthrottled_usec 139381\n"))
	f.Add([]byte("nr_periods 17\nnr_throttled 7\nthrottled_time 627918677\nthrottled_usec 1\n"))
	f.Add([]byte("usage_usec 18446744073709551\nnr_throttled -1"))
	addCaseFiles(f, "cpu.stat")
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := parseCPUStat(data)
		if err != nil {
			return
		}
		if st.usageOK && st.usageNs%1000 != 0 {
			t.Fatalf("usage_usec not converted to ns once: %d", st.usageNs)
		}
		if !st.usageOK && st.usageNs != 0 || !st.throttledNsOK && st.throttledNs != 0 {
			t.Fatalf("values without keys: %+v", st)
		}
	})
}

func FuzzParseCPUMax(f *testing.F) {
	for _, s := range []string{"max 100000\n", "125000 100000\n", "max", "0 1", "1 0", "18446744073709551615 1\n", " 5  10 "} {
		f.Add([]byte(s))
	}
	addCaseFiles(f, "cpu.max")
	f.Fuzz(func(t *testing.T, data []byte) {
		cpus, limited, err := parseCPUMax(data)
		if err != nil && (limited || cpus != 0) {
			t.Fatalf("values with an error")
		}
		if limited && (cpus < 0 || math.IsInf(cpus, 0) || math.IsNaN(cpus)) {
			t.Fatalf("quota %v CPUs", cpus)
		}
		if !limited && cpus != 0 {
			t.Fatalf("unlimited quota with %v CPUs", cpus)
		}
	})
}

func FuzzParseCFSQuota(f *testing.F) {
	for _, s := range []string{"-1\n", "100000\n", "-2", "", "1 2", "+5"} {
		f.Add([]byte(s))
	}
	addCaseFiles(f, "cpu.cfs_quota_us")
	f.Fuzz(func(t *testing.T, data []byte) {
		q, limited, err := parseCFSQuota(data)
		if err != nil || !limited {
			if q != 0 {
				t.Fatalf("quota %d without a limit", q)
			}
			return
		}
		if want, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64); err != nil || want != q {
			t.Fatalf("%q parsed as %d (strconv: %d, %v)", data, q, want, err)
		}
	})
}

func FuzzParseSingleUint(f *testing.F) {
	for _, s := range []string{"2000000000\n", "0", "18446744073709551615", "18446744073709551616", "-1", "1 2", "\t7\r\n"} {
		f.Add([]byte(s))
	}
	addCaseFiles(f, "cpuacct.usage")
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseSingleUint(data)
		if err != nil {
			return
		}
		want, perr := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if perr != nil || want != v {
			t.Fatalf("%q parsed as %d (strconv: %d, %v)", data, v, want, perr)
		}
	})
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3\n", "0-3,8,10-11", "", "5", "0-1,", "3-1", "0-65535", "1,1,1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := parseCPUList(data)
		if err != nil && n != 0 || n < 0 || n > maxCPUs {
			t.Fatalf("%q: %d CPUs, err %v", data, n, err)
		}
	})
}

func FuzzParseListenOverflows(f *testing.F) {
	f.Add([]byte(readTestdata(f, "proc/netstat-real")))
	f.Add([]byte("TcpExt: A ListenOverflows\nTcpExt: 1 2\n"))
	f.Add([]byte("TcpExt: ListenOverflows\n"))
	f.Add([]byte("TcpExt: ListenOverflows ListenOverflows\nTcpExt: 5"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, found, err := parseListenOverflows(data)
		if (err != nil || !found) && v != 0 {
			t.Fatalf("value %d without a found column", v)
		}
	})
}

func FuzzParseDiag(f *testing.F) {
	lo := netip.MustParseAddr("127.0.0.1")
	f.Add(nlMsg(20, 1, diagPayload(2, tcpListen, lo, 80, 1, 2)))
	f.Add(append(nlMsg(20, 1, diagPayload(10, tcpListen, lo, 443, 0, 0)), nlMsg(3, 1, []byte{0, 0, 0, 0})...))
	f.Add(nlMsg(2, 1, errnoPayload(-1)))
	f.Add([]byte{255, 255, 255, 255, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var c listenerCollector
		_, _ = parseDiag(data, 1, &c) // any error is fine; the bounds below are not
		if len(c.out) > len(data)/(nlmsgHdrLen+inetDiagMsgLen) {
			t.Fatalf("%d listeners from %d bytes", len(c.out), len(data))
		}
		for _, l := range c.out {
			if f := l.Fill(); f < 0 || f > 1 {
				t.Fatalf("fill %v", f)
			}
		}
	})
}

func FuzzUnescapeMountPath(f *testing.F) {
	for _, s := range []string{`/sys/fs/cgroup`, `/srv/my\040cgroups`, `\`, `\0`, `\00`, `\000`, `\777\1234`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := unescapeMountPath(s)
		if len(out) > len(s) {
			t.Fatalf("%q grew to %q", s, out)
		}
		if !strings.Contains(s, `\`) && out != s {
			t.Fatalf("%q changed to %q without escapes", s, out)
		}
	})
}

// FuzzSample feeds arbitrary file contents through the whole sampler: it
// must never panic and every value it reports must be finite and, for the
// fraction signals with a 0..1 range, inside it.
func FuzzSample(f *testing.F) {
	f.Add([]byte("cpu 1 2 3 4\ncpu0 1 2 3 4\nprocs_running 1\n"), []byte("cpu 9 2 3 9\ncpu0 9 2 3 9\nprocs_running 2\n"),
		[]byte("some avg10=1.00 avg60=0 avg300=0 total=5\n"), []byte("usage_usec 5\nnr_periods 1\nnr_throttled 1\nthrottled_usec 1\n"),
		[]byte("50000 100000\n"), []byte("0.5 0.5 0.5 1/1 1\n"))
	f.Add([]byte(""), []byte("cpu 0 0 0 0\n"), []byte("full"), []byte("usage_usec 99999999999\n"), []byte("max"), []byte("-1 x"))
	f.Fuzz(func(t *testing.T, stat1, stat2, psi, cpuStat, cpuMax, loadavg []byte) {
		tree := func(stat []byte) string {
			return mkTree(t, map[string]string{
				"proc/stat":                            string(stat),
				"proc/loadavg":                         string(loadavg),
				"proc/pressure/cpu":                    string(psi),
				"proc/net/netstat":                     string(psi),
				"sys/fs/cgroup/cgroup.controllers":     "cpu\n",
				"sys/fs/cgroup/app/cgroup.controllers": "cpu\n",
				"sys/fs/cgroup/app/cpu.stat":           string(cpuStat),
				"sys/fs/cgroup/app/cpu.max":            string(cpuMax),
				"sys/fs/cgroup/app/cpu.pressure":       string(psi),
			})
		}
		snap := sampleRoots(t, tree(stat1), tree(stat2), Config{Cgroup: "/sys/fs/cgroup/app"}, 0.5)
		for _, sig := range olc.Signals() {
			v, ok := snap.Get(sig)
			if !ok {
				continue
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("%s = %v", sig, v)
			}
			if sig.IsFraction() && sig != olc.CgroupCPUUsageOfQuota && v > 1 {
				t.Fatalf("%s = %v > 1", sig, v)
			}
		}
	})
}
