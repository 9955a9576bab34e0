// Command procmon measures the CPU time and memory of running processes over
// a bounded run and prints a summary; it is the measuring half of
// scripts/bench-daemon.sh.
//
//	procmon -duration 10m [-every 1s] [-window 10s] [-baseline NAME] [-json FILE]
//	        [-check NAME -max-cpu-pct 1 -max-rss-mib 40] NAME=PID ...
//
// For each process it reports:
//   - CPU share of one core: (utime+stime at the end − at the start) ÷ wall
//     time, from /proc/PID/stat (kernel ticks of 1/USER_HZ s, so the
//     resolution is 10 ms of CPU per run), as a percentage;
//   - the largest CPU share over any -window of consecutive samples;
//   - resident memory: mean and maximum of VmRSS sampled every -every,
//     VmHWM (the kernel's peak RSS since the process started) at the end,
//     and the peak: the larger of the two (VmHWM is updated lazily).
//
// With -baseline every figure is also given as a ratio to that process's,
// measured over the same seconds. With -check the named process is compared
// with the goals and the exit status is 3 when it misses one.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/procfs"
)

// Result is the summary of one process; the JSON of -json.
type Result struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// Seconds is the wall time measured over.
	Seconds float64 `json:"seconds"`
	// CPUSeconds is the user+system CPU time used in the run.
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUPct is CPUSeconds ÷ Seconds × 100: percent of one core.
	CPUPct float64 `json:"cpu_pct_of_one_core"`
	// CPUMaxWindowPct is the largest CPU share over any window, in percent.
	CPUMaxWindowPct float64 `json:"cpu_max_window_pct"`
	// RSSMeanMiB and RSSMaxMiB summarise VmRSS samples, in MiB.
	RSSMeanMiB float64 `json:"rss_mean_mib"`
	RSSMaxMiB  float64 `json:"rss_max_mib"`
	// HWMMiB is VmHWM (peak RSS since start) at the end, in MiB.
	HWMMiB float64 `json:"hwm_mib"`
	// PeakMiB is the larger of HWMMiB and RSSMaxMiB: the kernel updates
	// VmHWM lazily, so a sampled VmRSS can exceed it.
	PeakMiB float64 `json:"peak_rss_mib"`
	// Samples is the number of memory samples.
	Samples int `json:"samples"`
}

// target is one monitored process and its samples.
type target struct {
	name string
	proc procfs.Proc
	pid  int
	cpu  []float64 // CPU seconds at each sample
	at   []time.Time
	rss  []uint64 // bytes
	hwm  uint64
}

const mib = 1 << 20

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "procmon:", err)
		if errors.Is(err, errGoal) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

// errGoal marks a process that missed a -check goal.
var errGoal = errors.New("goal missed")

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("procmon", flag.ContinueOnError)
	duration := fs.Duration("duration", 10*time.Minute, "how long to measure (at most 2h)")
	every := fs.Duration("every", time.Second, "sampling period (100ms..1m)")
	window := fs.Duration("window", 10*time.Second, "window of the maximum CPU share")
	baseline := fs.String("baseline", "", "NAME of the process the others are compared with")
	jsonPath := fs.String("json", "", "also write the results as JSON to this file")
	check := fs.String("check", "", "NAME of the process to compare with the goals")
	maxCPU := fs.Float64("max-cpu-pct", 1, "goal: CPU share of one core, percent (with -check)")
	maxRSS := fs.Float64("max-rss-mib", 40, "goal: peak RSS (max of VmHWM and sampled VmRSS), MiB (with -check)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *duration <= 0 || *duration > 2*time.Hour {
		return fmt.Errorf("-duration %v: want (0, 2h]", *duration)
	}
	if *every < 100*time.Millisecond || *every > time.Minute || *every > *duration {
		return fmt.Errorf("-every %v: want 100ms..1m and at most -duration", *every)
	}
	targets, err := parseTargets(fs.Args())
	if err != nil {
		return err
	}
	for _, n := range []string{*baseline, *check} {
		if n != "" && find(targets, n) == nil {
			return fmt.Errorf("%q is not one of the NAME=PID arguments", n)
		}
	}

	start := time.Now()
	end := start.Add(*duration)
	for n := 0; ; n++ {
		for _, t := range targets {
			if err := t.sample(); err != nil {
				return err
			}
		}
		next := start.Add(time.Duration(n+1) * *every)
		if next.After(end) {
			break
		}
		time.Sleep(time.Until(next))
	}

	results := make([]Result, len(targets))
	for i, t := range targets {
		results[i] = t.result(*window)
	}
	report(out, results, *baseline)
	if *jsonPath != "" {
		data, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*jsonPath, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *jsonPath, err)
		}
	}
	if *check != "" {
		for _, r := range results {
			if r.Name != *check {
				continue
			}
			okCPU, okRSS := r.CPUPct < *maxCPU, r.PeakMiB < *maxRSS
			fmt.Fprintf(out, "\ngoal %s: CPU %.3f%% of one core (goal < %g%%): %s; peak RSS %.1f MiB (goal < %g MiB): %s\n",
				r.Name, r.CPUPct, *maxCPU, verdict(okCPU), r.PeakMiB, *maxRSS, verdict(okRSS))
			if !okCPU || !okRSS {
				return errGoal
			}
		}
	}
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func parseTargets(args []string) ([]*target, error) {
	if len(args) == 0 {
		return nil, errors.New("no NAME=PID given")
	}
	var out []*target
	for _, a := range args {
		name, pidStr, ok := strings.Cut(a, "=")
		pid, err := strconv.Atoi(pidStr)
		if !ok || name == "" || err != nil || pid <= 0 {
			return nil, fmt.Errorf("argument %q: want NAME=PID", a)
		}
		if find(out, name) != nil {
			return nil, fmt.Errorf("name %q given twice", name)
		}
		p, err := procfs.NewProc(pid)
		if err != nil {
			return nil, fmt.Errorf("process %s (pid %d): %w", name, pid, err)
		}
		out = append(out, &target{name: name, proc: p, pid: pid})
	}
	return out, nil
}

