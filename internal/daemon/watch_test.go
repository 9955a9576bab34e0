package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/testutil"
)

// watchTest runs the config file watch on a file in a new directory.
type watchTest struct {
	path string
	out  chan configLoad
	log  *syncBuffer // what the watch logged
}

func startWatch(t *testing.T, initial string) *watchTest {
	t.Helper()
	return startWatchEvery(t, initial, rewatchEvery)
}

// startWatchEvery is startWatch with the watch looking for a removed
// directory every rewatch.
func startWatchEvery(t *testing.T, initial string, rewatch time.Duration) *watchTest {
	t.Helper()
	path := filepath.Join(t.TempDir(), "olcd.yaml")
	if err := os.WriteFile(path, []byte(initial), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &watchTest{path: path, out: make(chan configLoad, 8), log: &syncBuffer{}}
	fw := newFileWatch(path, slog.New(slog.NewTextHandler(w.log, nil)))
	fw.rewatchEvery = rewatch
	fw.start(ctx, w.out)
	return w
}

// logged waits until the watch has logged msg.
func (w *watchTest) logged(t *testing.T, msg string) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, error) {
		return strings.Contains(w.log.String(), msg), nil
	}, "the watch did not log %q:\n%s", msg, w.log)
}

// next returns the next load within timeout, or fails.
func (w *watchTest) next(t *testing.T, timeout time.Duration) configLoad {
	t.Helper()
	select {
	case l := <-w.out:
		return l
	case <-time.After(timeout):
		t.Fatalf("no reload within %v", timeout)
	}
	return configLoad{}
}

// none fails if a load arrives within d.
func (w *watchTest) none(t *testing.T, d time.Duration, what string) {
	t.Helper()
	select {
	case l := <-w.out:
		mode := "-"
		if l.cfg != nil {
			mode = l.cfg.Mode.String()
		}
		t.Fatalf("%s: reload (mode %s, err %v), want none", what, mode, l.err)
	case <-time.After(d):
	}
}

const (
	watchOld = "mode: observe\nports: [{port: 443}]\n"
	watchNew = "mode: enforce\ninterfaces: [eth0]\nports:\n  - {port: 443, proto: tcp}\n  - {port: 80, proto: tcp}\n"
)

func wantNew(t *testing.T, l configLoad) {
	t.Helper()
	if l.err != nil || l.cfg.Mode != olc.ModeEnforce || len(l.cfg.Ports) != 2 || l.trigger != "file change" {
		t.Fatalf("reload = %+v, %v; want the complete new file", l.cfg, l.err)
	}
}

// TestWatchSlowWriter: a writer that empties the file and writes it 700 ms
// later (`(sleep 0.7; cat new.yaml) > olcd.yaml`) is read once, complete;
// the empty file in between is never acted on.
func TestWatchSlowWriter(t *testing.T) {
	t.Parallel()
	w := startWatch(t, watchOld)
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.none(t, 700*time.Millisecond, "file emptied by a slow writer")
	if _, err := f.WriteString(watchNew); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantNew(t, w.next(t, 5*time.Second))
	w.none(t, 1500*time.Millisecond, "after the complete write")
}

// TestWatchChunkedWrite: a file written in place in two parts with a pause
// between them is read once, with both.
func TestWatchChunkedWrite(t *testing.T) {
	t.Parallel()
	w := startWatch(t, watchOld)
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	half := strings.Index(watchNew, "  - {port: 80")
	if _, err := f.WriteString(watchNew[:half]); err != nil {
		t.Fatal(err)
	}
	w.none(t, 500*time.Millisecond, "half-written file")
	if _, err := f.WriteString(watchNew[half:]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantNew(t, w.next(t, 5*time.Second))
}

// TestWatchRenameIntoPlace: a file renamed into place is complete and read
// at once (within the settle time, not the quiet period); a FIFO or a
// directory in its place is refused without blocking; removing the file is
// not acted on.
func TestWatchRenameIntoPlace(t *testing.T) {
	t.Parallel()
	w := startWatch(t, watchOld)
	tmp := filepath.Join(filepath.Dir(w.path), ".olcd.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(watchNew), 0o644); err != nil {
		t.Fatal(err)
	}
	w.none(t, 300*time.Millisecond, "a write to another file")
	start := time.Now()
	if err := os.Rename(tmp, w.path); err != nil {
		t.Fatal(err)
	}
	wantNew(t, w.next(t, 5*time.Second))
	if took := time.Since(start); took >= quietPeriod {
		t.Errorf("a renamed file was read after %v, want within the settle time %v", took, settleAfter)
	}

	if err := os.Remove(w.path); err != nil {
		t.Fatal(err)
	}
	w.none(t, 1500*time.Millisecond, "file removed")

	if err := syscall.Mkfifo(w.path, 0o644); err != nil {
		t.Fatal(err)
	}
	if l := w.next(t, 5*time.Second); l.err == nil || !strings.Contains(l.err.Error(), "FIFO") {
		t.Errorf("FIFO in place: %+v, %v; want a refusal", l.cfg, l.err)
	}
	os.Remove(w.path)
	if err := os.Mkdir(w.path, 0o755); err != nil {
		t.Fatal(err)
	}
	if l := w.next(t, 5*time.Second); l.err == nil || !strings.Contains(l.err.Error(), "a directory") {
		t.Errorf("directory in place: %+v, %v; want a refusal", l.cfg, l.err)
	}
}

// TestWatchEmptiedFile: a file left empty for longer than the quiet
// period is acted on, and refused (the running config stays).
func TestWatchEmptiedFile(t *testing.T) {
	t.Parallel()
	w := startWatch(t, watchOld)
	if err := os.Truncate(w.path, 0); err != nil {
		t.Fatal(err)
	}
	l := w.next(t, 5*time.Second)
	if l.err == nil || !strings.Contains(l.err.Error(), "the file is empty") {
		t.Errorf("emptied file: %+v, %v; want the empty-file refusal", l.cfg, l.err)
	}
}

// TestWatchDirectoryReplaced: the config file's directory removed, or
// renamed away, and made again keeps the file watched: the file written
// into the new directory is read (the inotify watch had gone with the old
// directory, and every later change was missed without a word), whether it
// was there before the watch came back or written after.
func TestWatchDirectoryReplaced(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		away        func(dir string) error
		writeBefore bool // the file is in the new directory before the watch can be back
	}{
		{"removed, file written later", os.RemoveAll, false},
		{"removed, file written at once", os.RemoveAll, true},
		{"renamed away", func(dir string) error { return os.Rename(dir, dir+".old") }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A file written at once must be in place before the watch
			// is back: that one keeps the re-watch at its second.
			rewatch := 20 * time.Millisecond
			if tt.writeBefore {
				rewatch = rewatchEvery
			}
			w := startWatchEvery(t, watchOld, rewatch)
			dir := filepath.Dir(w.path)
			if err := tt.away(dir); err != nil {
				t.Fatal(err)
			}
			w.logged(t, "config file directory removed or renamed")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.writeBefore {
				if err := os.WriteFile(w.path, []byte(watchNew), 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				w.logged(t, "config file directory is back")
				tmp := filepath.Join(dir, ".olcd.yaml.tmp")
				if err := os.WriteFile(tmp, []byte(watchNew), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, w.path); err != nil {
					t.Fatal(err)
				}
			}
			wantNew(t, w.next(t, 6*time.Second))
			w.none(t, 1500*time.Millisecond, "after the new file was read")
		})
	}
}
