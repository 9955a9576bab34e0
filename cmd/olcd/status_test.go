package main

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/api"
)

func f64(v float64) *float64 { return &v }

func TestPrintStatus(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	since := now.Add(-42 * time.Second)
	base := api.Status{
		Version: "v1", ConfigSource: "/etc/olcd/olcd.yaml", IntervalS: 0.5, Ticks: 7,
		UpdatedAt: now.Add(-100 * time.Millisecond), StartedAt: now.Add(-time.Hour),
		Overload: api.OverloadStatus{Active: true, Since: &since, Pressure: 1.25, DropProbability: 0.4,
			Reason: "cpu_busy 1 (pressure 1.25, threshold 0.8): shedding"},
		Signals: []api.SignalStatus{
			{Name: "cpu_busy", Unit: "fraction", Available: true, Value: f64(1), Threshold: f64(0.8), Pressure: f64(1.25), Corroborated: true},
			{Name: "load1_per_core", Unit: "tasks", Available: true, Value: f64(3), Threshold: f64(2), Pressure: f64(1.5)},
			{Name: "psi_cpu_some", Unit: "fraction", Threshold: f64(0.5)},
			{Name: "accept_queue_fill", Unit: "fraction", Threshold: f64(0.9), Reason: "no listener on tcp/8080"},
			{Name: "runnable", Unit: "tasks", Available: true, Value: f64(4)},
		},
		Classes: []api.ClassStatus{{Class: "critical"}, {Class: "normal", DropProbability: 0.4}, {Class: "best-effort", DropProbability: 0.7}},
		Ports: []api.PortStatus{{Proto: "tcp", Port: 8080, Class: "normal", Mode: "enforce", Source: "auto",
			DropProbability: 0.4, NewPerS: 120, UniquePerS: 100, RetransmitsPerS: 20, DropShare: 0.41}},
		Exceptions:        []string{"tcp/9100", "tcp/22 (management)", "from 10.0.0.0/8"},
		ListenersExempt:   []api.ExemptListener{{Proto: "tcp", Port: 22, Reason: "exceptions.management"}},
		Interfaces:        []api.InterfaceStatus{{Name: "eth0", Hook: "tc", Mode: "tcx"}},
		InterfacesWaiting: []string{"eth1"},
		Overrides:         []api.Override{{At: now, Kind: "mode", Value: "enforce"}},
		ReloadRefused: &api.ReloadFailure{At: now, Trigger: "SIGHUP",
			Error:    "invalid config, 2 problems:\n  /etc/olcd/olcd.yaml:3: mode: unknown mode \"on\"\n  /etc/olcd/olcd.yaml:4: interval: 5ms is below the minimum 100ms",
			Problems: []string{"/etc/olcd/olcd.yaml:3: mode: unknown mode \"on\"", "/etc/olcd/olcd.yaml:4: interval: 5ms is below the minimum 100ms"}},
		RestartPending: []string{"datapath", "metrics.address"},
		LB:             &api.LBStatus{AgentAddress: "10.0.0.5:9478", Weight: 0.6, State: "ready", AgentReply: "up ready 60%"},
	}
	tests := []struct {
		mode string
		want []string
		not  []string
	}{
		{"enforce", []string{"mode ENFORCE", "+ 1 live override(s)", "shedding 40.0% of new connections", "(42s)",
			"over, not corroborated", "unavailable", "unavailable: no listener on tcp/8080", "OVER", "tcp/8080", "41.0", "exempt: tcp/9100, tcp/22 (management), from 10.0.0.0/8",
			"listening, not protected: tcp/22: a management port (exceptions.management)", "list it under ports: to protect it",
			"eth0", "tcx", "eth1", "not attached: does not exist", "live overrides (dropped on reload)",
			"CONFIG FILE REFUSED", "(SIGHUP)", "olcd.yaml:3: mode",
			"RESTART PENDING: datapath, metrics.address changed", "that start recreates the maps it resizes",
			`HAProxy agent on 10.0.0.5:9478 answers "up ready 60%"`}, []string{"runnable", "olcd detach"}},
		{"observe", []string{"would shed 40.0%", "observe mode: counted, not dropped"}, nil},
		// Global observe with one port enforcing (the README's step 4):
		// the headline says which port sheds, not "observe: not dropped".
		{"observe+enforce", []string{"node drop probability 40.0%: shedding on tcp/8080 (enforce); counted, not dropped, on tcp/80 (observe)"},
			[]string{"observe mode: counted, not dropped"}},
		{"off", []string{"mode OFF: nothing is shed"}, []string{"shedding 40"}},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			st := base
			st.Mode = tc.mode
			if tc.mode == "observe+enforce" {
				st.Mode = "observe"
				st.Ports = append(slices.Clone(base.Ports), api.PortStatus{Proto: "tcp", Port: 80, Class: "normal", Mode: "observe", Source: "config"})
			} else if tc.mode == "observe" {
				st.Ports = []api.PortStatus{{Proto: "tcp", Port: 8080, Class: "normal", Mode: "observe", Source: "auto"}}
			}
			var buf bytes.Buffer
			printStatus(&buf, &st, false, now)
			out := buf.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("status lacks %q:\n%s", w, out)
				}
			}
			for _, p := range st.ReloadRefused.Problems {
				if n := strings.Count(out, p); n != 1 {
					t.Errorf("reload problem %q printed %d times, want once:\n%s", p, n, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("status contains %q:\n%s", n, out)
				}
			}
		})
	}

	// Columns are aligned: every row of the port table starts its CLASS
	// column where the header's does.
	var buf bytes.Buffer
	st := base
	st.Mode = "enforce"
	printStatus(&buf, &st, true, now)
	out := buf.String()
	if !strings.Contains(out, "runnable") {
		t.Errorf("--all does not list signals without threshold:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "PORT") {
			col := strings.Index(l, "CLASS")
			if got := strings.Index(lines[i+1], "normal"); got != col {
				t.Errorf("port row not aligned: CLASS at %d, value at %d\n%s\n%s", col, got, l, lines[i+1])
			}
		}
	}
}

