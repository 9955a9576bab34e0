package sampler

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// mkTree writes files (path inside the root → content) under a new temporary
// root and returns it. A path ending in "/" makes an empty directory.
func mkTree(t testing.TB, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// writeFiles overwrites files under an existing root.
func writeFiles(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// logBuf is a concurrency-safe log sink for asserting on log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) count(sub string) int { return strings.Count(l.String(), sub) }

func newLogged(t testing.TB, cfg Config) (*Sampler, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	s, err := New(cfg, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("new sampler: %v", err)
	}
	return s, lb
}

// sampleRoots collects before then after and computes over interval, the
// path the field-case test uses, for unit tests built on fixture trees.
func sampleRoots(t testing.TB, before, after string, cfg Config, intervalS float64) olc.Snapshot {
	t.Helper()
	var rs [2]reading
	for i, root := range []string{before, after} {
		c := cfg
		c.Root = root
		s, _ := newLogged(t, c)
		s.collect(&rs[i])
	}
	return compute(&rs[0], &rs[1], true, secondsDur(intervalS))
}

func errSources(s olc.Snapshot) []string {
	var out []string
	for _, e := range s.Errors {
		out = append(out, e.Source)
	}
	return out
}

func secondsDur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
