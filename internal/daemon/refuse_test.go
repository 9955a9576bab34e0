package daemon

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestReloadRefusesUnopenableDecisionLog: a reload or a live override that
// names a decision log olcd cannot open (here a directory) is refused whole,
// with the file and line of the setting, instead of being reported as
// applied while the records go on to the old file; a path that opens is
// switched to and gets the records from then on.
func TestReloadRefusesUnopenableDecisionLog(t *testing.T) {
	base := testConfig(1, "500ms", "5s", 4)
	d := startTestDaemon(t, base)
	d.opts.DecisionLog = "" // the config's decision_log is the one in force
	dir := t.TempDir()
	running := d.eng.cfg

	d.write(t, base+"decision_log: "+dir+"\n")
	err := d.reload("test")
	line := regexp.MustCompile(`olcd\.yaml:\d+: decision_log: open decision log .*: a directory, not a regular file`)
	if err == nil || !line.MatchString(err.Error()) {
		t.Fatalf("reload naming a directory as decision_log: %v, want a refusal matching %q", err, line)
	}
	if d.eng.cfg != running || d.conf.refused == nil {
		t.Errorf("the refused reload replaced the running config (same %v) or was not shown (refused %v)", d.eng.cfg == running, d.conf.refused)
	}

	go func() {
		for c := range d.cmds {
			c.done <- c.run()
		}
	}()
	t.Cleanup(func() { close(d.cmds) })
	err = d.Patch(context.Background(), []byte("decision_log: "+dir+"\n"))
	if err == nil || !strings.Contains(err.Error(), "admin patch:1: decision_log: open decision log") {
		t.Fatalf("patch naming a directory as decision_log: %v, want a refusal at admin patch:1", err)
	}
	if len(d.conf.overrides) != 0 || d.eng.cfg != running {
		t.Errorf("the refused patch left overrides %+v (config replaced: %v)", d.conf.overrides, d.eng.cfg != running)
	}

	// A FIFO is refused at once: opened for writing it would block the
	// tick loop until a reader came.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	d.write(t, base+"decision_log: "+fifo+"\n")
	done := make(chan error, 1)
	go func() { done <- d.reload("test") }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "decision_log: open decision log "+fifo+": a FIFO, not a regular file") {
			t.Errorf("reload naming a FIFO as decision_log: %v, want a refusal", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a FIFO as decision_log blocked the reload")
	}

	path := filepath.Join(dir, "sub", "decisions.jsonl")
	d.write(t, base+"decision_log: "+path+"\n")
	if err := d.reload("test"); err != nil {
		t.Fatalf("reload with an openable decision_log: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), `"msg":"config_reload"`) {
		t.Errorf("new decision log %s: %q, %v; want the config_reload record", path, b, err)
	}
	d.noErrorsLogged(t)
}

// TestReloadMissingInterfaceNamesLine: a reload adding an interface that
// does not exist is refused with the file and line of the interfaces list,
// as the validator's problems are.
func TestReloadMissingInterfaceNamesLine(t *testing.T) {
	d := startTestDaemon(t, testConfig(1, "500ms", "5s", 4))
	d.links.following = true
	running := d.eng.cfg
	d.write(t, strings.Replace(testConfig(1, "500ms", "5s", 4), "[olcdtest0]", "[olcdtest0, olcdnosuch0]", 1))
	err := d.reload("test")
	if err == nil || !strings.Contains(err.Error(), "olcd.yaml:2: interfaces: [olcdnosuch0] does not exist") {
		t.Fatalf("reload: %v, want a refusal at olcd.yaml:2 naming olcdnosuch0", err)
	}
	if d.eng.cfg != running {
		t.Error("the refused reload replaced the running config")
	}
}

// TestAdminRefusalsLogged: a reload refused through the admin API and a
// refused live override reach the operational log (the journal), as a
// refused SIGHUP does, not only the caller and the decision log.
func TestAdminRefusalsLogged(t *testing.T) {
	d := startTestDaemon(t, testConfig(1, "500ms", "5s", 4))
	go func() {
		for c := range d.cmds {
			c.done <- c.run()
		}
	}()
	t.Cleanup(func() { close(d.cmds) })
	d.write(t, "mode: enforce\nports: [{port: 8080, class: weird}]\n")
	if err := d.Reload(context.Background()); err == nil {
		t.Fatal("an invalid file was reloaded")
	}
	if err := d.Patch(context.Background(), []byte("controller: {ki: 9}")); err == nil {
		t.Fatal("an invalid patch was applied")
	}
	log := d.log.String()
	for _, want := range []string{
		`level=WARN msg="reload refused: the running config stays" trigger="admin API"`,
		`ports[0].class: unknown value \"weird\"`,
		`level=WARN msg="live override refused: the running config stays" kind=patch`,
		`controller.ki: 9 is outside (0, 2]`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("operational log lacks %q:\n%s", want, log)
		}
	}
}

