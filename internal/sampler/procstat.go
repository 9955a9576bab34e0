package sampler

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// The columns of the aggregate "cpu" line of /proc/stat, in kernel order
// (Documentation/filesystems/proc.rst, "1.7 Miscellaneous kernel statistics").
const (
	cpuUser = iota
	cpuNice
	cpuSystem
	cpuIdle
	cpuIOWait
	cpuIRQ
	cpuSoftIRQ
	cpuSteal
	cpuGuest
	cpuGuestNice
	cpuMaxFields
)

// cpuMinFields is the fewest columns a cpu line may have: Linux 2.4 printed
// only user, nice, system and idle; iowait came in 2.5.41, irq/softirq in
// 2.6.0, steal in 2.6.11, guest in 2.6.24, guest_nice in 2.6.33.
const cpuMinFields = 4

// statReading is what the sampler needs from /proc/stat.
type statReading struct {
	// cpu holds the aggregate line's columns in USER_HZ ticks; columns the
	// kernel did not print are 0.
	cpu [cpuMaxFields]uint64
	// fields is how many columns the aggregate line had (4..10).
	fields int
	cpuOK  bool
	// online counts the per-CPU "cpuN" lines, which the kernel prints for
	// online CPUs only (fs/proc/stat.c, for_each_online_cpu).
	online int
	// running is procs_running: tasks runnable right now, including the
	// reader itself.
	running   uint64
	runningOK bool
}

// statLineBuf is the streaming buffer size for /proc/stat. Lines longer than
// this (the intr line is hundreds of KiB on large machines) are skipped
// without being held in memory.
const statLineBuf = 4096

// Hand parser: procfs's Stat fails the whole file on a negative processes counter (TestProcStatNotProcfs).
//
// parseProcStat reads /proc/stat from r, line by line, parsing only the
// aggregate cpu line, counting cpuN lines, and parsing procs_running. It
// stops reading once it has both. Every other line (intr, softirq, a negative
// or unparsable "processes", blank lines) is skipped without being parsed, so
// it can never fail the read. buf is scratch space of any size ≥ 64 (it is
// reused across ticks). The error, if any, names the first problem with a
// needed line (name and line number); the fields that were read remain valid.
func parseProcStat(r io.Reader, buf []byte) (statReading, error) {
	var (
		st        statReading
		firstErr  error
		start     int
		end       int
		lineNo    int
		skipping  bool // discarding the rest of an over-long line
		eof       bool
		cpuSeen   bool
		procsSeen bool
	)
	setErr := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	if len(buf) < 64 {
		buf = make([]byte, statLineBuf)
	}
	// handle processes one complete line and reports whether everything
	// needed has been read: the kernel prints all cpu lines first and
	// procs_running later, so the first non-cpu line after both ends it.
	handle := func(line []byte) bool {
		lineNo++
		name, rest := cutField(line)
		cpuish := false
		switch {
		case string(name) == "cpu":
			cpuish = true
			if cpuSeen {
				break
			}
			cpuSeen = true
			n, err := parseCPUFields(rest, &st.cpu)
			if err != nil {
				setErr(fmt.Errorf("proc/stat line %d: %w", lineNo, err))
				break
			}
			st.fields, st.cpuOK = n, true
		case isCPUN(name):
			cpuish = true
			st.online++
		case string(name) == "procs_running":
			if procsSeen {
				break
			}
			procsSeen = true
			v, tail, ok := nextUint(rest)
			if !ok || len(trimLeftSpace(tail)) != 0 {
				setErr(fmt.Errorf("proc/stat line %d: procs_running: not a count: %q", lineNo, clip(rest)))
				break
			}
			st.running, st.runningOK = v, true
		}
		return cpuSeen && procsSeen && !cpuish
	}
	for {
		if i := bytes.IndexByte(buf[start:end], '\n'); i >= 0 {
			line := buf[start : start+i]
			start += i + 1
			if skipping {
				skipping = false
				continue
			}
			if handle(line) {
				return st, firstErr
			}
			continue
		}
		if eof {
			if start < end && !skipping {
				handle(buf[start:end])
			}
			break
		}
		if start > 0 {
			end = copy(buf, buf[start:end])
			start = 0
		}
		if end == len(buf) {
			// A line longer than the buffer. Only intr (and softirq on huge
			// machines) gets this long; a needed line this long is corrupt.
			if !skipping {
				lineNo++
				name, _ := cutField(buf[:end])
				switch {
				case string(name) == "cpu" && !cpuSeen:
					cpuSeen = true
					setErr(fmt.Errorf("proc/stat line %d: cpu line longer than %d bytes", lineNo, len(buf)))
				case string(name) == "procs_running" && !procsSeen:
					procsSeen = true
					setErr(fmt.Errorf("proc/stat line %d: procs_running line longer than %d bytes", lineNo, len(buf)))
				}
			}
			skipping = true
			end = 0
		}
		n, err := r.Read(buf[end:])
		end += n
		if err == io.EOF {
			eof = true
		} else if err != nil {
			return st, fmt.Errorf("read proc/stat: %w", err)
		}
	}
	if !cpuSeen {
		setErr(errors.New("proc/stat: no aggregate cpu line"))
	}
	if !procsSeen {
		setErr(errors.New("proc/stat: no procs_running line"))
	}
	return st, firstErr
}

