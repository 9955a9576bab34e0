package overload

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"time"
)

// span is an interval of the load's time.
type span struct{ from, to time.Duration }

// shedSpans reads olcd's decision logs (paths, in any order; a missing
// file is none) and returns the spans of the load, since start, in which
// the port's drop probability was above 0 or an overload had not ended:
// the law's ceiling on requests in flight refuses at p = 0 too, until it
// refused nothing for a retransmit timeout, and overload_end follows. The
// status the harness samples every 500 ms shows the tick's p, but the
// law's onset windows act every 50 ms between ticks: a whole episode of a
// few windows can start and end between two samples, and only the decision
// log, which records every change, shows it.
func shedSpans(paths []string, start time.Time, port string) ([]span, error) {
	type change struct {
		at    time.Time
		event string  // "", or overload_start / overload_end
		to    float64 // the port's p after a probability_change
		peak  float64 // the highest p in the record (folded ticks' range)
		order int     // in its file, for changes at the same time
	}
	var changes []change
	for _, path := range paths {
		n := 0
		err := ReadJSONLines(path, func(b []byte) error {
			var rec struct {
				Msg   string    `json:"msg"`
				At    time.Time `json:"at"`
				Ports []struct {
					To    float64     `json:"to"`
					Range *[2]float64 `json:"range"`
					Ports []string    `json:"ports"`
				} `json:"ports"`
			}
			if err := json.Unmarshal(b, &rec); err != nil {
				return err
			}
			n++
			if rec.Msg == "overload_start" || rec.Msg == "overload_end" {
				changes = append(changes, change{at: rec.At, event: rec.Msg, order: n})
			}
			for _, g := range rec.Ports {
				for _, p := range g.Ports {
					if p != port {
						continue
					}
					c := change{at: rec.At, to: g.To, peak: g.To, order: n}
					if g.Range != nil {
						c.peak = max(c.peak, g.Range[1])
					}
					changes = append(changes, c)
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	sort.SliceStable(changes, func(i, j int) bool {
		if !changes[i].at.Equal(changes[j].at) {
			return changes[i].at.Before(changes[j].at)
		}
		return changes[i].order < changes[j].order
	})
	var out []span
	shedding, overloaded := false, false
	for _, c := range changes {
		t := c.at.Sub(start)
		was := shedding || overloaded
		switch c.event {
		case "overload_start":
			overloaded = true
		case "overload_end":
			overloaded = false
		default:
			if c.peak > 0 && !shedding {
				if !was {
					out = append(out, span{from: t, to: -1})
					was = true
				}
			}
			shedding = c.to > 0
		}
		switch now := shedding || overloaded; {
		case !was && now:
			out = append(out, span{from: t, to: -1})
		case was && !now:
			out[len(out)-1].to = t
		}
	}
	if len(out) > 0 && out[len(out)-1].to < 0 {
		out[len(out)-1].to = time.Duration(1<<63 - 1)
	}
	return out, nil
}

// ReadJSONLines calls fn with each line of a JSON-lines file (olcd's
// decision log, the harness's status log), up to 1 MiB a line. An error of
// fn or of the read is returned with the file and line; a missing file is
// fs.ErrNotExist.
func ReadJSONLines(path string, fn func(line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if err := fn(sc.Bytes()); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// shedDuring reports whether any span overlaps [from, to].
func shedDuring(spans []span, from, to time.Duration) bool {
	for _, s := range spans {
		if s.from <= to && s.to >= from {
			return true
		}
	}
	return false
}
