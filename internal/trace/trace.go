// Package trace reads and writes sample traces: CSV files of canonical signals, one row
// per tick, in the format of the field cases (../shared/cases/README.md,
// traces/*.csv). `olcd record` writes them (Writer), `olcd-sim simulate` and the
// controller's tests replay them.
package trace

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/spell"
)

// Origin is the wall-clock time of t_s = 0 when a trace is replayed.
// Any fixed instant would do; a fixed one keeps replays deterministic.
var Origin = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// Trace is a series of samples in the format of the field cases
// (../shared/cases/README.md, traces/*.csv): a header "t_s,<signal>,…" and
// one row per tick. An empty cell is an unavailable signal; a cell may hold
// an invalid number (NaN, +Inf, a negative) on purpose, which is passed to
// the controller as is, and a cell that is not a number at all is passed as
// NaN (an invalid sample) with a warning.
type Trace struct {
	// Name is the file name (or the name given to Read).
	Name string
	// Columns are the signal columns, in file order.
	Columns []olc.Signal
	// Rows are the ticks in file order. A row whose time does not advance is
	// replayed as a stale sample (see adaptive.Controller.Step).
	Rows []Row
	// Warnings name the cells that were not numbers ("file:line: column
	// …"), replayed as invalid samples.
	Warnings []string
}

// Row is one tick of a Trace.
type Row struct {
	// T is the time since the start of the trace (seconds, ≥ 0).
	T float64
	// Line is the row's line number in the file (1 = header).
	Line int
	// Values holds one value per column; meaningful where Present.
	Values []float64
	// Present is false for an empty cell (signal unavailable).
	Present []bool
}

// MaxSeconds is the largest t_s a trace may hold (seconds, about 285
// years): t_s is replayed as a time.Duration after Origin, in
// nanoseconds that must fit an int64 (at most 9.22e9 s). Beyond it the
// conversion overflowed into negative, out-of-order times.
const MaxSeconds = 9e9

// slab is how many rows' values Read allocates at once.
const slab = 1024

// ReadFile reads a trace CSV file.
func ReadFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	defer f.Close()
	return Read(f, path)
}

// Read parses a trace from r; name is used in errors. Errors name the
// line and the column: a missing or malformed header, an unknown signal
// (with the closest canonical name), a duplicate column, a row of the wrong
// width, a time that is not a finite number ≥ 0.
func Read(r io.Reader, name string) (*Trace, error) {
	// A spreadsheet's CSV export starts with a UTF-8 byte order mark, which
	// would otherwise become part of the first column's name.
	br := bufio.NewReader(r)
	if bom, err := br.Peek(3); err == nil && string(bom) == "\ufeff" {
		_, _ = br.Discard(3) // Peek has buffered the 3 bytes
	}
	cr := csv.NewReader(br)
	cr.ReuseRecord = false
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: empty trace: want a header t_s,<signal>,…", name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(header) < 2 || strings.TrimSpace(header[0]) != "t_s" {
		return nil, fmt.Errorf("%s:1: header must be t_s followed by at least one signal name, got %q", name, strings.Join(header, ","))
	}
	t := &Trace{Name: name}
	seen := map[olc.Signal]bool{}
	for i, h := range header[1:] {
		h = strings.TrimSpace(h)
		sig, err := olc.ParseSignal(h)
		if err != nil {
			msg := fmt.Sprintf("%s:1: column %d: unknown signal %q", name, i+2, h)
			if s := spell.Closest(h, spell.Names(olc.Signals())); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return nil, errors.New(msg)
		}
		if seen[sig] {
			return nil, fmt.Errorf("%s:1: column %d: signal %s listed twice", name, i+2, h)
		}
		seen[sig] = true
		t.Columns = append(t.Columns, sig)
	}
	// The rows' values share slabs of rows (slab at a time), so that a trace of a
	// million ticks costs two allocations per thousand rows, not per row.
	var vals []float64
	var present []bool
	var latest float64 // the latest t_s so far
	stale := 0         // rows whose t_s does not advance past it
	invalid := 0       // cells that are not a valid value of their signal
	warnInvalid := func(line int, sig olc.Signal, cell, why string) {
		if invalid++; invalid <= maxStaleWarnings {
			t.Warnings = append(t.Warnings, fmt.Sprintf("%s:%d: column %s: %q %s; replayed as an invalid sample", name, line, sig, cell, why))
		}
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		n := len(t.Columns)
		if len(vals) < n {
			vals, present = make([]float64, n*slab), make([]bool, n*slab)
		}
		row := Row{Line: line, Values: vals[:n:n], Present: present[:n:n]}
		vals, present = vals[n:], present[n:]
		ts, err := strconv.ParseFloat(strings.TrimSpace(rec[0]), 64)
		if err != nil || math.IsNaN(ts) || ts < 0 || ts > MaxSeconds {
			return nil, fmt.Errorf("%s:%d: t_s %q: must be a number of seconds in [0, %g]", name, line, rec[0], MaxSeconds)
		}
		row.T = ts
		for i, cell := range rec[1:] {
			cell = strings.TrimSpace(cell)
			if cell == "" {
				continue
			}
			v, err := strconv.ParseFloat(cell, 64)
			switch {
			case err != nil:
				warnInvalid(line, t.Columns[i], cell, "is not a number")
				v = math.NaN()
			case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
				// ParseFloat takes NaN and Inf; the controller drops
				// them and negative values as unusable, so say so as
				// for a word.
				warnInvalid(line, t.Columns[i], cell, "is not a finite value ≥ 0")
			}
			row.Values[i], row.Present[i] = v, true
		}
		if len(t.Rows) > 0 && row.T <= latest {
			// Replayed as stale, i.e. without signals: say so, or a trace
			// pasted together from two files would have a silent dead
			// stretch.
			if stale++; stale <= maxStaleWarnings {
				t.Warnings = append(t.Warnings, fmt.Sprintf("%s:%d: t_s %g does not advance past %g; replayed as a stale sample (no signals)", name, line, row.T, latest))
			}
		}
		latest = max(latest, row.T)
		t.Rows = append(t.Rows, row)
	}
	if len(t.Rows) == 0 {
		return nil, fmt.Errorf("%s: no rows after the header", name)
	}
	if invalid > maxStaleWarnings {
		t.Warnings = append(t.Warnings, fmt.Sprintf("%s: %d more cells replayed as invalid samples", name, invalid-maxStaleWarnings))
	}
	if stale > maxStaleWarnings {
		t.Warnings = append(t.Warnings, fmt.Sprintf("%s: %d more rows whose t_s does not advance", name, stale-maxStaleWarnings))
	}
	return t, nil
}

// maxStaleWarnings is how many rows whose time does not advance, and how
// many invalid cells, Read names one by one (then it counts them).
const maxStaleWarnings = 5

// Snapshot returns row i as a sampler snapshot: At is Origin + T, and
// Interval the time since the previous row (0 for the first, or when time
// did not advance).
func (t *Trace) Snapshot(i int) olc.Snapshot {
	row := t.Rows[i]
	s := olc.Snapshot{At: Origin.Add(seconds(row.T))}
	if i > 0 && row.T > t.Rows[i-1].T {
		s.Interval = seconds(row.T - t.Rows[i-1].T)
	}
	for j, sig := range t.Columns {
		if row.Present[j] {
			s.Set(sig, row.Values[j])
		}
	}
	return s
}

// seconds converts seconds to a Duration, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
