package e2e

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/testutil"
)

// followWithin bounds the time from a link change to olcd's new attachment:
// olcd acts on link events, so this is far below the 10 s re-check that
// stands in for lost events.
const followWithin = 2 * time.Second

// TestInterfacesFollowed: with interfaces: [] olcd follows the node's links
// while it runs. The veth it protects, deleted and created again under its
// name, is attached again at once and sheds again; a new interface is
// attached when it comes up, stays attached while down, and is forgotten
// when deleted; a reload that names one interface detaches the others, a
// listed interface created again is attached again, a reload naming one
// that does not exist is refused, and an altname in the list keeps the
// interface attached.
func TestInterfacesFollowed(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	env.serve(t)
	burnCPU(t)
	cfg := daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdAlways, AutoInterfaces: true}
	d := startDaemon(t, env, cfg)
	d.waitShedding(t)
	if got := statusIfaces(d.mustStatus(t)); !slices.Equal(got, []string{env.NodeIf}) {
		t.Fatalf("interfaces: [] in the node namespace attached %v, want [%s]", got, env.NodeIf)
	}
	env.expectAllDropped(t, "at start", 5)

	// --- Deleted and created again under its name.
	mustRun(t, "ip", "-n", env.Node, "link", "del", env.NodeIf)
	start := time.Now()
	testutil.Must(t, env.CreateVeth())
	waitFor(t, "a program on the new "+env.NodeIf, func() bool {
		p := env.attachedProgs(t)
		return len(p) == 1 && p[0].Name == "olcd_tc"
	})
	t.Logf("the re-created %s was attached %v after its creation", env.NodeIf, time.Since(start).Round(time.Millisecond))
	env.expectAllDropped(t, "after the veth was created again", 5)

	// --- A new pair inside the node namespace: both ends are picked when
	// they come up, and forgotten when the pair is deleted.
	extraA, extraB := env.NodeIf[:len(env.NodeIf)-1]+"a", env.NodeIf[:len(env.NodeIf)-1]+"b"
	addPair := func() {
		mustRun(t, "ip", "-n", env.Node, "link", "add", extraA, "type", "veth", "peer", "name", extraB)
		mustRun(t, "ip", "-n", env.Node, "link", "set", extraA, "up")
		mustRun(t, "ip", "-n", env.Node, "link", "set", extraB, "up")
	}
	addPair()
	all := []string{env.NodeIf, extraA, extraB}
	slices.Sort(all)
	waitFor(t, "the new pair attached", func() bool { return slices.Equal(statusIfaces(d.mustStatus(t)), all) })
	mustRun(t, "ip", "-n", env.Node, "link", "del", extraA)
	waitFor(t, "the deleted pair forgotten", func() bool {
		return slices.Equal(statusIfaces(d.mustStatus(t)), []string{env.NodeIf})
	})

	// --- A reload that names one interface detaches the others. Before
	// it, one end of the pair goes down and stays attached: its program
	// is still there when it comes back up.
	addPair()
	waitFor(t, "the pair attached again", func() bool { return slices.Equal(statusIfaces(d.mustStatus(t)), all) })
	mustRun(t, "ip", "-n", env.Node, "link", "set", extraA, "down")
	d.linkEventHandled(t)
	if got := statusIfaces(d.mustStatus(t)); !slices.Equal(got, all) || len(env.attachedProgsOn(t, extraA)) != 1 {
		t.Errorf("after %s went down: attached %v, want %v with its program kept", extraA, got, all)
	}
	cfg.AutoInterfaces = false
	writeFileAtomic(t, d.realCfg, renderConfig(t, startedConfig(d, cfg)))
	if err := d.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "interfaces: ["+env.NodeIf+"] after the reload", func() bool {
		return slices.Equal(statusIfaces(d.mustStatus(t)), []string{env.NodeIf})
	})
	for _, name := range []string{extraA, extraB} {
		if p := env.attachedProgsOn(t, name); len(p) != 0 {
			t.Errorf("%s still carries %+v after the reload", name, p)
		}
	}
	env.expectAllDropped(t, "after the reload", 5)

	// --- A listed interface deleted and created again is attached again;
	// meanwhile the status shows it waiting.
	mustRun(t, "ip", "-n", env.Node, "link", "del", env.NodeIf)
	waitFor(t, "the deleted "+env.NodeIf+" shown as waiting", func() bool {
		st := d.mustStatus(t)
		return len(st.Interfaces) == 0 && slices.Equal(st.InterfacesWaiting, []string{env.NodeIf})
	})
	if out := d.mustCLI(t, "status"); !strings.Contains(out, "does not exist (attached when it appears)") {
		t.Errorf("olcd status does not show the waiting %s:\n%s", env.NodeIf, out)
	}
	testutil.Must(t, env.CreateVeth())
	waitFor(t, "the listed "+env.NodeIf+" attached again", func() bool { return len(env.attachedProgs(t)) == 1 })
	env.expectAllDropped(t, "after the listed veth was created again", 5)

	// --- A reload naming an interface that does not exist is refused:
	// the running protection is not traded for a typo.
	reloadWith := func(ifaces string) error {
		c := startedConfig(d, cfg)
		c.Iface = ifaces
		writeFileAtomic(t, d.realCfg, renderConfig(t, c))
		_, err := d.cli("reload")
		return err
	}
	typo := env.NodeIf[:len(env.NodeIf)-1] + "x"
	if err := reloadWith(env.NodeIf + ", " + typo); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("reload naming the missing %s: %v, want a refusal saying it does not exist", typo, err)
	}
	if got := statusIfaces(d.mustStatus(t)); !slices.Equal(got, []string{env.NodeIf}) {
		t.Errorf("after the refused reload: attached %v, want [%s]", got, env.NodeIf)
	}

	// --- An altname in the list names the interface attached under its
	// name: it stays attached through link events and re-checks.
	alt := env.NodeIf[:len(env.NodeIf)-1] + "l"
	mustRun(t, "ip", "-n", env.Node, "link", "property", "add", "dev", env.NodeIf, "altname", alt)
	if err := reloadWith(alt); err != nil {
		t.Fatalf("reload naming the altname %s: %v", alt, err)
	}
	mustRun(t, "ip", "-n", env.Node, "link", "set", extraB, "down") // a link event
	d.linkEventHandled(t)
	if got := statusIfaces(d.mustStatus(t)); !slices.Equal(got, []string{env.NodeIf}) || len(env.attachedProgs(t)) != 1 {
		t.Errorf("listed by its altname %s: attached %v, want [%s] with its program", alt, got, env.NodeIf)
	}
	env.expectAllDropped(t, "listed by its altname", 5)

	mfs := d.scrape(t)
	att := mustMetric(t, mfs, "olcd_interface_changes_total", "change", "attached")
	det := mustMetric(t, mfs, "olcd_interface_changes_total", "change", "detached")
	// Attached: the veth twice, the pair twice. Detached: the veth twice,
	// the pair when deleted and at the reload.
	if att != 6 || det != 6 {
		t.Errorf("olcd_interface_changes_total attached %v, detached %v; want 6 and 6", att, det)
	}
}

// statusIfaces returns the names of the status's attachments, sorted.
func statusIfaces(st *api.Status) []string {
	var out []string
	for _, i := range st.Interfaces {
		out = append(out, i.Name)
	}
	slices.Sort(out)
	return out
}

// waitFor polls cond every 50 ms until it holds, failing after followWithin.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, followWithin, 50*time.Millisecond, func() (bool, error) { return cond(), nil }, "%s", what)
}
