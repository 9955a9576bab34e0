package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/testutil"
)

// upgradeFrom is the earlier build the upgrade rows of TestRestart run
// beside this one (OLCD_UPGRADE_FROM overrides it): bb84f84, the parent of
// 6d97f1e, which changed the BPF programs (bpf/fair.h, the fair port's
// debt). Its maps have the layout this build pins (LayoutVersion 1, the
// same map fingerprints and flow hash: no commit since has touched a map),
// so an upgrade to this build and a downgrade back to it are take-overs,
// each a link.Update to a program of other instructions (the attached
// programs' tags are compared). Builds before it pinned another
// olcd_fair_slots: this build renews their fair group (renewFrom), they
// refuse its pins.
const upgradeFrom = "bb84f8410966cc398dd5c1b51848728e2abe3795"

// renewFrom is the earlier build TestOverloadUpgrade starts before this
// one takes over under load: 08fad7e, whose flow hash (version 1) and
// olcd_fair_slots differ from this build's, so the take-over starts both
// renewable groups afresh (loader.FlowHashVersion; docs/datapath.md,
// "Take-over"); the rest of its layout is this build's. It also predates
// the take-over verifying at nice 10 (29e246c): the two loaders differ
// too.
const renewFrom = "08fad7e33cbf42bb6a57f74f1bb094b2750d1cf3"

// layoutFrom is an earlier build whose pinned layout differs from this
// one's: 6bd6c3a, the trial branch just before the fair shedding was
// merged (50ed171), which added the fair knobs to the globals (.bss, 48
// bytes more: the first map the fingerprints tell apart), members to
// struct olcd_policy (fair, caps, the fair prefixes), and the sketch and
// cap maps. It pins its datapath too (LayoutVersion 1), so each build
// finds the other's pins and refuses them (TestUpgradeAcrossLayout).
const layoutFrom = "6bd6c3aebf30bf766fc3e0e499278a7424962f30"

// earlier holds the earlier builds, built once per run each.
var earlier struct {
	mu    sync.Mutex
	byRev map[string]*earlierBuild
}

type earlierBuild struct {
	path, rev string
	skip      string // why there is no such build: the test skips
}

// oldOlcd is the build the upgrade rows run beside this one: upgradeFrom,
// or OLCD_UPGRADE_FROM.
func oldOlcd(t *testing.T) (path, rev string) {
	t.Helper()
	want := upgradeFrom
	if v := os.Getenv("OLCD_UPGRADE_FROM"); v != "" {
		want = v
	}
	return earlierOlcd(t, want)
}

// earlierOlcd returns olcd as commit want builds it, built once per run
// into the run's build directory from `git archive` of the commit (the
// checkout is not touched), the Go build cache doing most of the work
// (about 5 s). The test skips, saying why, without git, without the commit
// (a shallow clone) or when the toolchain cannot build it
// (GOTOOLCHAIN=local: no other Go is fetched for it).
func earlierOlcd(t *testing.T, want string) (path, rev string) {
	t.Helper()
	earlier.mu.Lock()
	b := earlier.byRev[want]
	if b == nil {
		b = buildAt(want)
		if earlier.byRev == nil {
			earlier.byRev = map[string]*earlierBuild{}
		}
		earlier.byRev[want] = b
	}
	earlier.mu.Unlock()
	if b.skip != "" {
		t.Skipf("no earlier olcd (%s): %s", want, b.skip)
	}
	return b.path, b.rev
}