// TestStartFailuresNameSetting: a start that fails on a setting — a listed
// interface that does not exist, a decision log that cannot be opened, a
// busy metrics address, an admin socket another olcd answers on — names
// the setting's file:line (or the flag that overrides it) and leaves
// nothing behind.
func TestStartFailuresNameSetting(t *testing.T) {
	orig := checkPrivileges
	checkPrivileges = func() error { return nil }
	t.Cleanup(func() { checkPrivileges = orig })
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	base := t.TempDir()
	live := filepath.Join(base, "live.sock")
	liveLn, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer liveLn.Close()

	tests := []struct {
		name, doc string
		opts      Options
		want      string
	}{
		{"missing interface", "interfaces: [olcdnosuch9]\nmetrics: {address: ''}\n", Options{},
			"olcd.yaml:1: interfaces: [olcdnosuch9] does not exist"},
		{"decision log a directory", "metrics: {address: ''}\ndecision_log: " + base + "\n", Options{},
			"olcd.yaml:2: decision_log: open decision log " + base + ": a directory, not a regular file"},
		{"decision log flag", "metrics: {address: ''}\n", Options{DecisionLog: base},
			"--decision-log: open decision log " + base + ": a directory, not a regular file"},
		{"metrics busy", "decision_log: ''\nmetrics:\n  address: " + busy.Addr().String() + "\n", Options{},
			"olcd.yaml:3: metrics.address: listen for metrics on " + busy.Addr().String()},
		{"admin socket live", "decision_log: ''\nmetrics: {address: ''}\nadmin: {socket: " + live + "}\n", Options{},
			"olcd.yaml:3: admin.socket: admin socket " + live + ": another olcd is running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			path := filepath.Join(t.TempDir(), "olcd.yaml")
			if err := os.WriteFile(path, []byte(tt.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			opts := tt.opts
			opts.ConfigPath = path
			if !strings.Contains(tt.doc, "admin:") {
				opts.AdminSocket = filepath.Join(root, "olcd.sock")
			}
			d, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = d.Run(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run: %v, want an error containing %q", err, tt.want)
			}
			if _, err := os.Stat(root); !os.IsNotExist(err) {
				t.Errorf("the failed start left %s behind (%v)", root, err)
			}
		})
	}
}

// TestRestartOnlyReportsRunningValues: a reload that changes
// heartbeat.stale_after (which only a restart applies) leaves the status,
// /healthz and olcd_heartbeat_stale_after_seconds at the value the datapath
// runs with, and warns; a reload back to the running value warns no more
// (it compared with the previous file and said a restart was needed).
func TestRestartOnlyReportsRunningValues(t *testing.T) {
	d := startTestDaemon(t, testConfig(1, "500ms", "5s", 4))
	const warn = "settings changed that take effect only after a restart"
	d.write(t, testConfig(1, "500ms", "30s", 4))
	if err := d.reload("test"); err != nil {
		t.Fatal(err)
	}
	d.tick()
	if got := d.Status().StaleAfterS; got != 5 {
		t.Errorf("after a reload to stale_after 30s the status says %gs, want the running 5s", got)
	}
	if n := strings.Count(d.log.String(), warn); n != 1 {
		t.Errorf("%d restart warnings after changing stale_after, want 1:\n%s", n, d.log)
	}
	d.write(t, testConfig(1, "500ms", "5s", 4))
	if err := d.reload("test"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(d.log.String(), warn); n != 1 {
		t.Errorf("a reload back to the running stale_after warned again (%d warnings):\n%s", n, d.log)
	}
}

// TestFileRewrittenUnchangedKeepsOverrides: the file watch seeing the file
// written again with the settings in force (config management, a save
// without an edit, a comment added) reloads nothing: a kill switch set with `olcd set mode
// off` stays (it was dropped with every other override), and a refusal
// shown for an edit that was then undone is cleared. A changed file, and
// SIGHUP with the same content, still reload and drop the overrides.
func TestFileRewrittenUnchangedKeepsOverrides(t *testing.T) {
	cfg := testConfig(1, "500ms", "5s", 4)
	d := startTestDaemon(t, cfg)
	go func() {
		for c := range d.cmds {
			c.done <- c.run()
		}
	}()
	t.Cleanup(func() { close(d.cmds) })
	if err := d.SetMode(context.Background(), "off"); err != nil {
		t.Fatal(err)
	}
	reloads := func() float64 { return counterValue(t, d.metrics.reloads) }
	r0 := reloads()

	d.write(t, cfg)
	if err := d.reload(fileChange); err != nil {
		t.Fatal(err)
	}
	if len(d.conf.overrides) != 1 || d.eng.cfg.Mode.String() != "off" || reloads() != r0+1 {
		t.Errorf("the file written unchanged: overrides %+v, mode %s, %g reloads; want the kill switch kept, one (successful) reload", d.conf.overrides, d.eng.cfg.Mode, reloads()-r0)
	}

	d.write(t, "# managed by config management, 2026-12-07\n"+cfg)
	if err := d.reload(fileChange); err != nil || len(d.conf.overrides) != 1 || d.eng.cfg.Mode.String() != "off" || reloads() != r0+2 {
		t.Errorf("the file written with a comment added: %v, overrides %+v, mode %s; want the kill switch kept", err, d.conf.overrides, d.eng.cfg.Mode)
	}

	d.write(t, cfg+"bogus: 1\n")
	if err := d.reload(fileChange); err == nil || d.conf.refused == nil {
		t.Fatalf("an invalid edit was not refused: %v", err)
	}
	d.write(t, cfg)
	if err := d.reload(fileChange); err != nil || d.conf.refused != nil || len(d.conf.overrides) != 1 {
		t.Errorf("the edit undone: %v, refusal %+v, overrides %d; want the refusal cleared, the override kept", err, d.conf.refused, len(d.conf.overrides))
	}

	if err := d.reload("SIGHUP"); err != nil || len(d.conf.overrides) != 0 || d.eng.cfg.Mode.String() != "enforce" || reloads() != r0+4 {
		t.Errorf("SIGHUP with the same file: %v, overrides %+v, mode %s; want a reload dropping them", err, d.conf.overrides, d.eng.cfg.Mode)
	}
	if err := d.SetMode(context.Background(), "off"); err != nil {
		t.Fatal(err)
	}
	d.write(t, strings.Replace(cfg, "interval: 500ms", "interval: 400ms", 1))
	if err := d.reload(fileChange); err != nil || len(d.conf.overrides) != 0 || reloads() != r0+5 {
		t.Errorf("a changed file: %v, overrides %+v; want a reload dropping them", err, d.conf.overrides)
	}
}

// TestNoDefaultInterfaceNamesSetting: interfaces: [] on a node where no
// Ethernet interface is up fails the start naming the setting's line.
func TestNoDefaultInterfaceNamesSetting(t *testing.T) {
	orig := listLinks
	listLinks = func() ([]netlink.Link, error) {
		return []netlink.Link{&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "lo", Index: 1, Flags: net.FlagUp | net.FlagLoopback}}}, nil
	}
	t.Cleanup(func() { listLinks = orig })
	path := filepath.Join(t.TempDir(), "olcd.yaml")
	if err := os.WriteFile(path, []byte("mode: enforce\ninterfaces: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{ConfigPath: path})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.eng.resolveInterfaces(d.eng.cfg.Interfaces)
	if err == nil || !strings.Contains(err.Error(), "olcd.yaml:2: interfaces: [] finds no interface to attach to") {
		t.Errorf("resolve: %v, want the refusal at olcd.yaml:2", err)
	}
}
