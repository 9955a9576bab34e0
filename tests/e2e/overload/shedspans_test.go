package overload

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestShedSpans reads a decision log as olcd writes it: an onset episode
// of windows between two ticks, a folded record whose range went above 0,
// another port's change, a restart's earlier log, and an overload whose
// ceiling sheds past the p of 0 until overload_end.
func TestShedSpans(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 6, 4, 23, 38, 0, time.UTC)
	at := func(ms int) string { return start.Add(time.Duration(ms) * time.Millisecond).Format(time.RFC3339Nano) }
	rec := func(ms int, port string, from, to float64, rng string) string {
		r := `{"msg":"probability_change","at":"` + at(ms) + `","ports":[{"class":"normal","from":` + ftoa(from) + `,"to":` + ftoa(to) + `,"ports":["` + port + `"]`
		if rng != "" {
			r += `,"range":` + rng
		}
		return r + "}]}\n"
	}
	now := rec(5500, "tcp/18080", 0, 0.88, "") +
		rec(5550, "tcp/18080", 0.88, 0.46, "") +
		rec(5900, "tcp/18080", 0.46, 0, "") +
		rec(6000, "tcp/9000", 0, 0.5, "") +
		rec(9000, "tcp/18080", 0, 0, "[0,0.3]") +
		rec(12000, "tcp/18080", 0, 0.2, "")
	before := rec(1000, "tcp/18080", 0, 0.1, "") + rec(2000, "tcp/18080", 0.1, 0, "")
	if err := os.WriteFile(filepath.Join(dir, "decisions.jsonl"), []byte(now), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "decisions-before-restart.jsonl"), []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := shedSpans([]string{filepath.Join(dir, "decisions.jsonl"), filepath.Join(dir, "decisions-before-restart.jsonl"), filepath.Join(dir, "absent.jsonl")}, start, "tcp/18080")
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	want := []span{{1000 * ms, 2000 * ms}, {5500 * ms, 5900 * ms}, {9000 * ms, 9000 * ms}, {12000 * ms, time.Duration(1<<63 - 1)}}
	if len(got) != len(want) {
		t.Fatalf("spans %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d: %v, want %v", i, got[i], want[i])
		}
	}
	for _, tc := range []struct {
		from, to time.Duration
		want     bool
	}{
		{5000 * ms, 5600 * ms, true},
		{6000 * ms, 8000 * ms, false},
		{8500 * ms, 9500 * ms, true},
		{20000 * ms, 21000 * ms, true},
	} {
		if g := shedDuring(got, tc.from, tc.to); g != tc.want {
			t.Errorf("shedDuring(%v, %v) = %v, want %v", tc.from, tc.to, g, tc.want)
		}
	}
	// The law's ceiling sheds at p = 0 until overload_end: the span runs
	// from the first p above 0 to it, not to the p of 0.
	ev := func(ms int, msg string) string { return `{"msg":"` + msg + `","at":"` + at(ms) + `"}` + "\n" }
	ceiled := filepath.Join(dir, "decisions-ceiled.jsonl")
	if err := os.WriteFile(ceiled, []byte(ev(3000, "overload_start")+rec(3000, "tcp/18080", 0, 0.6, "")+
		rec(3500, "tcp/18080", 0.6, 0, "")+ev(4200, "overload_end")), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := shedSpans([]string{ceiled}, start, "tcp/18080"); err != nil || len(got) != 1 || got[0] != (span{3000 * ms, 4200 * ms}) {
		t.Errorf("spans with the ceiling past p = 0: %v (%v), want [{3s 4.2s}]", got, err)
	}
	if _, err := shedSpans([]string{writeBad(t, dir)}, start, "tcp/18080"); err == nil {
		t.Error("a malformed line read without an error")
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func writeBad(t *testing.T, dir string) string {
	p := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(p, []byte("{not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