func buildAt(want string) *earlierBuild {
	b := &earlierBuild{}
	git, err := exec.LookPath("git")
	if err != nil {
		b.skip = "git not on PATH"
		return b
	}
	out, err := exec.Command(git, "rev-parse", "--verify", "--quiet", want+"^{commit}").Output()
	if err != nil {
		b.skip = fmt.Sprintf("commit %s not in this repository (a shallow clone?)", want)
		return b
	}
	b.rev = strings.TrimSpace(string(out))
	gobin, err := goTool()
	if err != nil {
		b.skip = err.Error()
		return b
	}
	src := filepath.Join(bins.dir, "old-"+b.rev[:12])
	if err := os.Mkdir(src, 0o755); err != nil {
		b.skip = err.Error()
		return b
	}
	// The whole tree: git archive in tests/e2e would archive that
	// directory alone.
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		b.skip = fmt.Sprintf("git rev-parse --show-toplevel: %v", err)
		return b
	}
	arch := exec.Command("sh", "-c", `"$1" archive "$2" | tar -x -C "$3"`, "sh", git, b.rev, src)
	arch.Dir = strings.TrimSpace(string(top))
	if out, err := arch.CombinedOutput(); err != nil {
		b.skip = fmt.Sprintf("git archive %s: %v\n%s", b.rev, err, out)
		return b
	}
	// Named olcd, as the kill tests check a pid's name.
	if err := os.Mkdir(src+"-bin", 0o755); err != nil {
		b.skip = err.Error()
		return b
	}
	b.path = filepath.Join(src+"-bin", "olcd")
	build := exec.Command(gobin, "build", "-o", b.path, "./cmd/olcd")
	build.Dir = src
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		b.skip = fmt.Sprintf("go build ./cmd/olcd at %s: %v\n%s", b.rev, err, out)
	}
	return b
}

// progTag is the tag (a hash of the instructions) of the program id.
func progTag(t *testing.T, id ebpf.ProgramID) string {
	t.Helper()
	return progInfo(t, id).Tag
}

// progInfo is the kernel's info on the program id.
func progInfo(t *testing.T, id ebpf.ProgramID) *ebpf.ProgramInfo {
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
	return info
}

// TestUpgradeAcrossLayout starts each build on the other's pinned datapath
// where the layouts differ (layoutFrom): the upgrade (old pins, this build
// starts) and the downgrade (this build pins, old starts). What the loader
// promises is a refusal: the starting olcd exits with an error naming the
// map and `olcd detach`, and changes nothing, so the pinned program stays
// attached with its maps (never half-used by the other build) and keeps
// shedding until its heartbeat is older than stale_after, then passes
// everything. After `olcd detach` (this build's, on the old pins) this
// build starts fresh and sheds.
func TestUpgradeAcrossLayout(t *testing.T) {
	requireRoot(t)
	oldPath, oldRev := earlierOlcd(t, layoutFrom)
	env := newNetEnv(t)
	env.serve(t)
	burnCPU(t)
	d := prepareDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdAlways})
	for _, step := range []struct {
		name, pinner, refused string
	}{
		{"upgrade", oldPath, ""},
		{"downgrade", "", oldPath},
	} {
		d.bin = step.pinner
		d.logPath = d.logPath + "." + step.name
		d.start(t)
		d.waitShedding(t)
		pinned := env.attachedProgs(t)
		if len(pinned) != 1 {
			t.Fatalf("%s: programs %+v, want one", step.name, pinned)
		}
		d.stop(t, step.name)
		stopped := time.Now()

		// The other build refuses the pins and exits.
		logPath := d.logPath + ".refused"
		p := d.run(t, step.refused, logPath)
		if !p.wait(30 * time.Second) {
			p.kill()
			t.Fatalf("%s: olcd still running 30s after it found pins of another layout", step.name)
		}
		out, _ := os.ReadFile(logPath)
		if p.cmd.ProcessState.Success() || !strings.Contains(string(out), "incompatible with this olcd") || !strings.Contains(string(out), "olcd detach") {
			t.Fatalf("%s: olcd exited with %v; want a failure naming the incompatible map and olcd detach, log:\n%s", step.name, p.cmd.ProcessState, out)
		}
		t.Logf("%s: refused in %v: %s", step.name, time.Since(stopped).Round(time.Millisecond), lastLine(out))
		if now := env.attachedProgs(t); !slices.Equal(now, pinned) {
			t.Fatalf("%s: programs %+v after the refusal, want the pinned %+v untouched", step.name, now, pinned)
		}
		checkMapsShared(t, d.pinDir, pinned[0].ID)
		// The pinned datapath fails open through its lease.
		t.Logf("%s: fail-open %v after the SIGTERM", step.name, failOpen(t, env, stopped, 2*time.Second, step.name+"'s SIGTERM and refusal"))
		env.expectAllOK(t, step.name+": pinned datapath stale", 10)
		if step.name == "upgrade" {
			t.Logf("olcd detach (this build, pins of %.7s):\n%s", oldRev, d.detach(t))
			testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() (bool, error) {
				return len(env.attachedProgs(t)) == 0, nil
			}, "nothing attached to %s after olcd detach", env.NodeIf)
		}
	}
}

// lastLine is the last non-empty line of out.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}
