package trace

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// TestReadErrors checks that malformed traces are rejected with the
// line and column named.
func TestReadErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "empty trace"},
		{"bad header", "time,cpu_busy\n0,0.1\n", "header must be t_s"},
		{"unknown signal", "t_s,cpu_bussy\n0,0.1\n", `unknown signal "cpu_bussy" (did you mean "cpu_busy"?)`},
		{"duplicate", "t_s,cpu_busy,cpu_busy\n0,0.1,0.1\n", "listed twice"},
		{"time nan", "t_s,cpu_busy\nNaN,0.1\n", "x.csv:2: t_s"},
		{"time negative", "t_s,cpu_busy\n0,0.1\n-1,0.1\n", "x.csv:3: t_s"},
		{"short row", "t_s,cpu_busy\n0\n", "wrong number of fields"},
		// 1e10 s overflows time.Duration: it was replayed as a time before
		// the trace's start, and every later row as stale.
		{"time beyond the duration range", "t_s,cpu_busy\n0,0.1\n1e10,0.1\n", "x.csv:3: t_s \"1e10\": must be a number of seconds in [0, 9e+09]"},
		{"time +Inf", "t_s,cpu_busy\n+Inf,0.1\n", "x.csv:2: t_s"},
		{"no rows", "t_s,cpu_busy\n", "no rows"},
	}
	for _, tt := range tests {
		_, err := Read(strings.NewReader(tt.in), "x.csv")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

// TestExportShapes reads a trace as a spreadsheet exports it: a UTF-8
// byte order mark and CRLF line ends, more rows than one allocation slab
// (each row keeps its own values).
func TestExportShapes(t *testing.T) {
	var b strings.Builder
	b.WriteString("\ufefft_s,cpu_busy,psi_cpu_some\r\n")
	const rows = 2*slab + 7
	for i := range rows {
		fmt.Fprintf(&b, "%g,%g,%s\r\n", float64(i)*0.5, float64(i%100)/100, map[bool]string{true: "", false: "0.25"}[i%3 == 0])
	}
	tr, err := Read(strings.NewReader(b.String()), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Columns) != 2 || tr.Columns[0] != olc.CPUBusy || len(tr.Rows) != rows {
		t.Fatalf("columns %v, %d rows", tr.Columns, len(tr.Rows))
	}
	for i, r := range tr.Rows {
		if r.T != float64(i)*0.5 || r.Values[0] != float64(i%100)/100 || !r.Present[0] ||
			r.Present[1] == (i%3 == 0) || (r.Present[1] && r.Values[1] != 0.25) || len(r.Values) != 2 || cap(r.Values) != 2 {
			t.Fatalf("row %d: %+v", i, r)
		}
	}
}

// TestStaleRowsWarned: rows whose time goes back or stands still are
// replayed as stale (no signals); the first few are named, the rest
// counted, so that a trace pasted together from two files does not hide a
// dead stretch.
func TestStaleRowsWarned(t *testing.T) {
	in := "t_s,cpu_busy\n10,0.9\n10.5,0.9\n"
	for i := range 8 {
		in += fmt.Sprintf("%g,0.9\n", float64(i)*0.5)
	}
	in += "11,0.9\n"
	tr, err := Read(strings.NewReader(in), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Warnings) != maxStaleWarnings+1 || !strings.Contains(tr.Warnings[0], "x.csv:4: t_s 0 does not advance past 10.5") ||
		tr.Warnings[maxStaleWarnings] != "x.csv: 3 more rows whose t_s does not advance" {
		t.Errorf("warnings %q", tr.Warnings)
	}
}

// TestSnapshot checks the conversion of rows: empty cells are
// unavailable, invalid numbers are passed on as values, time and interval
// follow t_s.
func TestSnapshot(t *testing.T) {
	tr, err := Read(strings.NewReader("t_s,cpu_busy,psi_cpu_some\n0,0.5,\n0.5,NaN,0.2\n"), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := tr.Snapshot(0), tr.Snapshot(1)
	if !s0.At.Equal(Origin) || s0.Interval != 0 {
		t.Errorf("row 0: at %v interval %v", s0.At, s0.Interval)
	}
	if _, ok := s0.Get(olc.PSICPUSome); ok {
		t.Error("row 0: empty cell must be unavailable")
	}
	if v, ok := s1.Get(olc.CPUBusy); !ok || !math.IsNaN(v) {
		t.Errorf("row 1: cpu_busy %v %v, want NaN delivered", v, ok)
	}
	if s1.Interval != 500*time.Millisecond || !s1.At.Equal(Origin.Add(500*time.Millisecond)) {
		t.Errorf("row 1: at %v interval %v", s1.At, s1.Interval)
	}
}

// TestWriteRoundTrip: what Writer writes, Read reads back: times relative
// to the first row, empty cells for unavailable signals, the values.
func TestWriteRoundTrip(t *testing.T) {
	var b strings.Builder
	w, err := NewWriter(&b, []olc.Signal{olc.CPUBusy, olc.PSICPUSome})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s0 := olc.Snapshot{At: at}
	s0.Set(olc.CPUBusy, 0.5)
	s1 := olc.Snapshot{At: at.Add(500 * time.Millisecond)}
	s1.Set(olc.CPUBusy, 0.123456789)
	s1.Set(olc.PSICPUSome, 0.25)
	for _, s := range []olc.Snapshot{s0, s1} {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	const want = "t_s,cpu_busy,psi_cpu_some\n0.000,0.5,\n0.500,0.123457,0.25\n"
	if b.String() != want {
		t.Fatalf("wrote %q, want %q", b.String(), want)
	}
	tr, err := Read(strings.NewReader(b.String()), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Rows) != 2 || tr.Rows[1].T != 0.5 || tr.Rows[0].Present[1] || tr.Rows[1].Values[1] != 0.25 {
		t.Errorf("read back %+v", tr.Rows)
	}
}

// TestInvalidCellsWarned: a cell the controller cannot use — a word, NaN,
// ±Inf or a negative value (ParseFloat takes the first three) — is named
// with its line and column, the first few one by one and the rest
// counted; NaN and Inf were replayed as invalid samples without a word.
func TestInvalidCellsWarned(t *testing.T) {
	in := "t_s,cpu_busy,load1\n0,NaN,1\n0.5,0.5,+Inf\n1,-0.5,1\n1.5,abc,-Inf\n2,0.5,1\n"
	for i := range 4 {
		in += fmt.Sprintf("%g,nan,1\n", 2.5+float64(i)*0.5)
	}
	tr, err := Read(strings.NewReader(in), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`x.csv:2: column cpu_busy: "NaN" is not a finite value ≥ 0; replayed as an invalid sample`,
		`x.csv:3: column load1: "+Inf" is not a finite value ≥ 0; replayed as an invalid sample`,
		`x.csv:4: column cpu_busy: "-0.5" is not a finite value ≥ 0; replayed as an invalid sample`,
		`x.csv:5: column cpu_busy: "abc" is not a number; replayed as an invalid sample`,
		`x.csv:5: column load1: "-Inf" is not a finite value ≥ 0; replayed as an invalid sample`,
		`x.csv: 4 more cells replayed as invalid samples`,
	}
	if strings.Join(tr.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(tr.Warnings, "\n"), strings.Join(want, "\n"))
	}
	if r := tr.Rows[3]; !r.Present[0] || !math.IsNaN(r.Values[0]) || r.Values[1] != math.Inf(-1) {
		t.Errorf("row 4 replayed as %+v, want the invalid values passed on", r)
	}
}
