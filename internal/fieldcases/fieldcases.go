// Package fieldcases locates the field cases — small inputs distilled from
// public bug reports (../shared/cases/README.md) — for the tests of every
// package, so that each suite loads the same folders the same way:
//
//   - the shared cases: $OLCD_CASES if set, else ../shared/cases next to the
//     module, else the snapshot committed in this package's testdata (so a
//     clone that has no shared folder beside it still runs them);
//   - every folder named in $OLCD_EXTRA_CASES (':'-separated), each with the
//     layout of cases/ (packets/, sampler/, traces/) or holding one kind of
//     case directly.
package fieldcases

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Kinds of field cases, the folder names of ../shared/cases.
const (
	// Packets are JSON vectors of Ethernet frames (packets/*.json).
	Packets = "packets"
	// Sampler are before/after filesystem roots with case.json (sampler/<case>/).
	Sampler = "sampler"
	// Traces are controller traces (traces/<case>.csv + .json).
	Traces = "traces"
)

// SharedRoot returns the folder of the shared cases and where it came from
// ("$OLCD_CASES", "../shared/cases" or "snapshot"). Errors: $OLCD_CASES names
// a folder that does not exist.
func SharedRoot() (dir, origin string, err error) {
	if env := os.Getenv("OLCD_CASES"); env != "" {
		if _, err := os.Stat(env); err != nil {
			return "", "", fmt.Errorf("OLCD_CASES: %w", err)
		}
		return env, "$OLCD_CASES", nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", "", err
	}
	shared := filepath.Join(filepath.Dir(root), "shared", "cases")
	if fi, err := os.Stat(shared); err == nil && fi.IsDir() {
		return shared, "../shared/cases", nil
	}
	return filepath.Join(root, "internal", "fieldcases", "testdata", "cases"), "snapshot", nil
}

// Dirs returns every folder holding cases of kind: the shared one first, then
// one per $OLCD_EXTRA_CASES entry that has cases of that kind (an entry with
// only other kinds is skipped). Errors: a missing shared folder for kind, or
// an $OLCD_EXTRA_CASES entry that does not exist.
func Dirs(kind string) ([]string, error) {
	shared, origin, err := SharedRoot()
	if err != nil {
		return nil, err
	}
	first := filepath.Join(shared, kind)
	if fi, err := os.Stat(first); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("field cases (%s): no %s folder in %s", origin, kind, shared)
	}
	dirs := []string{first}
	for _, d := range strings.Split(os.Getenv("OLCD_EXTRA_CASES"), ":") {
		if d == "" {
			continue
		}
		if _, err := os.Stat(d); err != nil {
			return nil, fmt.Errorf("OLCD_EXTRA_CASES: %w", err)
		}
		if fi, err := os.Stat(filepath.Join(d, kind)); err == nil && fi.IsDir() {
			dirs = append(dirs, filepath.Join(d, kind))
			continue
		}
		if holds(d, kind) {
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

// PacketFiles returns every packet vector file (*.json) of every packet
// folder of Dirs. Errors: those of Dirs, or a shared folder without any.
func PacketFiles() ([]string, error) {
	dirs, err := Dirs(Packets)
	if err != nil {
		return nil, err
	}
	var files []string
	for i, d := range dirs {
		fs := packetFiles(d)
		if i == 0 && len(fs) == 0 {
			return nil, fmt.Errorf("field cases: no packet vectors in %s", d)
		}
		files = append(files, fs...)
	}
	return files, nil
}

// packetFiles lists dir's *.json files except trace expectations, which sit
// beside a CSV of the same name.
func packetFiles(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []string
	for _, f := range m {
		if _, err := os.Stat(strings.TrimSuffix(f, ".json") + ".csv"); err != nil {
			out = append(out, f)
		}
	}
	return out
}

// holds reports whether dir directly holds cases of kind.
func holds(dir, kind string) bool {
	switch kind {
	case Packets:
		return len(packetFiles(dir)) > 0
	case Sampler:
		m, _ := filepath.Glob(filepath.Join(dir, "*", "case.json"))
		return len(m) > 0
	case Traces:
		m, _ := filepath.Glob(filepath.Join(dir, "*.csv"))
		return len(m) > 0
	}
	return false
}

// moduleRoot is the folder holding go.mod, found from this source file so
// that it does not depend on the test's working directory.
func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("fieldcases: cannot locate the module")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("fieldcases: go.mod not found above " + filepath.Dir(file))
		}
		dir = parent
	}
}