// isCPUN reports whether name is a per-CPU label such as "cpu12".
func isCPUN(name []byte) bool {
	return len(name) > 3 && string(name[:3]) == "cpu" && isDigits(name[3:])
}

// parseCPUFields parses the numeric columns after "cpu" into out and returns
// how many there were. Fewer than cpuMinFields, or a column that is not an
// unsigned decimal, is an error; columns past the tenth (a future kernel) are
// ignored.
func parseCPUFields(rest []byte, out *[cpuMaxFields]uint64) (int, error) {
	n := 0
	for {
		var v uint64
		var ok bool
		rest = trimLeftSpace(rest)
		if len(rest) == 0 {
			break
		}
		if n == cpuMaxFields {
			break
		}
		tok, r := cutField(rest)
		v, ok = parseUintBytes(tok)
		if !ok {
			return 0, fmt.Errorf("cpu column %d: not an unsigned integer: %q", n+1, clip(tok))
		}
		out[n] = v
		n++
		rest = r
	}
	if n < cpuMinFields {
		return 0, fmt.Errorf("cpu line has %d columns, need at least %d", n, cpuMinFields)
	}
	for i := n; i < cpuMaxFields; i++ {
		out[i] = 0
	}
	return n, nil
}

// isBlank reports the bytes that separate fields in kernel pseudo-files.
func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// cutField returns the first blank-separated field of b (after leading
// blanks) and the remainder after it.
func cutField(b []byte) (field, rest []byte) {
	b = trimLeftSpace(b)
	i := 0
	for i < len(b) && !isBlank(b[i]) {
		i++
	}
	return b[:i], b[i:]
}

func trimLeftSpace(b []byte) []byte {
	i := 0
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	return b[i:]
}

// nextUint parses the next field of b as an unsigned decimal.
func nextUint(b []byte) (uint64, []byte, bool) {
	tok, rest := cutField(b)
	v, ok := parseUintBytes(tok)
	return v, rest, ok
}

// parseUintBytes parses a non-empty unsigned decimal without allocating; it
// rejects signs, blanks and values above 2^64−1.
func parseUintBytes(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// clip shortens b for error messages so a corrupt line cannot flood a log.
func clip(b []byte) []byte {
	const max = 40
	if len(b) > max {
		return b[:max]
	}
	return b
}

// newline separates the lines of the small /proc and cgroup files parsed
// here with bytes.Cut.
var newline = []byte{'\n'}
