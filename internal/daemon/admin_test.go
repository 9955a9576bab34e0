package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/testutil"
)

// TestListenAdminDirectory: the admin socket is refused in a directory
// someone else could write to (they could swap the socket for theirs), and
// accepted in a private one or a sticky one like /tmp.
func TestListenAdminDirectory(t *testing.T) {
	tests := []struct {
		name  string
		mode  os.FileMode
		owner int // -1: the test's own user
		want  string
	}{
		{"private", 0o700, -1, ""},
		{"readable by all", 0o755, -1, ""},
		{"world-writable", 0o777, -1, "has mode 0777"},
		{"group-writable, other group", 0o770, -1, "has mode 0770"},
		{"sticky like /tmp", 0o777 | os.ModeSticky, -1, ""},
		{"owned by another user", 0o700, 65534, "belongs to uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if tt.owner >= 0 || strings.Contains(tt.name, "other group") {
				testutil.RequireRoot(t, "chowns the socket directory")
				uid, gid := os.Geteuid(), 65534
				if tt.owner >= 0 {
					uid = tt.owner
				}
				if err := os.Chown(dir, uid, gid); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			ln, err := listenAdmin(filepath.Join(dir, "olcd.sock"))
			if ln != nil {
				ln.Close()
			}
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// modeBackend records SetMode calls; the other writes are not expected.
type modeBackend struct{ modes []string }

func (b *modeBackend) Status() *api.Status { return &api.Status{} }
func (b *modeBackend) SetMode(_ context.Context, m string) error {
	b.modes = append(b.modes, m)
	return nil
}
func (b *modeBackend) Reload(context.Context) error        { return errors.New("unexpected reload") }
func (b *modeBackend) Patch(context.Context, []byte) error { return errors.New("unexpected patch") }

// TestAdminModeRequestStrict: POST /v1/mode takes exactly one JSON object
// with the one field "mode": an unknown field beside it (a client's
// `"force": true` that nothing honours), trailing data — both answered 200
// before — a misspelt field or a cut-off body is a 400 and the mode is not
// changed.
func TestAdminModeRequestStrict(t *testing.T) {
	for _, tt := range []struct {
		body string
		code int
	}{
		{`{"mode": "off"}`, http.StatusOK},
		{`{"mode": "off"}` + "\n", http.StatusOK},
		{`{"mod": "off"}`, http.StatusBadRequest},
		{`{"mode": "off", "force": true}`, http.StatusBadRequest},
		{`{"mode": "off"} {"mode": "enforce"}`, http.StatusBadRequest},
		{`{"mode": "off"} trailing`, http.StatusBadRequest},
		{`{"mode": "off"`, http.StatusBadRequest},
		{``, http.StatusBadRequest},
	} {
		b := &modeBackend{}
		rec := httptest.NewRecorder()
		newAdminHandler(b, slog.New(slog.DiscardHandler)).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/mode", strings.NewReader(tt.body)))
		if rec.Code != tt.code {
			t.Errorf("POST /v1/mode %q: %d %s, want %d", tt.body, rec.Code, rec.Body, tt.code)
		}
		if want := tt.code == http.StatusOK; (len(b.modes) == 1) != want {
			t.Errorf("POST /v1/mode %q: SetMode calls %q", tt.body, b.modes)
		}
	}
}
