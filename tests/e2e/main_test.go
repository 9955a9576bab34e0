package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/olcd/olcd/internal/testutil"
)

// bins holds the binaries built once per test run.
var bins struct {
	once     sync.Once
	dir      string
	olcd     string
	loadgen  string
	overload string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	closeOverload()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// requireRoot skips the test unless it runs as root and not in -short mode,
// then builds the binaries (once per run).
func requireRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped in -short mode (it runs the daemon for tens of seconds)")
	}
	testutil.RequireRoot(t, "end-to-end test: creates network namespaces and runs olcd, which loads BPF programs")
	bins.once.Do(buildBinaries)
	if bins.err != nil {
		t.Fatalf("build binaries: %v", bins.err)
	}
}

// buildBinaries builds cmd/olcd, tests/loadgen and the overload harness
// from this checkout, so the
// test runs what `go build` makes of the current sources.
func buildBinaries() {
	dir, err := os.MkdirTemp("", "olcd-e2e-bin-")
	if err != nil {
		bins.err = fmt.Errorf("create build directory: %w", err)
		return
	}
	bins.dir = dir
	gobin, err := goTool()
	if err != nil {
		bins.err = err
		return
	}
	for _, b := range []struct {
		out *string
		pkg string
	}{
		{&bins.olcd, "github.com/olcd/olcd/cmd/olcd"},
		{&bins.loadgen, "github.com/olcd/olcd/tests/loadgen"},
		{&bins.overload, "github.com/olcd/olcd/tests/e2e/cmd/olcd-overload"},
	} {
		*b.out = filepath.Join(dir, filepath.Base(b.pkg))
		cmd := exec.Command(gobin, "build", "-o", *b.out, b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
			return
		}
	}
}

// goTool finds the go command: on PATH, or in $GOROOT/bin.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go"), nil
	}
	return "", fmt.Errorf("go command not found on PATH and GOROOT unset")
}
