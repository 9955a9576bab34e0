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
	"github.com/olcd/olcd/internal/testutil"
)

// TestConfigShow: `olcd config show` prints every key with its value and
// origin, for a file alone and for a running daemon's file with its live
// overrides (issue 28: no command printed the effective config).
func TestConfigShow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "olcd.yaml")
	testutil.Must(t, os.WriteFile(path, []byte("mode: enforce\nports: [443]\n"), 0o644))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		err := json.NewEncoder(w).Encode(api.Status{ConfigSource: path, Overrides: []api.Override{
			{Kind: "patch", Value: "controller: {ki: 0.3}"}, {Kind: "mode", Value: "observe"}}})
		if err != nil {
			t.Errorf("encode status: %v", err)
		}
	})
	sock := testutil.ServeUnixHTTP(t, mux)
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
