// Package testutil holds what the project's tests share: the root check,
// Must, and (on Linux) a network rig of two namespaces joined by a veth pair.
// Only tests and test harnesses import it.
package testutil

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// RequireRoot skips t unless the process runs as root (effective uid 0).
// needs says what the test does that needs root, e.g. "loads BPF programs";
// it is the skip message, so a skipped run says what it did not test.
func RequireRoot(t testing.TB, needs string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root (%s): run as root, as CI does", needs)
	}
}

// Must fails t at once when err is not nil.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// AcceptAll calls handle in a goroutine of its own for every connection ln
// accepts, until ln is closed.
func AcceptAll(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go handle(c)
	}
}

// ServeUnixHTTP answers HTTP with h on a unix socket in t's temporary
// directory, as olcd's admin API does, until t ends; it returns the
// socket's path.
func ServeUnixHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "olcd.sock")
	ln, err := net.Listen("unix", sock)
	Must(t, err)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }() // ErrServerClosed at cleanup
	t.Cleanup(func() { srv.Close() })
	return sock
}
