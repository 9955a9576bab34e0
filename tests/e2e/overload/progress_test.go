package overload

import (
	"strings"
	"testing"
	"time"
)

// TestProgressLine: a progress line's figures are its window's, its label
// names both phases when the window spans a change, p is the window's mean
// and the health column shows only where health checks ran.
func TestProgressLine(t *testing.T) {
	phases := []Phase{{Name: "0.5x", Rate: 100, Duration: 4 * time.Second}, {Name: "3x", Rate: 300, Duration: 20 * time.Second}}
	// recs returns 100 requests/s over 12 s, all answered in 10 ms, with
	// a health check every second when health is set, and a sample every
	// 500 ms (the backend at half its 1-CPU quota; p 0 in the first
	// phase, 0.6 after) when samples is set.
	recs := func(health, samples bool) *records {
		rec := &records{phases: phases}
		for at := time.Duration(0); at < 12*time.Second; at += 10 * time.Millisecond {
			rec.requests = append(rec.requests, request{start: at, latency: 10 * time.Millisecond, outcome: outcomeOK})
			rec.dials = append(rec.dials, dial{start: at, outcome: outcomeOK})
			if health && at%time.Second == 0 {
				rec.requests = append(rec.requests, request{health: true, start: at, outcome: outcomeOK})
			}
		}
		for at := time.Duration(0); samples && at < 12*time.Second; at += 500 * time.Millisecond {
			p := 0.0
			if at >= 4*time.Second {
				p = 0.6
			}
			rec.samples = append(rec.samples, sample{t: at, usage: at / 2, quota: 1, olcd: true, p: p})
		}
		return rec
	}
	// halved is the backend busy on its whole quota throughout, the quota
	// halved after the sample at 4 s (capacity-halved's QuotaChange): the
	// CPU is 1.00 of the quota in force, before and after.
	halved := func() *records {
		rec := recs(false, false)
		for at := time.Duration(0); at < 12*time.Second; at += 500 * time.Millisecond {
			quota, usage := 1.0, at
			if at > 4*time.Second {
				quota, usage = 0.5, 4*time.Second+(at-4*time.Second)/2
			}
			rec.samples = append(rec.samples, sample{t: at, usage: usage, quota: quota})
		}
		return rec
	}
	tests := []struct {
		name    string
		rec     *records
		el      time.Duration
		want    []string
		notWant []string
	}{
		// [0 s, 5 s): 4 s of 0.5x and 1 s of 3x; 2 of its 10 samples at
		// p 0.6.
		{"across a phase change", recs(true, true), 6 * time.Second,
			[]string{"0.5x→3x ", "offered  100/s", "goodput  100/s", "health 5/5", "cpu 0.50", "p 0.12"}, nil},
		{"within a phase", recs(true, true), 11 * time.Second,
			[]string{"3x ", "health 5/5", "p 0.60"}, []string{"→"}},
		{"at a phase's end", recs(true, true), 5 * time.Second,
			[]string{"0.5x ", "p 0.00"}, []string{"→"}},
		{"no health checks", recs(false, true), 11 * time.Second,
			[]string{"3x ", "p 0.60"}, []string{"health"}},
		// First to last sample over the last's quota read 1.89.
		{"the quota halved within the window", halved(), 6 * time.Second,
			[]string{"cpu 1.00"}, nil},
		{"no samples (the load balancer's runs)", recs(false, false), 11 * time.Second,
			[]string{"goodput  100/s"}, []string{"health", "cpu", " p "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := progressLine(tt.rec, tt.el, 200*time.Millisecond)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("%q has %q", got, w)
				}
			}
		})
	}
}

// TestPhaseSpan names the phases a window falls in.
func TestPhaseSpan(t *testing.T) {
	phases := []Phase{{Name: "a", Duration: 4 * time.Second}, {Name: "b", Duration: 4 * time.Second}, {Name: "c", Duration: 4 * time.Second}}
	s := time.Second
	for _, tt := range []struct {
		from, to time.Duration
		want     string
	}{
		{0, 4 * s, "a"},
		{0, 5 * s, "a→b"},
		{4 * s, 8 * s, "b"},
		{3 * s, 9 * s, "a→c"},
		{10 * s, 15 * s, "c"},
		{13 * s, 18 * s, "c"},
	} {
		if got := phaseSpan(phases, tt.from, tt.to); got != tt.want {
			t.Errorf("phaseSpan(%v, %v) = %q, want %q", tt.from, tt.to, got, tt.want)
		}
	}
	if got := phaseSpan(nil, 0, s); got != "" {
		t.Errorf("no phases: %q", got)
	}
}
