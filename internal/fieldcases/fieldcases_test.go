package fieldcases

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/olcd/olcd/internal/testutil"
)

func TestDirs(t *testing.T) {
	extra := t.TempDir()
	// One extra folder with the cases/ layout, one holding packet files
	// directly, one with traces only (no packets).
	cased := filepath.Join(extra, "a")
	must(t, os.MkdirAll(filepath.Join(cased, "packets"), 0o755))
	flat := filepath.Join(extra, "b")
	must(t, os.MkdirAll(flat, 0o755))
	must(t, os.WriteFile(filepath.Join(flat, "x.json"), []byte("[]"), 0o644))
	traces := filepath.Join(extra, "c")
	must(t, os.MkdirAll(traces, 0o755))
	must(t, os.WriteFile(filepath.Join(traces, "t.csv"), []byte("t_s\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(traces, "t.json"), []byte("{}"), 0o644))
	t.Setenv("OLCD_EXTRA_CASES", cased+"::"+flat+":"+traces)

	for _, kind := range []string{Packets, Sampler, Traces} {
		dirs, err := Dirs(kind)
		if err != nil {
			t.Fatalf("Dirs(%s): %v", kind, err)
		}
		want := 1
		switch kind {
		case Packets:
			want = 3 // shared, a/packets, b
		case Traces:
			want = 2 // shared, c
		}
		if len(dirs) != want {
			t.Errorf("Dirs(%s) = %v, want %d folders", kind, dirs, want)
		}
		if fi, err := os.Stat(dirs[0]); err != nil || !fi.IsDir() {
			t.Errorf("Dirs(%s)[0] = %s is not a folder", kind, dirs[0])
		}
	}

	t.Setenv("OLCD_EXTRA_CASES", filepath.Join(extra, "absent"))
	if _, err := Dirs(Packets); err == nil {
		t.Error("a missing $OLCD_EXTRA_CASES folder must be an error")
	}
}

// must is testutil.Must, under the name this package's tests use.
var must = testutil.Must
