package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/testutil"
)

// syncBuffer is a log sink safe for the loader's background goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testDaemon is a Daemon started as Run starts it, with the datapath loaded
// but attached nowhere (no interface is touched).
type testDaemon struct {
	*Daemon
	path string
	log  *syncBuffer
}

// startTestDaemon writes cfg to a file and starts a daemon on it. It needs
// root: the datapath is really loaded.
func startTestDaemon(t testing.TB, cfg string) *testDaemon {
	t.Helper()
	testutil.RequireRoot(t, "loads the BPF datapath")
	path := filepath.Join(t.TempDir(), "olcd.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	d, err := New(Options{ConfigPath: path, Logger: slog.New(slog.NewTextHandler(buf, nil)), DecisionLog: "-"})
	if err != nil {
		t.Fatalf("new daemon: %v", err)
	}
	if d.eng.dlog, err = openDecisionLog("-", nil); err != nil {
		t.Fatal(err)
	}
	orig := openDatapath
	openDatapath = loader.Load
	t.Cleanup(func() { openDatapath = orig })
	if err := d.eng.start(); err != nil {
		t.Fatalf("start: %v\n%s", err, buf)
	}
	t.Cleanup(func() { d.eng.dp.Close() })
	d.tick()
	return &testDaemon{Daemon: d, path: path, log: buf}
}

// write replaces the config file.
func (d *testDaemon) write(t *testing.T, cfg string) {
	t.Helper()
	if err := os.WriteFile(d.path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// reload reads the file and applies it: what Run does on two goroutines,
// the reader and then the tick loop.
func (d *testDaemon) reload(trigger string) error { return d.applyLoad(d.readConfig(trigger)) }

// datapathPorts lists the ports that have a policy in the datapath.
func (d *testDaemon) datapathPorts(t *testing.T) []string {
	t.Helper()
	st, err := d.eng.dp.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range st.Ports {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}

// noErrorsLogged fails the test if the daemon logged an error.
func (d *testDaemon) noErrorsLogged(t *testing.T) {
	t.Helper()
	for _, line := range strings.Split(d.log.String(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("error logged: %s", line)
		}
	}
}

// testConfig is a config with the given ports (TCP, from 8080 on),
// interval, stale_after and datapath sizes.
func testConfig(ports int, interval, staleAfter string, maxPorts int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mode: enforce\ninterfaces: [olcdtest0]\ninterval: %s\nheartbeat: {stale_after: %s}\n", interval, staleAfter)
	fmt.Fprintf(&b, "datapath: {max_ports: %d}\nports:\n", maxPorts)
	for i := range ports {
		fmt.Fprintf(&b, "  - {port: %d, proto: tcp, class: normal}\n", 8080+i)
	}
	return b.String()
}

// TestReloadBeyondRunningLimits: a reload that needs a restart-only setting
// it also changes (more ports than the running max_ports, an interval not
// shorter than the running stale_after) is refused whole, naming the
// setting's file and line like the validator: the running config,
// the controller's ports and the datapath's policies stay, and the next ticks
// write every probability without error.
func TestReloadBeyondRunningLimits(t *testing.T) {
	base := testConfig(2, "500ms", "5s", 2)
	tests := []struct {
		name, cfg, msg string
	}{
		{"more ports than max_ports", testConfig(3, "500ms", "5s", 4), "olcd.yaml:7: ports: 3 ports exceed the running datapath.max_ports 2"},
		{"interval past stale_after", testConfig(2, "6s", "10s", 2), "olcd.yaml:3: interval: 6s is not shorter than the running heartbeat.stale_after 5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := startTestDaemon(t, base)
			running := d.eng.cfg
			d.write(t, tt.cfg)
			err := d.reload("test")
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("reload: %v, want an error containing %q", err, tt.msg)
			}
			if d.eng.cfg != running || len(d.eng.ports) != 2 {
				t.Errorf("running config changed: %d ports, same config %v", len(d.eng.ports), d.eng.cfg == running)
			}
			if got := d.datapathPorts(t); !slices.Equal(got, []string{"tcp/8080", "tcp/8081"}) {
				t.Errorf("datapath ports %q, want tcp/8080 and tcp/8081", got)
			}
			d.tick()
			d.tick()
			d.noErrorsLogged(t)
		})
	}
}

// TestRestartPending: a reload that changes a setting only a start applies
// (datapath.max_ports, metrics.address) is applied with the rest, and the
// status names those settings until a reload takes them back to what runs.
func TestRestartPending(t *testing.T) {
	base := testConfig(2, "500ms", "5s", 2)
	d := startTestDaemon(t, base)
	pending := func() []string {
		d.publish()
		return d.Status().RestartPending
	}
	if got := pending(); len(got) != 0 {
		t.Fatalf("pending at the start: %q", got)
	}
	d.write(t, testConfig(2, "500ms", "5s", 4))
	if err := d.reload("test"); err != nil {
		t.Fatal(err)
	}
	if got := pending(); !slices.Equal(got, []string{"datapath"}) {
		t.Errorf("after max_ports 2 → 4: pending %q, want [datapath]", got)
	}
	d.write(t, base)
	if err := d.reload("test"); err != nil {
		t.Fatal(err)
	}
	if got := pending(); len(got) != 0 {
		t.Errorf("after max_ports back to 2: pending %q, want none", got)
	}
}

// TestApplyRestoresOnDatapathError: when writing the datapath fails after
// the checks passed (here: the daemon is made to believe in more room than
// the maps have), the previous config is written back and stays in force.
func TestApplyRestoresOnDatapathError(t *testing.T) {
	d := startTestDaemon(t, testConfig(2, "500ms", "5s", 2))
	running := d.eng.cfg
	d.eng.limits.maxPorts = 10 // the maps hold 2
	d.write(t, testConfig(3, "500ms", "5s", 2+1))
	if err := d.reload("test"); err == nil || !strings.Contains(err.Error(), "exceed max ports 2") {
		t.Fatalf("reload: %v, want the datapath's refusal", err)
	}
	if d.eng.cfg != running || len(d.eng.ports) != 2 {
		t.Errorf("running config not restored: %d ports, same config %v", len(d.eng.ports), d.eng.cfg == running)
	}
	if got := d.datapathPorts(t); !slices.Equal(got, []string{"tcp/8080", "tcp/8081"}) {
		t.Errorf("datapath ports %q, want tcp/8080 and tcp/8081", got)
	}
	d.tick()
	d.noErrorsLogged(t)
}

// TestPatchRestartOnly: a live override that touches a setting only a
// restart applies is refused, naming it, instead of being shown as in force.
func TestPatchRestartOnly(t *testing.T) {
	d := startTestDaemon(t, testConfig(1, "500ms", "5s", 4))
	tests := []struct{ patch, field string }{
		{"attach: xdp", "attach"},
		{"datapath: {max_ports: 8}", "datapath"},
		{"heartbeat: {stale_after: 9s}", "heartbeat.stale_after"},
		{"interval: 1s\nheartbeat: {stale_after: 30s}", "heartbeat.stale_after"},
		{"metrics: {address: '127.0.0.1:1'}", "metrics.address"},
	}
	ctx := context.Background()
	go func() {
		// Stands in for Run's loop: Patch hands its work to it.
		for c := range d.cmds {
			c.done <- c.run()
		}
	}()
	t.Cleanup(func() { close(d.cmds) })
	for _, tt := range tests {
		err := d.Patch(ctx, []byte(tt.patch))
		if err == nil || !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), "restart") {
			t.Errorf("patch %q: %v, want a refusal naming %s", tt.patch, err, tt.field)
		}
	}
	if len(d.conf.overrides) != 0 || d.eng.cfg.Interval.String() != "500ms" {
		t.Errorf("refused patches left overrides %+v, interval %v", d.conf.overrides, d.eng.cfg.Interval)
	}
	if err := d.Patch(ctx, []byte("signals: {cpu_busy: {threshold: 0.5}}")); err != nil {
		t.Errorf("a live setting was refused: %v", err)
	}
	// datapath.response_min_samples is the daemon's, read every tick: it
	// is applied live (it was refused with the map sizes).
	if err := d.Patch(ctx, []byte("datapath: {response_min_samples: 20}")); err != nil || d.eng.cfg.Datapath.ResponseMinSamples != 20 {
		t.Errorf("patch of response_min_samples: %v (in force %d)", err, d.eng.cfg.Datapath.ResponseMinSamples)
	}
}

