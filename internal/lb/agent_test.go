package lb

import (
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/testutil"
)

// testReport answers "up ready 80%" for the node and per port: tcp/8080
// drains at 30 %, udp/53 is ready at 55 %.
func testReport() *Report {
	node := Target{Mode: "enforce", State: StateReady, Weight: 0.8}
	node.AgentReply = Reply(node.State, node.Weight)
	p1 := Target{Proto: "tcp", Port: 8080, Mode: "enforce", State: StateDrain, Weight: 0.3}
	p1.AgentReply = Reply(p1.State, p1.Weight)
	p2 := Target{Proto: "udp", Port: 53, Mode: "enforce", State: StateReady, Weight: 0.55}
	p2.AgentReply = Reply(p2.State, p2.Weight)
	return &Report{Mode: "enforce", Node: node, Ports: []Target{p1, p2}}
}

// startAgent serves a on a loopback port until the test ends.
func startAgent(t testing.TB, a *Agent) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveUntilCleanup(t, a, ln)
	return ln.Addr().String()
}

// serveUntilCleanup serves a on ln until the test ends.
func serveUntilCleanup(t testing.TB, a *Agent, ln net.Listener) {
	done := make(chan error, 1)
	go func() { done <- a.Serve(ln) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// Loopback sources: the agent learns per peer address whether it sends its
// line, so tests that mix silent and talking clients give them addresses
// of their own.
var (
	talker = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	silent = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
)

// ask connects, sends req (if not nil), and reads until EOF. Clients
// sending nothing connect from silent, the others from talker.
func ask(t testing.TB, addr string, req []byte) string {
	t.Helper()
	src := talker
	if req == nil {
		src = silent
	}
	return askFrom(t, src, addr, req, 0)
}

// delayedACK, where the OS has it (Linux), turns quick ACKs off on a socket
// before its connect, as HAProxy's agent check does: a line written at once
// travels with the handshake's last ACK and is in at accept.
var delayedACK func(network, address string, c syscall.RawConn) error

// askFrom is ask from the address src, sending req after delay.
func askFrom(t testing.TB, src *net.TCPAddr, addr string, req []byte, delay time.Duration) string {
	t.Helper()
	return askWith(t, &net.Dialer{LocalAddr: src, Timeout: 5 * time.Second}, addr, req, delay)
}

// askWith is ask through d, sending req after delay.
func askWith(t testing.TB, d *net.Dialer, addr string, req []byte, delay time.Duration) string {
	t.Helper()
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if req != nil {
		time.Sleep(delay)
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return string(b)
}

func TestAgentAnswers(t *testing.T) {
	a := NewAgent(AgentConfig{}, nil)
	addr := startAgent(t, a)
	if got := ask(t, addr, nil); got != "up ready 100%\n" {
		t.Errorf("before the first report: %q, want full weight", got)
	}
	a.Publish(testReport())
	for _, tc := range []struct {
		name string
		req  []byte
		want string
		kind string
	}{
		{"sends nothing (no agent-send)", nil, "up ready 80%\n", AnswerNode},
		{"agent-send tcp port", []byte("tcp/8080\n"), "up drain 30%\n", AnswerPort},
		{"agent-send bare port", []byte("8080\r\n"), "up drain 30%\n", AnswerPort},
		{"agent-send without newline", []byte("udp/53"), "up ready 55%\n", AnswerPort},
		{"agent-send backend/server", []byte("be_web/srv1\n"), "up ready 80%\n", AnswerUnknown},
		{"port not protected", []byte("tcp/9999\n"), "up ready 80%\n", AnswerUnknown},
		{"garbage", []byte("\x00\xff\xfeGET / HTTP/1.1\r\nHost: x\r\n\r\n"), "up ready 80%\n", AnswerUnknown},
		{"overlong line", []byte(strings.Repeat("x", 4096)), "up ready 80%\n", AnswerUnknown},
		{"empty line", []byte("\n"), "up ready 80%\n", AnswerNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.Counts()[tc.kind]
			if got := ask(t, addr, tc.req); got != tc.want {
				t.Errorf("answer %q, want %q", got, tc.want)
			}
			if n := a.Counts()[tc.kind]; n != before+1 {
				t.Errorf("%s answers %d → %d, want one more", tc.kind, before, n)
			}
		})
	}
}

// TestAgentSilentClientHeldOpen: a client that connects and sends nothing
// (and never closes) is answered after SendWait and closed; it holds no
// handler longer.
func TestAgentSilentClientHeldOpen(t *testing.T) {
	a := NewAgent(AgentConfig{SendWait: 20 * time.Millisecond}, nil)
	a.Publish(testReport())
	addr := startAgent(t, a)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "up ready 80%\n" {
		t.Fatalf("answer %q, %v", b, err)
	}
}

// TestAgentLearnsPeers: a peer that sent nothing is answered at accept
// from then on (HAProxy without agent-send); one that sent its line only
// after the accept gets, once, the node's answer at accept, and from then
// on its connections wait for their line (the port's answer); a line in
// at accept (HAProxy with agent-send) is answered at once whatever the
// peer did before.
func TestAgentLearnsPeers(t *testing.T) {
	a := NewAgent(AgentConfig{SendWait: 200 * time.Millisecond}, nil)
	a.Publish(testReport())
	addr := startAgent(t, a)
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}
	step := func(name string, req []byte, delay time.Duration, want string, waited uint64) {
		t.Helper()
		d := &net.Dialer{LocalAddr: peer, Timeout: 5 * time.Second}
		if delay == 0 && req != nil {
			if delayedACK == nil {
				t.Logf("%s: skipped, no TCP_QUICKACK here to send the line with the handshake", name)
				return
			}
			d.Control = delayedACK
		}
		if got := askWith(t, d, addr, req, delay); got != want {
			t.Errorf("%s: answer %q, want %q", name, got, want)
		}
		if n := a.Waited(); n != waited {
			t.Errorf("%s: %d connections waited for their line, want %d", name, n, waited)
		}
	}
	step("unknown peer, silent: waits, then the node's answer", nil, 0, "up ready 80%\n", 1)
	step("known silent: answered at accept", nil, 0, "up ready 80%\n", 1)
	if a.peers.expectLine(peer) {
		t.Fatal("a peer that sent nothing is still expected to send a line")
	}
	step("line in at accept (HAProxy's delayed ACK): its port", []byte("tcp/8080\n"), 0, "up drain 30%\n", 1)
	// The line comes 20 ms after the connect: the peer was silent, so
	// the answer is the node's, at once; the connection stays
	// half-closed for SendWait and its line teaches the agent.
	step("late line from a silent peer: the node's answer, once", []byte("tcp/8080\n"), 20*time.Millisecond, "up ready 80%\n", 1)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() (bool, error) { return a.peers.expectLine(peer), nil },
		"a late line marks the peer as one that sends lines")
	step("late line, learnt: waits for it", []byte("tcp/8080\n"), 20*time.Millisecond, "up drain 30%\n", 2)

	never := NewAgent(AgentConfig{SendWait: -1}, nil)
	never.Publish(testReport())
	if got := askFrom(t, peer, startAgent(t, never), []byte("tcp/8080\n"), 20*time.Millisecond); got != "up ready 80%\n" || never.Waited() != 0 {
		t.Errorf("SendWait < 0: answer %q after %d waits, want the node's at accept", got, never.Waited())
	}
}

