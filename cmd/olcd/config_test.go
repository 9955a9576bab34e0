package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/testutil"
)

// TestConfigShow: `olcd config show` prints every key with its value and
// origin, for a file alone and for a running daemon's file with its live
// overrides (issue 28: no command printed the effective config).
func TestConfigShow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "olcd.yaml")
	testutil.Must(t, os.WriteFile(path, []byte("mode: enforce\nports: [443]\n"), 0o644))
	sock := configServer(t, path, "mode: enforce\nports: [443]\n", nil, []api.ConfigOverride{
		{Override: api.Override{Kind: "patch", Value: "controller: {ki: 0.3}"}, Doc: "controller: {ki: 0.3}"},
		{Override: api.Override{Kind: "mode", Value: "observe"}, Doc: "mode: observe\n"}})
	for _, tt := range []struct {
		args []string
		want []string // "key value origin", white space collapsed
	}{
		{[]string{"config", "show", "--config", path}, []string{"mode enforce " + path + ":1", "ports [tcp/443 class normal] " + path + ":2", "controller.ki 0.5 default"}},
		{[]string{"config", "show", "--socket", sock}, []string{"mode observe live mode:1", "controller.ki 0.3 live patch:1", "ports [tcp/443 class normal] " + path + ":2", "interval 500ms default"}},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tt.args, &stdout, &stderr); code != 0 {
			t.Fatalf("olcd %s: exit %d, stderr %q", strings.Join(tt.args, " "), code, stderr.String())
		}
		out := regexp.MustCompile(` +`).ReplaceAllString(stdout.String(), " ")
		for _, w := range tt.want {
			if !strings.Contains(out, "\n"+w+"\n") {
				t.Errorf("olcd %s: no line %q in\n%s", strings.Join(tt.args, " "), w, out)
			}
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "show", "--socket", filepath.Join(t.TempDir(), "none.sock")}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "--config FILE") {
		t.Errorf("no daemon: exit %d, stderr %q", code, stderr.String())
	}
}

// configServer answers GET /v1/status and GET /v1/config on a unix socket
// as a daemon does that loaded file (its content loaded) from path, has
// overrides in force and refused the last reload when refused is set.
func configServer(t *testing.T, path, loaded string, refused *api.ReloadFailure, overrides []api.ConfigOverride) string {
	t.Helper()
	cfg, _, err := rules.Parse([]byte(loaded), path)
	if err != nil {
		t.Fatal(err)
	}
	rc := api.RunningConfig{Source: path, File: loaded, FileDigest: cfg.Digest(), Overrides: overrides}
	st := api.Status{ConfigSource: path, ReloadRefused: refused}
	for _, o := range overrides {
		st.Overrides = append(st.Overrides, o.Override)
		if cfg, _, err = cfg.Patch([]byte(o.Doc), "x"); err != nil {
			t.Fatal(err)
		}
	}
	rc.Digest = cfg.Digest()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(st) })
	mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(rc) })
	return testutil.ServeUnixHTTP(t, mux)
}

// TestConfigShowRunning: `olcd config show` shows the config in force, not
// the file on disk (it re-read the file and applied the overrides to it, so
// an edit not reloaded, or a refused reload, showed settings the daemon
// does not run), says so in a comment line, and tells when the file on
// disk differs and why; --file shows the file on disk.
func TestConfigShowRunning(t *testing.T) {
	const loaded = "mode: enforce\nports: [443]\ncontroller: {ki: 0.7}\n"
	for _, tt := range []struct {
		name     string
		disk     string // the file on disk now
		refused  *api.ReloadFailure
		args     []string
		want     []string // lines, white space collapsed
		notice   string   // in a "# NOTICE:" line; "" for none
		noNotice bool
	}{
		{name: "as loaded", disk: loaded, want: []string{"controller.ki 0.7 PATH:3", "mode enforce PATH:1"}, noNotice: true},
		{name: "a comment added: the same config", disk: "# stamped by config management\n" + loaded, want: []string{"controller.ki 0.7 PATH:3"}, noNotice: true},
		{name: "edited, not reloaded", disk: "mode: enforce\nports: [443]\ncontroller: {ki: 0.2}\n",
			want: []string{"controller.ki 0.7 PATH:3"}, notice: "on disk differs from the file in force: edited since it was loaded; olcd reload applies it"},
		{name: "reload refused", disk: "mode: enforce\nports: [443]\ncontroller: {ki: 0.2}\nmetrics: {address: ':1'}\n",
			refused: &api.ReloadFailure{Trigger: "SIGHUP", Error: "listen :1: busy"},
			want:    []string{"controller.ki 0.7 PATH:3"}, notice: "on disk differs from the file in force: its reload was refused at"},
		{name: "invalid on disk", disk: "mode: enforce\ncontroller: {ki: 9}\n", refused: &api.ReloadFailure{Trigger: "file change", Error: "1 config problem(s)"},
			want: []string{"controller.ki 0.7 PATH:3"}, notice: "on disk is not the config in force: it has 1 problem(s), so a reload is refused"},
		{name: "--file: the file on disk", disk: "mode: enforce\nports: [443]\ncontroller: {ki: 0.2}\n", args: []string{"--file"},
			want: []string{"# the file PATH as it is on disk (--file), not the config in force in the olcd on SOCK", "controller.ki 0.2 PATH:3"}, notice: "edited since it was loaded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "olcd.yaml")
			testutil.Must(t, os.WriteFile(path, []byte(tt.disk), 0o644))
			sock := configServer(t, path, loaded, tt.refused, nil)
			var stdout, stderr bytes.Buffer
			args := append([]string{"config", "show", "--socket", sock}, tt.args...)
			if code := run(args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			out := regexp.MustCompile(` +`).ReplaceAllString(stdout.String(), " ")
			if tt.args == nil && !strings.HasPrefix(out, "# the config in force in the olcd on "+sock+": "+path+" as loaded") {
				t.Errorf("no header naming the config in force:\n%s", out)
			}
			for _, w := range tt.want {
				if w = strings.NewReplacer("PATH", path, "SOCK", sock).Replace(w); !strings.Contains(out, w+"\n") {
					t.Errorf("no line %q in\n%s", w, out)
				}
			}
			hasNotice := regexp.MustCompile(`(?m)^# NOTICE: .*` + regexp.QuoteMeta(tt.notice)).MatchString(out)
			if tt.noNotice == hasNotice || !tt.noNotice && !strings.Contains(out, path+" on disk") {
				t.Errorf("notice %q (none: %v) in\n%s", tt.notice, tt.noNotice, out)
			}
		})
	}
}