// TestPrintStatusResponse: the response-time table and the node line, with
// an unavailable quantile shown as "-", never 0, and the law's ceiling on
// requests in flight beside them while it holds one.
func TestPrintStatusResponse(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ceiling := 40
	st := api.Status{Mode: "observe", UpdatedAt: now, StartedAt: now,
		Signals: []api.SignalStatus{{Name: "response_time_p95", Unit: "seconds", Available: true, Value: f64(0.0213), Threshold: f64(0.05), Pressure: f64(0.43)}},
		Ports: []api.PortStatus{
			{Proto: "tcp", Port: 80, Class: "normal", Mode: "observe", Source: "config", Timed: true,
				ResponseTime: &api.ResponseTime{P50S: f64(0.0204), P95S: f64(0.0213), P99S: f64(0.250), Samples: 812},
				RequestsPerS: f64(1624), InflightRequests: f64(33), InFlightCeiling: &ceiling},
			{Proto: "tcp", Port: 8080, Class: "normal", Mode: "observe", Source: "config", Timed: true,
				ResponseTime: &api.ResponseTime{Samples: 2}, RequestsPerS: f64(4), InflightRequests: f64(0)},
			{Proto: "tcp", Port: 9000, Class: "normal", Mode: "observe", Source: "config"},
		},
		ResponseTiming: &api.ResponseTimingStatus{Sample: 1, MinSamples: 5, FlowTableCapacity: 16384, FlowsTracked: 40, FlowsOutstanding: 33, FlowTableFill: 40.0 / 16384},
	}
	var buf bytes.Buffer
	printStatus(&buf, &st, false, now)
	out := buf.String()
	for _, w := range []string{"RESPONSE P50", "20.4ms", "21.3ms", "250ms", "812", "1624.0", "33 ≤ 40", "not timed",
		"node (worst timed port): p50 -  p95 21.3ms  p99 -", "fewer than 5 samples", "flow table: 40 of 16384 flows"} {
		if !strings.Contains(out, w) {
			t.Errorf("status lacks %q:\n%s", w, out)
		}
	}
	if !regexp.MustCompile(`(?m)^tcp/8080\s+-\s+-\s+-\s+2\s`).MatchString(out) {
		t.Errorf("port with 2 samples under a minimum of 5 not shown unavailable:\n%s", out)
	}
}

// TestPrintStatusStarting: the status of a daemon that answers on its
// socket while it still loads and attaches the datapath (no tick yet) says
// so, instead of empty tables that read as "no protected ports", no
// interface and no overload.
func TestPrintStatusStarting(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	printStatus(&b, &api.Status{Version: "v1", ConfigSource: "/etc/olcd/olcd.yaml", StartedAt: now.Add(-1200 * time.Millisecond)}, false, now)
	got := b.String()
	want := "olcd v1   config /etc/olcd/olcd.yaml\nstarting (up 1.2s): loading and attaching the datapath; no tick yet, nothing to show\n"
	if got != want {
		t.Errorf("status before the first tick:\n%s\nwant:\n%s", got, want)
	}
}
