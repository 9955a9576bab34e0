package main

import (
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestResult(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(secs ...float64) []time.Time {
		out := make([]time.Time, len(secs))
		for i, s := range secs {
			out[i] = t0.Add(time.Duration(s * float64(time.Second)))
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		tg     target
		window time.Duration
		want   Result
	}{
		{
			name:   "steady 1% over 10 s",
			tg:     target{cpu: []float64{5, 5.05, 5.1}, at: at(0, 5, 10), rss: []uint64{10 * mib, 12 * mib, 14 * mib}, hwm: 20 * mib},
			window: 5 * time.Second,
			want:   Result{Seconds: 10, CPUSeconds: 0.1, CPUPct: 1, CPUMaxWindowPct: 1, RSSMeanMiB: 12, RSSMaxMiB: 14, HWMMiB: 20, PeakMiB: 20, Samples: 3},
		},
		{
			name:   "burst shows in the window maximum only",
			tg:     target{cpu: []float64{0, 0, 0.5, 0.5, 0.5}, at: at(0, 1, 2, 3, 4), rss: []uint64{mib, mib, mib, mib, mib}, hwm: mib},
			window: time.Second,
			want:   Result{Seconds: 4, CPUSeconds: 0.5, CPUPct: 12.5, CPUMaxWindowPct: 50, RSSMeanMiB: 1, RSSMaxMiB: 1, HWMMiB: 1, PeakMiB: 1, Samples: 5},
		},
		{
			name:   "window longer than the run: no window maximum; VmHWM lagging a sample",
			tg:     target{cpu: []float64{0, 1}, at: at(0, 2), rss: []uint64{mib, 3 * mib}, hwm: 2 * mib},
			window: 10 * time.Second,
			want:   Result{Seconds: 2, CPUSeconds: 1, CPUPct: 50, RSSMeanMiB: 2, RSSMaxMiB: 3, HWMMiB: 2, PeakMiB: 3, Samples: 2},
		},
		{
			name:   "one sample: memory only",
			tg:     target{cpu: []float64{3}, at: at(0), rss: []uint64{4 * mib}, hwm: 4 * mib},
			window: time.Second,
			want:   Result{RSSMeanMiB: 4, RSSMaxMiB: 4, HWMMiB: 4, PeakMiB: 4, Samples: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.tg.result(tc.window)
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
			if !near(got.Seconds, tc.want.Seconds) || !near(got.CPUSeconds, tc.want.CPUSeconds) ||
				!near(got.CPUPct, tc.want.CPUPct) || !near(got.CPUMaxWindowPct, tc.want.CPUMaxWindowPct) ||
				!near(got.RSSMeanMiB, tc.want.RSSMeanMiB) || !near(got.RSSMaxMiB, tc.want.RSSMaxMiB) ||
				!near(got.HWMMiB, tc.want.HWMMiB) || !near(got.PeakMiB, tc.want.PeakMiB) || got.Samples != tc.want.Samples {
				t.Errorf("result = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseTargets(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"a=" + self, "b=" + self}, ""},
		{nil, "no NAME=PID"},
		{[]string{"a"}, "want NAME=PID"},
		{[]string{"=" + self}, "want NAME=PID"},
		{[]string{"a=0"}, "want NAME=PID"},
		{[]string{"a=x"}, "want NAME=PID"},
		{[]string{"a=" + self, "a=" + self}, "given twice"},
	} {
		_, err := parseTargets(tc.args)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("parseTargets(%q): %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parseTargets(%q) = %v, want error containing %q", tc.args, err, tc.wantErr)
		}
	}
}

// TestRunMeasuresItself runs a short measurement of this process and checks
// the report's shape and the goal check.
func TestRunMeasuresItself(t *testing.T) {
	var out strings.Builder
	self := strconv.Itoa(os.Getpid())
	err := run([]string{"-duration", "300ms", "-every", "100ms", "-baseline", "a", "-check", "b",
		"-max-rss-mib", "0.001", "a=" + self, "b=" + self}, &out)
	if !errors.Is(err, errGoal) {
		t.Fatalf("run = %v, want errGoal (no process has less than 1 KiB RSS)\n%s", err, out.String())
	}
	for _, s := range []string{"CPU%-1CORE", "ratios to a", "goal b:", "MISSED"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
	for _, args := range [][]string{
		{"-duration", "0s", "a=" + self},
		{"-every", "1ms", "a=" + self},
		{"-baseline", "zz", "a=" + self},
	} {
		if err := run(args, &out); err == nil {
			t.Errorf("run(%q) accepted bad flags", args)
		}
	}
}