// TestAutoPortsBeyondMaxPorts: under ports: auto, a host with more listening
// ports than max_ports starts, protecting max_ports of them, and says so.
func TestAutoPortsBeyondMaxPorts(t *testing.T) {
	for range 3 { // listeners on a non-loopback (wildcard) address
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
	}
	d := startTestDaemon(t, "mode: observe\ninterfaces: [olcdtest0]\nports: auto\ndatapath: {max_ports: 2}\n")
	if len(d.eng.ports) != 2 || len(d.datapathPorts(t)) != 2 {
		t.Errorf("%d ports protected, %d in the datapath; want 2 (max_ports)", len(d.eng.ports), len(d.datapathPorts(t)))
	}
	if !strings.Contains(d.log.String(), "more listening ports than datapath.max_ports") {
		t.Errorf("no warning logged:\n%s", d.log)
	}
	d.rediscover()
	d.tick()
	d.noErrorsLogged(t)
}

// tcpPolicies returns a policy for each of the TCP ports, in order.
func tcpPolicies(ports ...uint16) []loader.PortPolicy {
	var out []loader.PortPolicy
	for _, p := range ports {
		out = append(out, loader.PortPolicy{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: p}})
	}
	return out
}

func TestCapPorts(t *testing.T) {
	entries := tcpPolicies
	tests := []struct {
		name           string
		found, current []loader.PortPolicy
		max            int
		want           []loader.PortPolicy
	}{
		{"fits", entries(22, 80, 443), nil, 3, entries(22, 80, 443)},
		{"lowest first", entries(22, 80, 443), nil, 2, entries(22, 80)},
		{"protected ones stay", entries(22, 80, 443, 8080), entries(443, 8080), 2, entries(443, 8080)},
		{"then the lowest", entries(22, 80, 443, 8080), entries(8080), 3, entries(22, 80, 8080)},
		{"no limit", entries(22, 80), nil, 0, entries(22, 80)},
	}
	for _, tt := range tests {
		if got := capPorts(tt.found, tt.current, tt.max); !slices.Equal(got, tt.want) {
			t.Errorf("%s: capPorts = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPortActions: each port gets its own action (ports[].action over
// action.kind), shown in the status, and a reload that changes one applies
// it with the rate limit.
func TestPortActions(t *testing.T) {
	cfg := "mode: enforce\ninterfaces: [olcdtest0]\naction: {kind: drop, reject_rate: 100}\nports:\n" +
		"  - {port: 8080, action: reject}\n  - {port: 8081}\n"
	d := startTestDaemon(t, cfg)
	actions := func() map[uint16]string {
		d.publish()
		out := map[uint16]string{}
		for _, p := range d.Status().Ports {
			out[p.Port] = p.Action
		}
		return out
	}
	if got := actions(); got[8080] != "reject" || got[8081] != "drop" {
		t.Errorf("actions %v, want 8080 reject, 8081 drop", got)
	}
	d.write(t, strings.Replace(cfg, "kind: drop", "kind: reject", 1))
	if err := d.reload("test"); err != nil {
		t.Fatal(err)
	}
	if got := actions(); got[8080] != "reject" || got[8081] != "reject" {
		t.Errorf("after reload actions %v, want both reject", got)
	}
	d.tick()
	d.noErrorsLogged(t)
}
