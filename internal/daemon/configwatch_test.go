package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/testutil"
)

// atomicWriter lays out and updates a directory as the kubelet does for a
// ConfigMap volume (k8s.io/kubernetes pkg/volume/util AtomicWriter): the
// files live in a timestamped directory, "..data" is a symlink to it, and
// each visible name is a symlink "..data/<name>". An update writes a new
// timestamped directory, points "..data_tmp" at it, renames "..data_tmp"
// over "..data" and removes the old directory.
type atomicWriter struct {
	dir string
	gen int
	cur string
}

func (a *atomicWriter) write(t *testing.T, name, content string) {
	t.Helper()
	a.gen++
	ts := fmt.Sprintf("..2026_12_01_09_00_%02d.%d", a.gen, 1000+a.gen)
	must(t, os.Mkdir(filepath.Join(a.dir, ts), 0o755))
	must(t, os.WriteFile(filepath.Join(a.dir, ts, name), []byte(content), 0o644))
	must(t, os.Symlink(ts, filepath.Join(a.dir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(a.dir, "..data_tmp"), filepath.Join(a.dir, "..data")))
	if _, err := os.Lstat(filepath.Join(a.dir, name)); os.IsNotExist(err) {
		must(t, os.Symlink(filepath.Join("..data", name), filepath.Join(a.dir, name)))
	}
	if a.cur != "" {
		must(t, os.RemoveAll(filepath.Join(a.dir, a.cur)))
	}
	a.cur = ts
}

// must is testutil.Must, under the name this package's tests use.
var must = testutil.Must

// TestWatchConfigMapUpdate: an update of a ConfigMap volume, which makes no
// event on the config file's own name, is a config change; an unrelated
// file in the same directory is not.
func TestWatchConfigMapUpdate(t *testing.T) {
	dir := t.TempDir()
	aw := &atomicWriter{dir: dir}
	aw.write(t, "olcd.yaml", "mode: observe\n")
	path := filepath.Join(dir, "olcd.yaml")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan configLoad, 4)
	newFileWatch(path, slog.New(slog.DiscardHandler)).start(ctx, changed)

	expect := func(what string, want bool) {
		t.Helper()
		select {
		case l := <-changed:
			if !want {
				t.Fatalf("%s: reported as a config change", what)
			}
			if l.err != nil {
				t.Fatalf("%s: the new file was refused: %v", what, l.err)
			}
		case <-time.After(2 * time.Second): // a rename into place settles for 200 ms
			if want {
				t.Fatalf("%s: no config change reported within 1 s", what)
			}
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, "unrelated"), []byte("x"), 0o644))
	expect("a write of another file in the directory", false)

	for i := range 3 {
		aw.write(t, "olcd.yaml", fmt.Sprintf("mode: enforce # %d\n", i))
		expect(fmt.Sprintf("ConfigMap update %d", i+1), true)
		data, err := os.ReadFile(path)
		must(t, err)
		if want := fmt.Sprintf("mode: enforce # %d\n", i); string(data) != want {
			t.Fatalf("after update %d the path reads %q, want %q", i+1, data, want)
		}
	}
	// The file itself replaced by rename, as editors and config management
	// do, still counts.
	must(t, os.WriteFile(path+".tmp", []byte("mode: off\n"), 0o644))
	must(t, os.Rename(path+".tmp", path))
	expect("rename over the config path", true)
}

// TestWatchSymlinkElsewhere: a config path that is a symlink to a file in
// another directory sees that file saved, in place or by rename; a file
// beside it is not a change.
func TestWatchSymlinkElsewhere(t *testing.T) {
	linkDir, realDir := t.TempDir(), t.TempDir()
	real := filepath.Join(realDir, "real.yaml")
	must(t, os.WriteFile(real, []byte("mode: observe\n"), 0o644))
	path := filepath.Join(linkDir, "olcd.yaml")
	must(t, os.Symlink(real, path))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan configLoad, 4)
	newFileWatch(path, slog.New(slog.DiscardHandler)).start(ctx, changed)

	expect := func(what, mode string) {
		t.Helper()
		select {
		case l := <-changed:
			if mode == "" {
				t.Fatalf("%s: reported as a config change", what)
			}
			if l.err != nil || l.cfg.Mode.String() != mode {
				t.Fatalf("%s: %v, mode %v; want mode %s", what, l.err, l.cfg, mode)
			}
		case <-time.After(3 * time.Second): // a write in place is read once quiet for 1 s
			if mode != "" {
				t.Fatalf("%s: no config change reported within 3 s", what)
			}
		}
	}
	must(t, os.WriteFile(filepath.Join(realDir, "other.yaml"), []byte("mode: off\n"), 0o644))
	expect("a file beside the target", "")
	must(t, os.WriteFile(real, []byte("mode: enforce\n"), 0o644))
	expect("the target written in place", "enforce")
	must(t, os.WriteFile(real+".tmp", []byte("mode: off\n"), 0o644))
	must(t, os.Rename(real+".tmp", real))
	expect("the target replaced by rename", "off")
}
