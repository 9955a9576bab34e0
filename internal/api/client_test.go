package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/testutil"
)

// serve answers the admin API on a unix socket with h.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	return testutil.ServeUnixHTTP(t, h)
}

func TestClient(t *testing.T) {
	var gotMode, gotPatch, gotType string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(Status{Mode: "enforce", Ticks: 7, Ports: []PortStatus{{Proto: "tcp", Port: 80}}})
	})
	mux.HandleFunc("POST /v1/mode", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Mode string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("decode mode request: %v", err)
		}
		gotMode = req.Mode
		if req.Mode == "bogus" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_ = json.NewEncoder(w).Encode(Error{Error: "unknown mode", Problems: []string{"mode: bogus", "want off, observe or enforce"}})
		}
	})
	mux.HandleFunc("PATCH /v1/config", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotPatch, gotType = string(b), r.Header.Get("Content-Type")
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not json", http.StatusInternalServerError)
	})
	c := NewClient(serve(t, mux), 2*time.Second)
	ctx := context.Background()

	st, err := c.Status(ctx)
	if err != nil || st.Mode != "enforce" || st.Ticks != 7 || len(st.Ports) != 1 || st.Ports[0].Port != 80 {
		t.Fatalf("status %+v, %v", st, err)
	}
	if err := c.SetMode(ctx, "observe"); err != nil || gotMode != "observe" {
		t.Errorf("set mode: %v (sent %q)", err, gotMode)
	}
	err = c.SetMode(ctx, "bogus")
	var pe *ProblemsError
	if !errors.As(err, &pe) || pe.Msg != "unknown mode" || len(pe.ProblemLines()) != 2 ||
		err.Error() != "unknown mode:\n  mode: bogus\n  want off, observe or enforce" {
		t.Errorf("refused mode: %v", err)
	}
	if err := c.Patch(ctx, []byte("mode: off\n")); err != nil || gotPatch != "mode: off\n" || gotType != "application/yaml" {
		t.Errorf("patch: %v (sent %q as %q)", err, gotPatch, gotType)
	}
	// A non-2xx answer without the error body names the request and status.
	if _, err := c.Reload(ctx); err == nil || errors.As(err, &pe) || !strings.Contains(err.Error(), "POST /v1/reload: 500") {
		t.Errorf("reload: %v", err)
	}
}

func TestClientNoDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	_, err := NewClient(sock, time.Second).Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "is olcd running?") {
		t.Errorf("status without a daemon: %v", err)
	}
}

// TestClientNoAnswer: a daemon whose socket accepts but never answers (a
// stopped or hung process: the kernel queues the connection) is named as
// such, and a write is said to possibly take effect later (a `set mode off`
// to a SIGSTOPped olcd was reported failed, then applied on SIGCONT);
// "is olcd running?" is for a socket nobody listens on.
func TestClientNoAnswer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "olcd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // accepted by the kernel's backlog, never served
	c := NewClient(sock, 200*time.Millisecond)
	err = c.SetMode(context.Background(), "off")
	if err == nil || !strings.Contains(err.Error(), "no answer; the request may still take effect if olcd resumes") {
		t.Errorf("set mode to a silent daemon: %v", err)
	}
	_, err = c.Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no answer (olcd stopped or hung?") {
		t.Errorf("status of a silent daemon: %v", err)
	}
}

// TestClientPermissionDenied: a socket the user may not open (olcd status
// run without root) says so, not "is olcd running?".
func TestClientPermissionDenied(t *testing.T) {
	c := NewClient("/run/olcd/olcd.sock", time.Second)
	c.hc.Transport = &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}
	}}
	_, err := c.Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), "permission denied: the admin socket is root's (run as root)") || strings.Contains(err.Error(), "is olcd running?") {
		t.Errorf("status on a socket refusing the user: %v", err)
	}
}
