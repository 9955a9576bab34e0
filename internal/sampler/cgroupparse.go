package sampler

import (
	"bytes"
	"errors"
	"fmt"
)

// Parsers for the cgroup interface files (Documentation/admin-guide/cgroup-v2.rst
// and cgroup-v1/cpuacct.rst, scheduler/sched-bwc.rst). procfs does not read
// them. Every parser works on bytes without allocating on success, names the
// field or line on failure, and converts units once: times come out in
// nanoseconds whatever the file's unit.

// cpuStat is what the sampler needs from a cgroup's cpu.stat.
type cpuStat struct {
	// usageNs is v2 usage_usec × 1000 (v1 cpu.stat has no usage).
	usageNs uint64
	usageOK bool
	// nrPeriods and nrThrottled count CFS enforcement periods.
	nrPeriods, nrThrottled uint64
	periodsOK, throttledOK bool
	// throttledNs is v2 throttled_usec × 1000 or v1 throttled_time (ns).
	throttledNs   uint64
	throttledNsOK bool
}

// parseCPUStat parses "key value" lines of cpu.stat. Unknown keys are
// ignored; a needed key with a value that is not an unsigned integer is an
// error naming the line. A key that is absent stays unavailable (ok false):
// a cgroup without the cpu controller has only usage_usec/user_usec/system_usec.
func parseCPUStat(data []byte) (cpuStat, error) {
	var st cpuStat
	lineNo := 0
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, newline)
		lineNo++
		key, rest := cutField(line)
		var (
			dst   *uint64
			ok    *bool
			scale uint64 = 1
		)
		switch string(key) {
		case "usage_usec":
			dst, ok, scale = &st.usageNs, &st.usageOK, 1000
		case "nr_periods":
			dst, ok = &st.nrPeriods, &st.periodsOK
		case "nr_throttled":
			dst, ok = &st.nrThrottled, &st.throttledOK
		case "throttled_usec":
			dst, ok, scale = &st.throttledNs, &st.throttledNsOK, 1000
		case "throttled_time":
			// v1 prints nanoseconds. A file with both keys is not one any
			// kernel writes; the microsecond key, parsed either way, wins.
			if st.throttledNsOK {
				continue
			}
			dst, ok = &st.throttledNs, &st.throttledNsOK
		default:
			continue
		}
		v, tail, good := nextUint(rest)
		if !good || len(trimLeftSpace(tail)) != 0 {
			return cpuStat{}, fmt.Errorf("line %d: %s: not an unsigned integer: %q", lineNo, key, clip(rest))
		}
		if scale != 1 {
			if v > (1<<64-1)/scale {
				return cpuStat{}, fmt.Errorf("line %d: %s: %d overflows nanoseconds", lineNo, key, v)
			}
			v *= scale
		}
		*dst, *ok = v, true
	}
	return st, nil
}

// parseCPUMax parses cgroup v2 cpu.max, "$MAX $PERIOD" in microseconds, and
// returns the quota in CPUs (quota ÷ period). "max" means unlimited: limited
// is false and that is not an error. A lone "max" (no period) is accepted.
func parseCPUMax(data []byte) (cpus float64, limited bool, err error) {
	cpus, _, limited, err = parseCPUMaxPeriod(data)
	return cpus, limited, err
}

// parseCPUMaxPeriod is parseCPUMax that also returns the period in seconds
// (0 when unlimited).
func parseCPUMaxPeriod(data []byte) (cpus, periodS float64, limited bool, err error) {
	quota, rest := cutField(data)
	period, rest := cutField(rest)
	if extra, _ := cutField(rest); len(extra) != 0 || len(quota) == 0 {
		return 0, 0, false, fmt.Errorf("want \"$MAX $PERIOD\", got %q", clip(bytes.TrimSpace(data)))
	}
	if string(quota) == "max" {
		return 0, 0, false, nil
	}
	q, ok := parseUintBytes(quota)
	if !ok {
		return 0, 0, false, fmt.Errorf("quota %q: not \"max\" or a microsecond count", clip(quota))
	}
	p, ok := parseUintBytes(period)
	if !ok || p == 0 {
		return 0, 0, false, fmt.Errorf("period %q: not a positive microsecond count", clip(period))
	}
	return float64(q) / float64(p), float64(p) / 1e6, true, nil
}

// parseCFSQuota parses cgroup v1 cpu.cfs_quota_us: microseconds per period,
// or −1 for unlimited (limited false, not an error).
func parseCFSQuota(data []byte) (quotaUs uint64, limited bool, err error) {
	tok, rest := cutField(data)
	if extra, _ := cutField(rest); len(extra) != 0 {
		return 0, false, fmt.Errorf("want one number, got %q", clip(bytes.TrimSpace(data)))
	}
	if string(tok) == "-1" {
		return 0, false, nil
	}
	v, ok := parseUintBytes(tok)
	if !ok {
		return 0, false, fmt.Errorf("%q: not -1 or a microsecond count", clip(tok))
	}
	return v, true, nil
}

// parseSingleUint parses a file holding one unsigned integer (v1
// cpuacct.usage in ns, cpu.cfs_period_us in µs).
func parseSingleUint(data []byte) (uint64, error) {
	tok, rest := cutField(data)
	if extra, _ := cutField(rest); len(extra) != 0 {
		return 0, fmt.Errorf("want one number, got %q", clip(bytes.TrimSpace(data)))
	}
	v, ok := parseUintBytes(tok)
	if !ok {
		return 0, fmt.Errorf("%q: not an unsigned integer", clip(tok))
	}
	return v, nil
}

// maxCPUs bounds a CPU list so a corrupt range cannot make the count absurd;
// Linux's NR_CPUS maximum is 8192.
const maxCPUs = 1 << 16

// parseCPUList counts the CPUs in a kernel cpu list such as "0-3,8,10-11"
// (cpuset.cpus.effective, cpuset.effective_cpus, cpuset.cpus). An empty list
// returns 0 with no error: a v1 cpuset not yet configured.
func parseCPUList(data []byte) (int, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return 0, nil
	}
	n := 0
	for len(data) > 0 {
		var item []byte
		if i := bytes.IndexByte(data, ','); i >= 0 {
			item, data = data[:i], data[i+1:]
			if len(data) == 0 {
				return 0, errors.New("cpu list ends with a comma")
			}
		} else {
			item, data = data, nil
		}
		lo, hi, isRange := bytes.Cut(item, []byte("-"))
		a, ok := parseUintBytes(lo)
		if !ok || a >= maxCPUs {
			return 0, fmt.Errorf("cpu %q: not a cpu number", clip(lo))
		}
		b := a
		if isRange {
			b, ok = parseUintBytes(hi)
			if !ok || b >= maxCPUs || b < a {
				return 0, fmt.Errorf("range %q: not lo-hi with lo ≤ hi", clip(item))
			}
		}
		n += int(b-a) + 1
		if n > maxCPUs {
			return 0, fmt.Errorf("more than %d cpus", maxCPUs)
		}
	}
	return n, nil
}

// unescapeMountPath decodes the octal escapes (\040 space, \011 tab, \012
// newline, \134 backslash) that the kernel writes into mountinfo paths
// (fs/proc_namespace.c, mangle). procfs leaves them as printed. A backslash
// not followed by three octal digits is kept as is.
func unescapeMountPath(s string) string {
	if !containsByte(s, '\\') {
		return s
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (int(s[i+1]-'0') << 6) | (int(s[i+2]-'0') << 3) | int(s[i+3]-'0')
			if v <= 0xff {
				out = append(out, byte(v))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func containsByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}
