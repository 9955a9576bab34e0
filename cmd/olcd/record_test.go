package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/fieldcases"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/trace"
)

// TestRecordRoundTrip records a fixture node and reads the file back with
// the trace reader 'olcd-sim simulate' uses: the columns are the canonical
// signals asked for, the times advance, and a signal the fixture cannot give
// (an interval share on the first tick, a missing PSI file) is an empty
// cell, not 0.
func TestRecordRoundTrip(t *testing.T) {
	dirs, err := fieldcases.Dirs(fieldcases.Sampler)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dirs[0], "psi-cpu-no-full-line", "after")
	out := filepath.Join(t.TempDir(), "trace.csv")
	var stdout, stderr bytes.Buffer
	code := run([]string{"record", "--root", root, "--out", out, "--duration", "650ms", "--interval", "100ms",
		"--signals", "cpu_busy,load1,psi_cpu_some_avg10,psi_cpu_full_avg10"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("record exit %d: %s", code, stderr.String())
	}
	tr, err := trace.ReadFile(out)
	if err != nil {
		t.Fatalf("read recorded trace: %v", err)
	}
	want := []olc.Signal{olc.CPUBusy, olc.Load1, olc.PSICPUSomeAvg10, olc.PSICPUFullAvg10}
	if len(tr.Columns) != len(want) {
		t.Fatalf("columns %v, want %v", tr.Columns, want)
	}
	for i := range want {
		if tr.Columns[i] != want[i] {
			t.Fatalf("columns %v, want %v", tr.Columns, want)
		}
	}
	if len(tr.Rows) < 4 || len(tr.Rows) > 8 {
		t.Fatalf("%d rows for 650 ms at 100 ms", len(tr.Rows))
	}
	first, last := tr.Snapshot(0), tr.Snapshot(len(tr.Rows)-1)
	if !last.At.After(first.At) {
		t.Error("times do not advance")
	}
	if v, ok := last.Get(olc.Load1); !ok || v != 0.5 {
		t.Errorf("load1 = %v, %v; want 0.5 (the fixture's)", v, ok)
	}
	if _, ok := first.Get(olc.CPUBusy); ok {
		t.Error("cpu_busy on the first tick: it needs two readings and must be an empty cell")
	}
	if _, ok := last.Get(olc.PSICPUFullAvg10); ok {
		t.Error("psi_cpu_full_avg10 recorded although the fixture has no full line")
	}
	data, _ := os.ReadFile(out)
	if !strings.HasPrefix(string(data), "t_s,cpu_busy,load1,psi_cpu_some_avg10,psi_cpu_full_avg10\n") {
		t.Errorf("header: %q", strings.SplitN(string(data), "\n", 2)[0])
	}
}

func TestRecordUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"record"},
		{"record", "--out", "x", "--interval", "10ms"},
		{"record", "--out", "x", "--signals", "cpu_bussy"},
		{"record", "--out", "x", "--ports", "0"},
		{"record", "--out", "x", "--duration", "0s"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}
