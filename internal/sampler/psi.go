package sampler

import (
	"bytes"
	"fmt"
	"math"
	"strconv"

	"github.com/prometheus/procfs"

	"github.com/olcd/olcd/internal/olc"
)

// psiResource is one of the resources PSI reports on.
type psiResource uint8

const (
	psiCPU psiResource = iota
	psiMemory
	psiIO
	numPSIResources
)

var psiResourceNames = [numPSIResources]string{"cpu", "memory", "io"}

// psiLine is one "some" or "full" line of a pressure file.
type psiLine struct {
	// avg10 is the 10-second running average as printed: percent 0..100.
	avg10 float64
	// total is the cumulative stall time in microseconds.
	total uint64
	ok    bool
}

// psiReading is one pressure file. A line the kernel did not print (cpu
// "full" before Linux 5.13, at the system level) has ok false.
type psiReading struct {
	some, full psiLine
}

// The signals fed by each pressure file, indexed [resource][some=0, full=1].
var (
	nodePSIAvg10 = [numPSIResources][2]olc.Signal{
		{olc.PSICPUSomeAvg10, olc.PSICPUFullAvg10},
		{olc.PSIMemorySomeAvg10, olc.PSIMemoryFullAvg10},
		{olc.PSIIOSomeAvg10, olc.PSIIOFullAvg10},
	}
	nodePSIShare = [numPSIResources][2]olc.Signal{
		{olc.PSICPUSome, olc.PSICPUFull},
		{olc.PSIMemorySome, olc.PSIMemoryFull},
		{olc.PSIIOSome, olc.PSIIOFull},
	}
	cgroupPSIAvg10 = [numPSIResources][2]olc.Signal{
		{olc.CgroupPSICPUSomeAvg10, olc.CgroupPSICPUFullAvg10},
		{olc.CgroupPSIMemorySomeAvg10, olc.CgroupPSIMemoryFullAvg10},
		{olc.CgroupPSIIOSomeAvg10, olc.CgroupPSIIOFullAvg10},
	}
	cgroupPSIShare = [numPSIResources][2]olc.Signal{
		{olc.CgroupPSICPUSome, olc.CgroupPSICPUFull},
		{olc.CgroupPSIMemorySome, olc.CgroupPSIMemoryFull},
		{olc.CgroupPSIIOSome, olc.CgroupPSIIOFull},
	}
	nodePSISource   = [numPSIResources]string{SourcePSICPU, SourcePSIMemory, SourcePSIIO}
	cgroupPSISource = [numPSIResources]string{SourceCgroupPSICPU, SourceCgroupPSIMemory, SourceCgroupPSIIO}
	cgroupPSIFile   = [numPSIResources]string{"cpu.pressure", "memory.pressure", "io.pressure"}
)

func validAvg(v float64) bool {
	return !math.IsNaN(v) && v >= 0 && v <= 100
}

// parsePSI parses a pressure file as the kernel prints it
// (Documentation/accounting/psi.rst):
//
//	some avg10=0.12 avg60=0.05 avg300=0.01 total=123456
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//
// It is used for the cgroup v2 files (cpu.pressure, …): procfs reads only
// /proc/pressure/*. Like procfs's parser, it ignores lines with an unknown
// first word and fails on a malformed some/full line; like fromPSIStats, it
// rejects an avg10 outside 0..100. A missing line leaves that half
// unavailable.
func parsePSI(data []byte) (psiReading, error) {
	var r psiReading
	lineNo := 0
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, newline)
		lineNo++
		kind, rest := cutField(line)
		var dst *psiLine
		switch string(kind) {
		case "some":
			dst = &r.some
		case "full":
			dst = &r.full
		default:
			continue
		}
		l, err := parsePSILine(rest)
		if err != nil {
			return psiReading{}, fmt.Errorf("line %d (%s): %w", lineNo, kind, err)
		}
		*dst = l
	}
	return r, nil
}

func parsePSILine(rest []byte) (psiLine, error) {
	var (
		l                  psiLine
		haveAvg, haveTotal bool
	)
	for {
		var tok []byte
		tok, rest = cutField(rest)
		if len(tok) == 0 {
			break
		}
		key, val, ok := bytes.Cut(tok, []byte("="))
		if !ok {
			return psiLine{}, fmt.Errorf("field %q: want key=value", clip(tok))
		}
		switch string(key) {
		case "avg10":
			v, err := strconv.ParseFloat(string(val), 64)
			if err != nil || !validAvg(v) {
				return psiLine{}, fmt.Errorf("avg10=%q: not a percentage", clip(val))
			}
			l.avg10, haveAvg = v, true
		case "total":
			v, ok := parseUintBytes(val)
			if !ok {
				return psiLine{}, fmt.Errorf("total=%q: not a microsecond count", clip(val))
			}
			l.total, haveTotal = v, true
		}
	}
	if !haveAvg || !haveTotal {
		return psiLine{}, fmt.Errorf("missing avg10 or total")
	}
	l.ok = true
	return l, nil
}

// fromPSIStats converts procfs's reading of /proc/pressure/<res>, rejecting
// an avg10 outside 0..100 as parsePSI does.
func fromPSIStats(st procfs.PSIStats) (psiReading, error) {
	var r psiReading
	for _, l := range []struct {
		name string
		in   *procfs.PSILine
		out  *psiLine
	}{{"some", st.Some, &r.some}, {"full", st.Full, &r.full}} {
		if l.in == nil {
			continue
		}
		if !validAvg(l.in.Avg10) {
			return psiReading{}, fmt.Errorf("%s: avg10=%v: not a percentage", l.name, l.in.Avg10)
		}
		*l.out = psiLine{avg10: l.in.Avg10, total: l.in.Total, ok: true}
	}
	return r, nil
}
