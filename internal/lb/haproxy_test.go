package lb

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/debpkg"
	"github.com/olcd/olcd/internal/testutil"
)

// haproxyStat is one server's line of HAProxy's `show stat`.
type haproxyStat struct {
	status string // "UP", "DRAIN", "DOWN", "MAINT", ...
	weight string // the effective weight
	agent  string // the last agent check: status and description
}

// haproxyServers asks HAProxy's stats socket for the servers of backend be.
func haproxyServers(sock string) (map[string]haproxyStat, error) {
	servers, err := testutil.HAProxyServers(sock, "be")
	if err != nil {
		return nil, err
	}
	out := map[string]haproxyStat{}
	for name, sv := range servers {
		out[name] = haproxyStat{status: sv["status"], weight: sv["weight"], agent: sv["agent_status"] + " " + sv["last_agt"]}
	}
	return out, nil
}

// startHAProxy runs Debian's haproxy with two servers whose agent checks
// ask agentAddr every 100 ms: "plain" without agent-send (the node's
// answer), "port" with agent-send "tcp/8080\n". It returns the stats
// socket.
func startHAProxy(t *testing.T, agentAddr string) string {
	t.Helper()
	bin, err := debpkg.Find("haproxy", "haproxy")
	if err != nil {
		t.Skipf("real HAProxy needed: %v", err)
	}
	// The servers' own address: a listener that accepts and closes.
	srv, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	go testutil.AcceptAll(srv, func(c net.Conn) { c.Close() })
	fe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	feAddr := fe.Addr().String()
	fe.Close()
	host, port, _ := net.SplitHostPort(agentAddr)
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	cfg := fmt.Sprintf(`global
    stats socket %s mode 600 level admin
defaults
    mode tcp
    timeout connect 1s
    timeout client 5s
    timeout server 5s
    # Without agent-send, HAProxy leaves the handshake's last ACK to the
    # delayed-ACK timer (it expects to send data with it), so the agent
    # sees the connection up to 200 ms late: agent-inter 100ms alone (the
    # check's timeout without "timeout check") would time out.
    timeout check 1s
frontend fe
    bind %s
    default_backend be
backend be
    balance roundrobin
    server plain %s weight 100 check inter 100ms agent-check agent-addr %s agent-port %s agent-inter 100ms
    server port %s weight 100 check inter 100ms agent-check agent-addr %s agent-port %s agent-send "tcp/8080\n" agent-inter 100ms
`, sock, feAddr, srv.Addr(), host, port, srv.Addr(), host, port)
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", cfgPath).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-db", "-f", cfgPath)
	logf, _ := os.Create(filepath.Join(dir, "haproxy.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start haproxy: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("haproxy log:\n%s", b)
		}
	})
	testutil.Eventually(t, 5*time.Second, 50*time.Millisecond, func() (bool, error) {
		_, err := haproxyServers(sock)
		return err == nil, err
	}, "haproxy stats socket %s answering", sock)
	return sock
}

// TestHAProxyParses feeds olcd's answers to Debian's HAProxy and reads
// back, through its stats socket, what HAProxy made of them: the weight
// (a percentage of the configured weight 100), the admin state (DRAIN and
// back to READY), and the per-port answer for agent-send. Skips without
// haproxy unless root (which installs it).
func TestHAProxyParses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts HAProxy")
	}
	a := NewAgent(AgentConfig{}, nil)
	report := func(node, port Target) *Report {
		node.AgentReply = Reply(node.State, node.Weight)
		port.Proto, port.Port = "tcp", 8080
		port.AgentReply = Reply(port.State, port.Weight)
		return &Report{Node: node, Ports: []Target{port}}
	}
	// The port is known from the first check on: before the daemon's
	// first tick the agent knows no port and answers tcp/8080 for the node.
	a.Publish(report(Target{State: StateReady, Weight: 1}, Target{State: StateReady, Weight: 1}))
	addr := startAgent(t, a)
	sock := startHAProxy(t, addr)
	for _, tc := range []struct {
		name       string
		node, port Target
		want       map[string]haproxyStat
	}{
		{"full weight", Target{State: StateReady, Weight: 1}, Target{State: StateReady, Weight: 1},
			map[string]haproxyStat{"plain": {status: "UP", weight: "100"}, "port": {status: "UP", weight: "100"}}},
		{"weight follows the admitted share", Target{State: StateReady, Weight: 0.75}, Target{State: StateReady, Weight: 0.42},
			map[string]haproxyStat{"plain": {status: "UP", weight: "75"}, "port": {status: "UP", weight: "42"}}},
		{"drain at the bound", Target{State: StateReady, Weight: 0.6}, Target{State: StateDrain, Weight: 0.3},
			map[string]haproxyStat{"plain": {status: "UP", weight: "60"}, "port": {status: "DRAIN (agent)", weight: "30"}}},
		{"ready again cancels the drain", Target{State: StateReady, Weight: 0.6}, Target{State: StateReady, Weight: 0.35},
			map[string]haproxyStat{"plain": {status: "UP", weight: "60"}, "port": {status: "UP", weight: "35"}}},
		{"floor: weight never 0", Target{State: StateReady, Weight: 0}, Target{State: StateReady, Weight: 0.1},
			map[string]haproxyStat{"plain": {status: "UP", weight: "1"}, "port": {status: "UP", weight: "10"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.Publish(report(tc.node, tc.port))
			var got map[string]haproxyStat
			var err error
			if testutil.WaitFor(5*time.Second, 50*time.Millisecond, func() (bool, error) {
				got, err = haproxyServers(sock)
				return err == nil && equalStats(got, tc.want), nil
			}) == nil {
				return
			}
			t.Errorf("HAProxy shows %v (err %v), want %v; olcd answered %q (node) and %+v (ports)",
				got, err, tc.want, a.Report().Node.AgentReply, a.Report().Ports)
		})
	}
	c := a.Counts()
	if c[AnswerNode] == 0 || c[AnswerPort] == 0 || c[AnswerUnknown] != 0 {
		t.Errorf("answers %v: want node answers (plain) and port answers (agent-send), nothing unknown", c)
	}
	// HAProxy's agent check connects with a delayed ACK: its agent-send
	// line comes with the handshake's last ACK and is in at accept, and
	// a check without agent-send is answered at accept once the peer is
	// known to send nothing (the first such check waits SendWait).
	total := c[AnswerNode] + c[AnswerPort]
	t.Logf("answers %v; %d of %d waited for their line", c, a.Waited(), total)
	if w := a.Waited(); 4*w > total {
		t.Errorf("%d of HAProxy's %d checks waited for their line, want nearly none", w, total)
	}
}

func equalStats(got, want map[string]haproxyStat) bool {
	for k, w := range want {
		if g := got[k]; g.status != w.status || g.weight != w.weight {
			return false
		}
	}
	return true
}
