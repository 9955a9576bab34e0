package trace

import (
	"bufio"
	"io"
	"strconv"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// MeasuredQueue are the trace columns only the datapath measures (response
// timing on a protected port): `olcd record` fills them from the running
// daemon's status, and `olcd-sim simulate` repeats them beside its decisions.
var MeasuredQueue = []olc.Signal{olc.ResponseTimeP50, olc.ResponseTimeP95, olc.ResponseTimeP99,
	olc.RequestsPerS, olc.InflightRequests}

// Writer writes a trace in the format Read reads: the header when created,
// then one row per Write, flushed at once so that a recording stopped by a
// crash or Ctrl-C keeps every complete row.
type Writer struct {
	bw    *bufio.Writer
	cols  []olc.Signal
	start time.Time
	row   []byte
}

// NewWriter writes the header "t_s,<signal>,…" for cols to w. Errors: the
// write's.
func NewWriter(w io.Writer, cols []olc.Signal) (*Writer, error) {
	tw := &Writer{bw: bufio.NewWriter(w), cols: cols, row: make([]byte, 0, 512)}
	tw.row = append(tw.row, "t_s"...)
	for _, c := range cols {
		tw.row = append(append(tw.row, ','), c.String()...)
	}
	return tw, tw.flush()
}

// Write appends s as a row: t_s is the time since the first row's At
// (seconds, 3 decimals), each column the signal's value (6 significant
// digits) or an empty cell when it is unavailable. Errors: the write's.
func (w *Writer) Write(s olc.Snapshot) error {
	if w.start.IsZero() {
		w.start = s.At
	}
	w.row = strconv.AppendFloat(w.row[:0], s.At.Sub(w.start).Seconds(), 'f', 3, 64)
	for _, c := range w.cols {
		w.row = append(w.row, ',')
		if v, ok := s.Get(c); ok {
			w.row = strconv.AppendFloat(w.row, v, 'g', 6, 64)
		}
	}
	return w.flush()
}

func (w *Writer) flush() error {
	w.row = append(w.row, '\n')
	if _, err := w.bw.Write(w.row); err != nil {
		return err
	}
	return w.bw.Flush()
}
