package daemon

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
func (b *modeBackend) RunningConfig(context.Context) (*api.RunningConfig, error) {
	return nil, errors.New("unexpected config")
}

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

// TestListenAdminNeverRemovesOtherFiles: only a socket left by a dead
// daemon is replaced. A regular file, an empty directory or a symlink at
// admin.socket (a typo naming the config file) is refused and kept: a
// connect to a regular file fails with ECONNREFUSED like a dead socket's,
// and the file was deleted as stale.
func TestListenAdminNeverRemovesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "olcd.yaml")
	if err := os.WriteFile(file, []byte("mode: enforce\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{file, "is not a socket (a regular file): not removed"},
		{empty, "is not a socket (a directory): not removed"},
		{link, "is not a socket (a symlink): not removed"},
	} {
		ln, err := listenAdmin(tt.path)
		if err == nil {
			ln.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("listenAdmin(%s): %v, want %q", tt.path, err, tt.want)
		}
		if _, err := os.Lstat(tt.path); err != nil {
			t.Errorf("%s was removed: %v", tt.path, err)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "mode: enforce\n" {
		t.Errorf("the file behind the path: %q, %v", b, err)
	}

	// A dead daemon's socket (its file left behind) is replaced.
	stale := filepath.Join(dir, "olcd.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	ln, err := listenAdmin(stale)
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	ln.Close()
}

// TestAdminSocketMadeAgain: the admin socket file removed while olcd runs
// (rm -rf /run/olcd) is made again within a few checks, so the kill switch
// and status stay reachable (they answered "no such file" until a
// restart); a path then taken by another file is left alone.
func TestAdminSocketMadeAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "olcd.sock")
	ln, err := listenAdmin(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	go serveHTTP(srv, ln, func(error) {})
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := &syncBuffer{}
	go keepAdminSocket(ctx, srv, path, 20*time.Millisecond, slog.New(slog.NewTextHandler(log, nil)))

	answers := func() bool {
		c := api.NewClient(path, time.Second)
		_, err := c.Status(context.Background())
		// The handler answers "ok", not a status document: any answer
		// but a dial error means the socket is served.
		return err == nil || !strings.Contains(err.Error(), "dial unix")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 3*time.Second, 20*time.Millisecond, func() (bool, error) { return answers(), nil },
		"the removed admin socket was not made again:\n%s", log)
	if !strings.Contains(log.String(), "admin socket was removed while olcd ran") {
		t.Errorf("not logged:\n%s", log)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("someone else's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The check has seen the file once it reports it.
	testutil.Eventually(t, 3*time.Second, 20*time.Millisecond, func() (bool, error) {
		return strings.Contains(log.String(), "admin socket path taken by another file"), nil
	}, "the taken path was not reported:\n%s", log)
	if b, err := os.ReadFile(path); err != nil || string(b) != "someone else's\n" {
		t.Errorf("a file at the path was replaced: %q, %v", b, err)
	}
	if n := strings.Count(log.String(), "admin socket path taken by another file"); n != 1 {
		t.Errorf("the taken path was reported %d times, want once:\n%s", n, log)
	}
}

// TestAdminSocketSuccessorKept: a stopping olcd removes its admin socket
// file only while the path is still its socket. A successor started by
// hand (`kill; olcd run`: its pin lock waits for this one) may have made
// its own there before the old one's listeners close: that one survives
// the old one's stop, its admin server's close and its listener's close
// alike (they removed it, and the kill switch was unreachable until the
// successor's check made it again).
func TestAdminSocketSuccessorKept(t *testing.T) {
	for _, tt := range []struct {
		name      string
		replaced  bool // a successor made its socket at the path
		viaServer bool // closed by the admin server first, as a stop does
	}{
		{name: "own socket removed", replaced: false},
		{name: "own socket removed, server closed first", replaced: false, viaServer: true},
		{name: "successor's socket kept", replaced: true},
		{name: "successor's socket kept, server closed first", replaced: true, viaServer: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			path := filepath.Join(dir, "olcd.sock")
			d := &Daemon{opts: Options{AdminSocket: path}, eng: &engine{}}
			ls := &listeners{}
			var err error
			if ls.admin, err = listenAdmin(path); err != nil {
				t.Fatal(err)
			}
			srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
			go serveHTTP(srv, ls.admin, func(error) {})
			var succ os.FileInfo
			if tt.replaced {
				// The old socket no longer answers (its server stopped):
				// the successor finds it stale and makes its own.
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				next, err := listenAdmin(path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { next.Close() })
				if succ, err = os.Lstat(path); err != nil {
					t.Fatal(err)
				}
			}
			if tt.viaServer {
				srv.Close()
			}
			ls.close(d, true)
			srv.Close()
			cur, err := os.Lstat(path)
			switch {
			case tt.replaced && (err != nil || !os.SameFile(cur, succ)):
				t.Errorf("the successor's socket at %s: %v, want it kept", path, err)
			case !tt.replaced && !errors.Is(err, fs.ErrNotExist):
				t.Errorf("own socket at %s after the stop: %v, want it removed", path, err)
			}
		})
	}
}