// TestAgentThousandAtOnce: 1000 loopback clients connect at once, as 1000
// HAProxy servers' agent checks might: some send their agent-send line,
// some send nothing. Every one is answered with a line of the report; the
// connections waiting for their line never exceed MaxConns (the bound on
// memory: one goroutine and one 128-byte buffer each), the rest are
// answered at accept. The latency goal is measured with the clients in
// another process and network namespace: BenchmarkAgentThousand.
func TestAgentThousandAtOnce(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		name string
		req  []byte
	}{{"agent-send tcp/8080", []byte("tcp/8080\n")}, {"silent", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAgent(AgentConfig{MaxConns: 64}, nil)
			a.Publish(testReport())
			addr := startAgent(t, a)
			lat := thousand(t, addr, n, tc.req)
			if p := a.Peak(); p > 64 {
				t.Errorf("peak %d connections waiting at once, want at most MaxConns 64", p)
			}
			c := a.Counts()
			if got := c[AnswerPort] + c[AnswerOverflow] + c[AnswerNode]; got != n || c[AnswerUnknown] != 0 {
				t.Errorf("answers %v, want %d port, node or overflow answers", c, n)
			}
			if tc.req == nil && c[AnswerPort] != 0 {
				t.Errorf("silent clients got %d port answers", c[AnswerPort])
			}
			slices.Sort(lat)
			t.Logf("%d at once (clients in this process): dial to answer p50 %v p99 %v max %v; waited %d, peak %d of 64; answers %v",
				n, lat[n/2], lat[n*99/100], lat[n-1], a.Waited(), a.Peak(), c)
		})
	}
}

// thousand has n clients connect at once, each sending req (nil: nothing)
// and reading the answer to EOF, and returns each one's time from dial to
// the end of the answer. The answer must be the port's line (tcp/8080) or
// the node's (silent, overflow, or the line not in within SendWait).
func thousand(t testing.TB, addr string, n int, req []byte) []time.Duration {
	lat := make([]time.Duration, n)
	var resets atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				errs <- "dial: " + err.Error()
				return
			}
			defer c.Close()
			_ = c.SetDeadline(t0.Add(10 * time.Second))
			if req != nil {
				_, _ = c.Write(req)
			}
			b, err := io.ReadAll(c)
			lat[i] = time.Since(t0)
			if errors.Is(err, syscall.ECONNRESET) {
				// Answered at accept for the node (overflow) before
				// the line came: the answer, then an RST.
				resets.Add(1)
				err = nil
			}
			if s := string(b); err != nil || (s != "up drain 30%\n" && s != "up ready 80%\n") {
				errs <- s + " " + errString(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("answer %q", e)
	}
	if r := resets.Load(); r > 0 {
		t.Logf("%d of %d answers followed by an RST (overflow path)", r, n)
	}
	return lat
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// BenchmarkAgentAnswer is one connection, request and answer.
func BenchmarkAgentAnswer(b *testing.B) {
	a := NewAgent(AgentConfig{}, nil)
	a.Publish(testReport())
	addr := startAgent(b, a)
	for b.Loop() {
		ask(b, addr, []byte("tcp/8080\n"))
	}
}

// BenchmarkLookup is the per-connection work on a line in at accept.
func BenchmarkLookup(b *testing.B) {
	l := newLines(testReport())
	req := []byte("tcp/8080")
	b.ReportAllocs()
	for b.Loop() {
		if _, k := l.lookup(req); k != kindPort {
			b.Fatal(k)
		}
	}
}
