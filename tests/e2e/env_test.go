package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/olcd/olcd/internal/testutil"
)

// serverPort is the protected port of the loadgen server in the node
// namespace (namespaces are private, so a fixed number collides with nobody).
const serverPort = 8080

// netEnv is the shared netns rig (testutil.Net, named, so that olcd and the
// servers run in it with ip netns exec): a node namespace (olcd and the
// server) and a peer namespace (the clients) joined by a veth pair.
type netEnv struct {
	*testutil.Net
	nodeNL *netlink.Handle
}

// newNetEnv creates the namespaces and the veth pair, removed in t.Cleanup.
func newNetEnv(t *testing.T) *netEnv {
	t.Helper()
	e := &netEnv{Net: testutil.NewNet(t, testutil.NetOptions{Named: true})}
	var err error
	if e.nodeNL, err = netlink.NewHandleAt(e.NodeNS); err != nil {
		t.Fatalf("netlink handle in %s: %v", e.Node, err)
	}
	t.Cleanup(e.nodeNL.Close)
	return e
}

// serverAddr is the loadgen server as the peer sees it.
func (e *netEnv) serverAddr() string {
	return netip.AddrPortFrom(e.NodeIP, serverPort).String()
}

// connectOnce opens one connection from the peer namespace to the server and
// reads its "ok". A failure is a timeout (the SYN was dropped) or another
// error (refused, reset), which the callers tell apart.
func (e *netEnv) connectOnce(timeout time.Duration) error {
	var c net.Conn
	err := e.InPeer(func() error {
		var err error
		c, err = net.DialTimeout("tcp", e.serverAddr(), timeout)
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("read reply: %w", err)
	}
	if string(buf) != "ok\n" {
		return fmt.Errorf("reply %q, want \"ok\\n\"", buf)
	}
	return nil
}

// burstResult counts the outcomes of a burst of connection attempts.
type burstResult struct {
	OK, TimedOut, Other int
	FirstOther          error
}

// synTimeout is the connect timeout of attempts whose SYNs are counted: it
// is below Linux's initial SYN retransmission timeout (1 s), so every attempt
// puts exactly one SYN on the wire.
const synTimeout = 300 * time.Millisecond

// burst makes n connection attempts from the peer, at most 8 at a time, each
// with timeout.
func (e *netEnv) burst(n int, timeout time.Duration) burstResult {
	var (
		mu  sync.Mutex
		r   burstResult
		wg  sync.WaitGroup
		sem = make(chan struct{}, 8)
	)
	for range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := e.connectOnce(timeout)
			mu.Lock()
			defer mu.Unlock()
			var ne net.Error
			switch {
			case err == nil:
				r.OK++
			case errors.As(err, &ne) && ne.Timeout():
				r.TimedOut++
			default:
				r.Other++
				if r.FirstOther == nil {
					r.FirstOther = err
				}
			}
		}()
	}
	wg.Wait()
	return r
}

// passTimeout is the connect timeout of attempts expected to succeed: below
// the initial SYN retransmission timeout (1 s), so a success means the first
// SYN passed, not a retransmit sent after the datapath changed its mind.
const passTimeout = 900 * time.Millisecond

// expectAllOK fails unless every one of n attempts succeeds at its first SYN.
func (e *netEnv) expectAllOK(t *testing.T, what string, n int) {
	t.Helper()
	if r := e.burst(n, passTimeout); r.OK != n {
		t.Fatalf("%s: %d of %d connects succeeded, %d timed out, %d other errors (first: %v)",
			what, r.OK, n, r.TimedOut, r.Other, r.FirstOther)
	}
}

// expectAllDropped fails unless every one of n attempts times out: each SYN
// was dropped (a refused or reset connection would mean it passed).
func (e *netEnv) expectAllDropped(t *testing.T, what string, n int) {
	t.Helper()
	if r := e.burst(n, synTimeout); r.TimedOut != n {
		t.Fatalf("%s: %d of %d connects timed out (dropped), %d succeeded, %d other errors (first: %v)",
			what, r.TimedOut, n, r.OK, r.Other, r.FirstOther)
	}
}

// proc is a process the test started; it is killed in t.Cleanup.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, valid once done is closed
}

// startProc starts argv with output to logPath and kills it in t.Cleanup.
func startProc(t *testing.T, logPath string, argv ...string) *proc {
	t.Helper()
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("create %s: %v", logPath, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("start %s: %v", strings.Join(argv, " "), err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig; a process that already ended is not an error.
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// wait waits up to timeout for the process to end.
func (p *proc) wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// kill ends the process: SIGCONT (it may be stopped), SIGKILL, wait.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// serve starts `loadgen serve` in the node namespace and waits until the
// peer can connect.
func (e *netEnv) serve(t *testing.T) {
	t.Helper()
	startProc(t, t.TempDir()+"/loadgen-serve.log", "ip", "netns", "exec", e.Node,
		bins.loadgen, "serve", "-addr", e.serverAddr(), "-work", "0", "-duration", "5m")
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() (bool, error) {
		err := e.connectOnce(time.Second)
		return err == nil, err
	}, "loadgen server on %s reachable from %s", e.serverAddr(), e.Peer)
}

// burnCPU keeps one CPU busy (loadgen burn, bounded to 3 minutes) so that
// cpu_busy is far above the tiny thresholds the tests use even on an idle
// machine, where /proc/stat can show no busy jiffy in a 200 ms tick. The
// returned function stops it; t.Cleanup does too.
func burnCPU(t *testing.T) (stop func()) {
	t.Helper()
	p := startProc(t, t.TempDir()+"/loadgen-burn.log", bins.loadgen, "burn", "-threads", "1", "-duration", "3m")
	return p.kill
}

// mustRun runs a command and fails the test with its output on error.
func mustRun(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := runCmd(argv...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return out
}

func runCmd(argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}
