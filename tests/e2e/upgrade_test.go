package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
)

// upgradeFrom is the earlier build the upgrade rows of TestRestart run
// beside this one (OLCD_UPGRADE_FROM overrides it): 08fad7e, the parent of
// 7f9a997, the last commit that changed the BPF programs (bpf/gate.h, the
// request gate's TC failure paths). Its maps have the layout this build
// pins (LayoutVersion 1, the same map fingerprints: no commit since has
// touched a map), so an upgrade to this build and a downgrade back to it
// are take-overs, each a link.Update to a program of other instructions
// (the attached programs' tags are compared). It also predates the
// take-over verifying at nice 10 (29e246c): the two loaders differ too.
const upgradeFrom = "08fad7e33cbf42bb6a57f74f1bb094b2750d1cf3"

var oldBin struct {
	once      sync.Once
	path, rev string
	skip      string // why there is no earlier build: the rows skip
}

// oldOlcd returns the earlier build's olcd, built once per run into the
// run's build directory from `git archive` of the commit (the checkout is
// not touched), with the Go build cache doing most of the work (about 5 s).
// The test skips, saying why, without git, without the commit (a shallow
// clone) or when the toolchain cannot build it (GOTOOLCHAIN=local: no
// other Go is fetched for it).
func oldOlcd(t *testing.T) (path, rev string) {
	t.Helper()
	oldBin.once.Do(buildOld)
	if oldBin.skip != "" {
		t.Skipf("no earlier olcd to upgrade from: %s", oldBin.skip)
	}
	return oldBin.path, oldBin.rev
}

func buildOld() {
	want := upgradeFrom
	if v := os.Getenv("OLCD_UPGRADE_FROM"); v != "" {
		want = v
	}
	git, err := exec.LookPath("git")
	if err != nil {
		oldBin.skip = "git not on PATH"
		return
	}
	out, err := exec.Command(git, "rev-parse", "--verify", "--quiet", want+"^{commit}").Output()
	if err != nil {
		oldBin.skip = fmt.Sprintf("commit %s not in this repository (a shallow clone?): set OLCD_UPGRADE_FROM to an earlier commit with pinning (fd61625 or later)", want)
		return
	}
	oldBin.rev = strings.TrimSpace(string(out))
	gobin, err := goTool()
	if err != nil {
		oldBin.skip = err.Error()
		return
	}
	src := filepath.Join(bins.dir, "old-"+oldBin.rev[:12])
	if err := os.Mkdir(src, 0o755); err != nil {
		oldBin.skip = err.Error()
		return
	}
	// The whole tree: git archive in tests/e2e would archive that
	// directory alone.
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		oldBin.skip = fmt.Sprintf("git rev-parse --show-toplevel: %v", err)
		return
	}
	arch := exec.Command("sh", "-c", `"$1" archive "$2" | tar -x -C "$3"`, "sh", git, oldBin.rev, src)
	arch.Dir = strings.TrimSpace(string(top))
	if out, err := arch.CombinedOutput(); err != nil {
		oldBin.skip = fmt.Sprintf("git archive %s: %v\n%s", oldBin.rev, err, out)
		return
	}
	// Named olcd, as the kill tests check a pid's name.
	if err := os.Mkdir(src+"-bin", 0o755); err != nil {
		oldBin.skip = err.Error()
		return
	}
	oldBin.path = filepath.Join(src+"-bin", "olcd")
	build := exec.Command(gobin, "build", "-o", oldBin.path, "./cmd/olcd")
	build.Dir = src
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		oldBin.skip = fmt.Sprintf("go build ./cmd/olcd at %s: %v\n%s", oldBin.rev, err, out)
	}
}

// progTag is the tag (a hash of the instructions) of the program id.
func progTag(t *testing.T, id ebpf.ProgramID) string {
	t.Helper()
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	return info.Tag
}
