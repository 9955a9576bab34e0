package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// plottingModules are the plotting and font libraries behind olcd-sim's
// --plot: the root daemon must link none of them (issue 25: they made it a
// 20 MB binary).
var plottingModules = []string{"gonum.org/v1/plot", "codeberg.org/go-pdf/fpdf", "codeberg.org/go-latex/latex",
	"github.com/ajstarks/svgo", "git.sr.ht/~sbinet/gg", "github.com/golang/freetype", "golang.org/x/image"}

// TestNoPlottingLinked lists the daemon binary's packages, its tests' not
// counted, and fails on any from a plotting module.
func TestNoPlottingLinked(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the daemon's packages")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 {
		t.Fatalf("go list -deps listed %d packages: %q", len(pkgs), out)
	}
	for _, p := range pkgs {
		for _, m := range plottingModules {
			if p == m || strings.HasPrefix(p, m+"/") {
				t.Errorf("cmd/olcd links %s (module %s): plotting belongs in cmd/olcd-sim", p, m)
			}
		}
	}
}

// TestSimulateMoved: `olcd simulate` names the binary that has it, with the
// same arguments, and exits 2 without doing anything else.
func TestSimulateMoved(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"simulate", "--config", "olcd.yaml", "--trace", "load.csv"}, &stdout, &stderr)
	if want := "olcd-sim simulate --config olcd.yaml --trace load.csv"; code != 2 || !strings.Contains(stderr.String(), want) || stdout.Len() > 0 {
		t.Errorf("olcd simulate: exit %d, stdout %q, stderr %q; want 2 and %q on stderr", code, stdout.String(), stderr.String(), want)
	}
}