func find(ts []*target, name string) *target {
	for _, t := range ts {
		if t.name == name {
			return t
		}
	}
	return nil
}

// sample reads CPU time and memory once. Errors: the process ended.
func (t *target) sample() error {
	st, err := t.proc.Stat()
	if err != nil {
		return fmt.Errorf("%s (pid %d) ended or is unreadable: %w", t.name, t.pid, err)
	}
	ss, err := t.proc.NewStatus()
	if err != nil {
		return fmt.Errorf("%s (pid %d) ended or is unreadable: %w", t.name, t.pid, err)
	}
	t.cpu = append(t.cpu, st.CPUTime())
	t.at = append(t.at, time.Now())
	t.rss = append(t.rss, ss.VmRSS)
	t.hwm = ss.VmHWM
	return nil
}

// result summarises the samples; w is the window of the maximum CPU share.
func (t *target) result(w time.Duration) Result {
	n := len(t.cpu)
	r := Result{Name: t.name, PID: t.pid, Samples: n, HWMMiB: float64(t.hwm) / mib}
	if n >= 2 {
		r.Seconds = t.at[n-1].Sub(t.at[0]).Seconds()
		r.CPUSeconds = t.cpu[n-1] - t.cpu[0]
		if r.Seconds > 0 {
			r.CPUPct = 100 * r.CPUSeconds / r.Seconds
		}
		// Largest share over [i, j] with j the first sample at least w
		// after i.
		j := 0
		for i := 0; i < n; i++ {
			for j < n && t.at[j].Sub(t.at[i]) < w {
				j++
			}
			if j == n {
				break
			}
			if s := t.at[j].Sub(t.at[i]).Seconds(); s > 0 {
				r.CPUMaxWindowPct = max(r.CPUMaxWindowPct, 100*(t.cpu[j]-t.cpu[i])/s)
			}
		}
	}
	var sum, top uint64
	for _, v := range t.rss {
		sum += v
		top = max(top, v)
	}
	if n > 0 {
		r.RSSMeanMiB = float64(sum) / float64(n) / mib
	}
	r.RSSMaxMiB = float64(top) / mib
	r.PeakMiB = max(r.HWMMiB, r.RSSMaxMiB)
	return r
}

// report prints the results as a table, then the ratios to the baseline.
func report(w io.Writer, rs []Result, baseline string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "NAME\tPID\tSECONDS\tCPU-S\tCPU%-1CORE\tCPU%-MAX-WINDOW\tRSS-MEAN-MIB\tRSS-MAX-MIB\tHWM-MIB\tPEAK-MIB\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t\n",
			r.Name, r.PID, r.Seconds, r.CPUSeconds, r.CPUPct, r.CPUMaxWindowPct, r.RSSMeanMiB, r.RSSMaxMiB, r.HWMMiB, r.PeakMiB)
	}
	tw.Flush()
	if baseline == "" {
		return
	}
	var b Result
	for _, r := range rs {
		if r.Name == baseline {
			b = r
		}
	}
	fmt.Fprintf(w, "\nratios to %s (measured over the same seconds):\n", baseline)
	for _, r := range rs {
		if r.Name == baseline {
			continue
		}
		fmt.Fprintf(w, "  %s: CPU ×%s, mean RSS ×%s, peak RSS ×%s\n",
			r.Name, ratio(r.CPUSeconds, b.CPUSeconds), ratio(r.RSSMeanMiB, b.RSSMeanMiB), ratio(r.PeakMiB, b.PeakMiB))
	}
}

// ratio formats a ÷ b; a baseline of 0 (e.g. an idle process that used no
// measurable CPU tick) has no ratio.
func ratio(a, b float64) string {
	if b == 0 {
		return "n/a (baseline 0)"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64)
}
