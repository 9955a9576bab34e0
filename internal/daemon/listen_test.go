package daemon

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/testutil"
)

func TestMetricsConnCap(t *testing.T) {
	tests := []struct {
		nofile uint64
		want   int
	}{
		{1 << 20, maxMetricsConns},
		{1024, maxMetricsConns},
		{minFreeFDs + maxMetricsConns + 1, maxMetricsConns},
		{256, 32},
		{64, 8},
		{8, 4},
	}
	for _, tt := range tests {
		if got := metricsConnCap(tt.nofile); got != tt.want {
			t.Errorf("metricsConnCap(%d) = %d, want %d", tt.nofile, got, tt.want)
		}
	}
}

// TestCapListener: connections beyond the cap are closed at once (the
// client reads EOF or a reset, it does not hang), they are counted, and a
// closed connection frees its slot.
func TestCapListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	ln := newCapListener(raw, 2, func() { refused.Add(1) })
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	go serveHTTP(srv, ln, func(err error) { t.Error(err) })
	defer srv.Close()

	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Idle connections: they send nothing and hold their slots.
	a, b := dial(), dial()
	defer a.Close()
	defer b.Close()
	waitOpen(t, ln, 2)

	// The excess connection is reset at once: on loopback the reset can
	// reach the client while connect() still returns, which is as good.
	if c, err := net.Dial("tcp", raw.Addr().String()); err == nil {
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection beyond the cap was not closed: read %v", err)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("dial beyond the cap: %v", err)
	}
	waitRefused(t, ln, 1)
	if got := ln.refused.Load(); got != 1 || refused.Load() != 1 {
		t.Errorf("refused = %d (callback %d), want 1", got, refused.Load())
	}

	a.Close()
	waitOpen(t, ln, 1)
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + raw.Addr().String() + "/")
	if err != nil {
		t.Fatalf("a request after a slot was freed: %v", err)
	}
	resp.Body.Close()
}

func waitOpen(t *testing.T, ln *capListener, n int64) {
	t.Helper()
	testutil.Eventually(t, 2*time.Second, 5*time.Millisecond, func() (bool, error) {
		if got := ln.open.Load(); got != n {
			return false, fmt.Errorf("%d connections open", got)
		}
		return true, nil
	}, "want %d connections open", n)
}

// waitRefused waits until the listener has refused n connections.
func waitRefused(t *testing.T, ln *capListener, n uint64) {
	t.Helper()
	testutil.Eventually(t, 2*time.Second, time.Millisecond, func() (bool, error) {
		if got := ln.refused.Load(); got < n {
			return false, fmt.Errorf("refused %d connections", got)
		}
		return true, nil
	}, "want %d connections refused", n)
}
