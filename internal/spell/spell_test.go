package spell

import "testing"

func TestLevenshtein(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"kitten", "sitting", 3},
		{"cpu_busy", "cpu_busy", 0},
		{"cpu_bsuy", "cpu_busy", 2},
		{"load1", "load15", 1},
	} {
		if got := Levenshtein(tc.a, tc.b); got != tc.want {
			t.Errorf("Levenshtein(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Levenshtein(tc.b, tc.a); got != tc.want {
			t.Errorf("Levenshtein(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	signals := []string{"cpu_busy", "load1", "load1_per_core", "psi_cpu_some", "psi_cpu_some_avg10"}
	for _, tc := range []struct {
		word string
		want string
	}{
		{"cpu_busy", "cpu_busy"},
		{"cpu_bussy", "cpu_busy"},
		{"psi_cpu_som_avg10", "psi_cpu_some_avg10"},
		{"lod1", "load1"},
		{"memory", ""},     // nothing within max(2, 6/3) edits
		{"xy", ""},         // 2 edits from nothing listed
		{"", ""},           // every candidate is further than 2
		{"load", "load1"},  // 1 edit
		{"load2", "load1"}, // ties go to the first candidate
	} {
		if got := Closest(tc.word, signals); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
	if got := Closest("x", nil); got != "" {
		t.Errorf("Closest with no candidates = %q", got)
	}
}

type name string

func (n name) String() string { return string(n) }

func TestNames(t *testing.T) {
	got := Names([]name{"a", "b"})
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("Names = %v", got)
	}
}
