package loader

import (
	"slices"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// respWriter writes every timed port's per-CPU histograms into the mapped
// array as the program would: round r answers one more request per CPU,
// in bucket (r+cpu) mod HistBuckets.
type respWriter struct {
	d    *Datapath
	vals []olcdOlcdRespHist
}

func (w *respWriter) answer(t *testing.T, round int) {
	t.Helper()
	for c := range w.vals {
		w.vals[c].Requests, w.vals[c].Responses = uint32(round), uint32(round)
		w.vals[c].Bucket[(round+c)%HistBuckets]++
	}
	for _, slot := range w.d.rslots {
		for c := range w.vals {
			if _, err := w.d.resp.mem.WriteAt(bytesOf(&w.vals[c]), w.d.resp.offset(c, uint16(slot))); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// want is the bucket totals every port should read.
func (w *respWriter) want() []uint64 {
	out := make([]uint64, HistBuckets)
	for c := range w.vals {
		for b, n := range w.vals[c].Bucket {
			out[b] += uint64(n)
		}
	}
	return out
}

func readStats(t *testing.T, d *Datapath) Stats {
	t.Helper()
	s, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStatsResponseRelease checks the ownership of the bucket arrays
// Stats hands out: an array held (not released) is never folded into
// again, whoever else releases theirs and however often the port answers,
// including an array two holders share (an idle port's); released arrays
// are reused, and the totals stay exact through the reuse.
func TestStatsResponseRelease(t *testing.T) {
	d := loadTest(t, Config{StaleAfter: time.Hour, MaxPorts: 4, ResponseSample: 1, ResponsePorts: 4})
	keys := []olc.PortKey{{Proto: olc.ProtoTCP, Port: 8080}, {Proto: olc.ProtoTCP, Port: 8081}}
	var pols []PortPolicy
	for _, k := range keys {
		pols = append(pols, PortPolicy{Key: k, Mode: olc.ModeEnforce, Action: olc.ActionDrop})
	}
	if err := d.SetPolicies(pols); err != nil {
		t.Fatal(err)
	}
	w := &respWriter{d: d, vals: make([]olcdOlcdRespHist, d.resp.ncpu)}
	round := 0
	busy := func() { round++; w.answer(t, round) }
	check := func(what string, s Stats, want []uint64) {
		t.Helper()
		for _, k := range keys {
			if got := s.Response[k].Buckets; !slices.Equal(got, want) {
				t.Fatalf("%s: port %v buckets changed while held (or totals wrong)", what, k)
			}
		}
	}
	// arrays returns the first element of each port's array, to tell
	// arrays apart.
	arrays := func(s Stats) map[*uint64]bool {
		m := map[*uint64]bool{}
		for _, k := range keys {
			m[&s.Response[k].Buckets[0]] = true
		}
		return m
	}

	busy()
	held := readStats(t, d)
	heldWant := w.want()
	check("first read", held, heldWant)

	// An idle read shares held's arrays; releasing it (twice: the second
	// finds an empty Response) must leave them held's.
	idle := readStats(t, d)
	for p := range arrays(idle) {
		if !arrays(held)[p] {
			t.Fatal("an idle read got new arrays; want the previous read's again")
		}
	}
	d.ReleaseStats(idle)
	d.ReleaseStats(idle)
	if len(idle.Response) != 0 {
		t.Fatal("ReleaseStats left the released Response readable")
	}

	// Busy reads, each released after the next one as the daemon's tick
	// does (so every fold copies into a released array): none may reuse
	// held's arrays, and each read's totals are exact.
	reused := false
	seen := map[*uint64]bool{}
	var prev Stats
	for i := range 20 {
		busy()
		s := readStats(t, d)
		check("busy read", s, w.want())
		for p := range arrays(s) {
			if arrays(held)[p] {
				t.Fatal("a read reused an array still held")
			}
			reused = reused || seen[p]
			seen[p] = true
		}
		if i%3 == 0 {
			// A second reader (metrics) of the same totals, released
			// before the owner's.
			d.ReleaseStats(readStats(t, d))
		}
		d.ReleaseStats(prev)
		prev = s
	}
	d.ReleaseStats(prev)
	check("held across busy reads", held, heldWant)
	if !reused {
		t.Fatal("released arrays were never reused")
	}

	// Once held is released, its arrays may be reused, the totals stay exact.
	old := arrays(held)
	d.ReleaseStats(held)
	got := false
	prev = readStats(t, d)
	for range 4 {
		busy()
		s := readStats(t, d)
		check("read after release", s, w.want())
		for p := range arrays(s) {
			got = got || old[p]
		}
		d.ReleaseStats(prev)
		prev = s
	}
	d.ReleaseStats(prev)
	// A busy slot folds into its spare while it has one: the released
	// arrays wait in the free list for the next slot that needs a copy.
	for _, b := range d.resp.free {
		got = got || old[&b[0]]
	}
	if !got {
		t.Fatal("the arrays of a released Stats were neither reused nor kept for reuse")
	}

	// Releasing a zero Stats or one of timing off does nothing.
	d.ReleaseStats(Stats{})
	d.ReleaseStats(Stats{Response: map[olc.PortKey]Response{keys[0]: {Buckets: make([]uint64, HistBuckets)}}})
	busy()
	check("after foreign releases", readStats(t, d), w.want())
}
