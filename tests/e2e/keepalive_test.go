package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/api"
)

// TestRequestGateDaemon drives the request gate through `olcd run` (issue
// 26): a port with request_gate: true in the config, a keep-alive
// connection answered at p = 0, then an overload that takes the port to
// p = 1 (a live threshold, as TestDaemonEndToEnd): the next request on
// that connection is reset within 5 ms and never reaches the server, and
// the status (ports[].keepalive) and the metrics count it. The datapath's own proof on real sockets, over every attach mode,
// is internal/loader's TestRequestGateRealTraffic.
func TestRequestGateDaemon(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	var ln net.Listener
	if err := env.InNode(func() error {
		var err error
		ln, err = net.Listen("tcp4", env.serverAddr())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 16)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.URL.Path
		_, _ = io.WriteString(w, "ok\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	d := startDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever, RequestGate: true})
	var c net.Conn
	if err := env.InPeer(func() error {
		var err error
		c, err = net.DialTimeout("tcp4", env.serverAddr(), 2*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connect at p=0: %v", err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	send := func(path string) error {
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: olcd-e2e\r\n\r\n")
		return err
	}
	if err := send("/first"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("first request at p=0: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if p := <-seen; p != "/first" {
		t.Fatalf("server saw %q", p)
	}

	stopBurn := burnCPU(t)
	defer stopBurn()
	d.pollStatus(t, "cpu_busy above 0.1 with one CPU burning", 10*time.Second, func(s *api.Status) bool {
		cb := cpuBusy(s)
		return cb != nil && cb.Value != nil && *cb.Value > 0.1
	})
	d.mustCLI(t, "set", "threshold", "cpu_busy", fmt.Sprint(thresholdAlways))
	d.waitShedding(t)

	start := time.Now()
	if err := send("/second"); err != nil {
		t.Fatal(err)
	}
	_, err = br.ReadByte()
	el := time.Since(start)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("request on the keep-alive connection at p=1: read %v after %v, want ECONNRESET", err, el)
	}
	t.Logf("reset seen %v after the request", el)
	if el > 5*time.Millisecond {
		t.Errorf("reset after %v, want ≤ 5 ms", el)
	}
	st := d.pollStatus(t, "the reset in the status", 5*time.Second, func(s *api.Status) bool {
		ka := port(t, s).KeepAlive
		return ka != nil && ka.Totals.Resets >= 1
	})
	if ka := port(t, st).KeepAlive; !ka.RequestGate || ka.Totals.Reused < 1 {
		t.Errorf("status keepalive %+v, want the gate on and the request start counted", ka)
	}
	l := []string{"proto", "tcp", "port", strconv.Itoa(serverPort), "class", "normal"}
	if v := mustMetric(t, d.scrape(t), "olcd_port_request_resets_total", l...); v < 1 {
		t.Errorf("olcd_port_request_resets_total = %v, want ≥ 1", v)
	}
	select {
	case p := <-seen:
		t.Errorf("the server read %q after the reset", p)
	default:
	}
}
