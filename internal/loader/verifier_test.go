package loader

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// TestVerifierMatrix loads the datapath under every load-time switch and
// attaches it with every attach mode on this kernel, recording each
// program's verified instruction count (prog info's verified_insns), its
// translated size and the load's wall time (the verifier's, mostly). The
// per-packet features (reject, mark, the request gate, even selection's
// draw) are branches of the same three programs that policies switch at
// run time, so each program is verified once per load with all of them in;
// the load-time switches are response timing (which sizes the flow table
// and the histograms) and the selection (which sizes olcd_even). With
// OLCD_VERIFIER_TABLE set, the table is written there in Markdown
// (docs/datapath.md, "Verifier matrix").
func TestVerifierMatrix(t *testing.T) {
	requireRoot(t)
	loads := []struct {
		name string
		cfg  Config
	}{
		{"timing off, random", Config{}},
		{"timing off, even", Config{Selection: SelectEven}},
		{"timing on (1 in 1), random", Config{ResponseSample: 1}},
		{"timing on (1 in 1), even, max sizes", Config{ResponseSample: 1, Selection: SelectEven, MaxPorts: olc.MaxMaxPorts, ResponsePorts: MaxResponsePorts}},
	}
	var rows []string
	for _, l := range loads {
		start := time.Now()
		d, err := Load(l.cfg, nil)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: load: %v", l.name, err)
		}
		for _, p := range []struct {
			name string
			prog *ebpf.Program
		}{{"olcd_xdp", d.objs.OlcdXdp}, {"olcd_tc", d.objs.OlcdTc}, {"olcd_tc_egress", d.objs.OlcdTcEgress}} {
			info, err := p.prog.Info()
			must(t, err)
			verified, ok := info.VerifiedInstructions()
			if !ok {
				t.Logf("%s: the kernel does not report verified instructions (Linux < 5.16)", p.name)
			}
			size, err := info.TranslatedSize()
			must(t, err)
			if ok && verified == 0 {
				t.Errorf("%s %s: 0 verified instructions", l.name, p.name)
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %d | %d | %s |", l.name, p.name, verified, size/8, took.Round(time.Millisecond)))
		}
		must(t, d.Close())
	}
	// Attach modes, with timing on (the egress program too).
	n := newTestNet(t)
	for _, m := range []struct {
		name  string
		mode  olc.AttachMode
		noTCX bool
	}{{"tcx", olc.AttachTC, false}, {"clsact", olc.AttachTC, true}, {"xdp native (veth)", olc.AttachXDPNative, false}, {"xdp generic", olc.AttachXDPGeneric, false}} {
		d := loadTest(t, Config{ResponseSample: 1})
		n.inServer(t, func() error { return d.attach(n.NodeIf, m.mode, m.noTCX) })
		a := d.Attachments()[0]
		rows = append(rows, fmt.Sprintf("| attach %s | %s (%s), egress %s | | | attached |", m.name, a.Hook, a.Mode, a.Egress))
		must(t, d.Close())
	}
	table := "| load / attach | program | verified insns | translated insns | load time |\n|---|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n"
	t.Logf("verifier matrix on this kernel:\n%s", table)
	if path := os.Getenv("OLCD_VERIFIER_TABLE"); path != "" {
		must(t, os.WriteFile(path, []byte(table), 0o644))
	}
}

// TestFeatures: each feature names what olcd does without it, and those it
// cannot run without are on here (the matrix above loaded on this kernel).
func TestFeatures(t *testing.T) {
	requireRoot(t)
	for _, f := range Features() {
		if f.Off == "" {
			t.Errorf("%s: no consequence for a kernel without it", f.Name)
		}
		if !f.On && strings.HasPrefix(f.Off, "olcd cannot run") {
			t.Errorf("%s: off on this kernel, where the datapath loaded (%s)", f.Name, f.Off)
		}
		t.Logf("%s: on=%v", f.Name, f.On)
	}
}
