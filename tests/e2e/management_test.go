package e2e

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/testutil"
)

// TestManagementPortNeverShed: under ports: auto, on a node shedding every
// new connection (p = 1, enforce), a listener on tcp/22 — the SSH port,
// exceptions.management's default — keeps accepting every connection at its
// first SYN while the service port drops them all; the status lists it as a
// listener left unprotected and why. With `exceptions: {management: []}`
// (the documented way to protect SSH under auto) it is shed like the rest.
func TestManagementPortNeverShed(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	env.serve(t)
	ssh := netip.AddrPortFrom(env.NodeIP, 22).String()
	startProc(t, t.TempDir()+"/loadgen-ssh.log", "ip", "netns", "exec", env.Node,
		bins.loadgen, "serve", "-addr", ssh, "-work", "0", "-duration", "5m")
	// connects counts the connections to tcp/22 accepted at their first SYN.
	connects := func(n int) (ok int) {
		for range n {
			var c net.Conn
			err := env.InPeer(func() (err error) { c, err = net.DialTimeout("tcp", ssh, synTimeout); return err })
			if err == nil {
				ok++
				c.Close()
			}
		}
		return ok
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() (bool, error) { return connects(1) == 1, nil },
		"listener on %s reachable", ssh)
	burnCPU(t)
	d := startDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdAlways, AutoPorts: true})
	st := d.waitShedding(t)
	if slices.ContainsFunc(st.Ports, func(p api.PortStatus) bool { return p.Port == 22 }) {
		t.Fatalf("tcp/22 protected under ports: auto: %s", summary(st))
	}
	if !slices.Contains(st.ListenersExempt, api.ExemptListener{Proto: "tcp", Port: 22, Reason: "exceptions.management"}) ||
		!slices.Contains(st.Exceptions, "tcp/22 (management)") {
		t.Errorf("status exempt listeners %+v, exceptions %q: want tcp/22 as a management port", st.ListenersExempt, st.Exceptions)
	}
	env.expectAllDropped(t, "service port at p = 1", 10)
	if ok := connects(20); ok != 20 {
		t.Fatalf("SSH port while shedding everything else: %d of 20 connects accepted at the first SYN", ok)
	}
	if out := d.mustCLI(t, "status"); !containsAll(out, "listening, not protected: tcp/22", "exceptions.management") {
		t.Errorf("olcd status does not say why tcp/22 is not protected:\n%s", out)
	}

	patch := filepath.Join(d.dir, "protect-ssh.yaml")
	if err := os.WriteFile(patch, []byte("exceptions: {management: []}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.mustCLI(t, "set", "patch", patch)
	d.pollStatus(t, "tcp/22 protected and shed at p = 1", 10*time.Second, func(s *api.Status) bool {
		return slices.ContainsFunc(s.Ports, func(p api.PortStatus) bool { return p.Port == 22 && p.DropProbability == 1 })
	})
	if ok := connects(10); ok != 0 {
		t.Errorf("with management: [] and p = 1, %d of 10 connects to tcp/22 accepted, want 0", ok)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
