// Package spell finds the intended word behind a misspelt one: the hint
// "did you mean …?" in config, trace and command-line errors.
package spell

import (
	"fmt"
	"math"
)

// Closest returns the candidate nearest to word by edit distance when it is
// close enough to be a plausible typo (a distance of at most a third of
// word's length, and at least 2), or "" when none is. Ties go to the first
// candidate.
func Closest(word string, candidates []string) string {
	best, bestD := "", math.MaxInt
	for _, c := range candidates {
		if d := Levenshtein(word, c); d < bestD {
			best, bestD = c, d
		}
	}
	if bestD <= max(2, len(word)/3) {
		return best
	}
	return ""
}

// Names renders items with String, for Closest's candidates.
func Names[S fmt.Stringer](items []S) []string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = s.String()
	}
	return out
}

// Levenshtein returns the edit distance between a and b: the fewest byte
// insertions, deletions and substitutions that turn a into b (Wagner and
// Fischer's dynamic programme, two rows).
func Levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
