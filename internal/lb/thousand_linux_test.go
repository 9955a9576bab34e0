//go:build linux

package lb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/olcd/olcd/internal/testutil"
)

// The 1000-connection measurement (issue "Tell the load balancer", must
// show 2): the agent listens, in this process as in the daemon, inside one
// network namespace; 1000 clients in another process (this test binary
// re-executed, clientMain) inside a second namespace reach it over a veth
// pair, so that the clients are not the agent's goroutines. Each client is
// timed from its request being complete (its connect() completed and, when
// it sends a line, the line written) to the answer's newline reaching its
// socket, both kernel times (clientMain), and from calling connect().
// A bare listener (accept, read the line if one is sent, write a constant
// line, close: a goroutine per connection, the least a Go server does) takes
// the same bursts in the same run, as the baseline: on this 2-CPU VM the
// kernel's handshakes and the client process share the CPUs with the
// server, and the baseline shows what is not the agent's.
//
// Three kinds of client, from two source addresses:
//   - silent: sends nothing (HAProxy without agent-send, but with quick
//     ACKs: HAProxy's own delayed ACK would delay the accept itself by the
//     delayed-ACK timer, 40 ms or more, before the agent can see it);
//   - haproxy: TCP_QUICKACK off before connect and the line sent at once,
//     as HAProxy's agent check with agent-send does: the line travels with
//     the handshake's last ACK and is in at accept;
//   - late: quick ACKs and the line written after connect() returns (nc,
//     a script): the line comes after the accept, from another address, so
//     the agent learns to wait for it there while the silent peer is still
//     answered at accept.

// rig is the test network (testutil.Net, named so that the client process
// can be started in its peer namespace) with a second client address.
type rig struct {
	net *testutil.Net
	// cliIP[0] is the silent and HAProxy-like clients' source (the peer
	// end's address), cliIP[1] the late clients'.
	cliIP [2]string
}

// newRig creates the network, removed when the test ends. Skips without
// root or ip(8) (the client process is started with ip netns exec).
func newRig(t testing.TB) *rig {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) (iproute2) to start the clients in their namespace")
	}
	n := testutil.NewNet(t, testutil.NetOptions{Named: true})
	second := n.PeerIP.Next()
	h, err := netlink.NewHandleAt(n.PeerNS)
	testutil.Must(t, err)
	defer h.Close()
	l, err := h.LinkByName(n.PeerIf)
	testutil.Must(t, err)
	testutil.Must(t, h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: second.AsSlice(), Mask: net.CIDRMask(n.Prefix.Bits(), 32)}}))
	return &rig{net: n, cliIP: [2]string{n.PeerIP.String(), second.String()}}
}

// listen opens a TCP listener in the node namespace (the socket keeps it).
func (r *rig) listen(t testing.TB) net.Listener {
	t.Helper()
	var ln net.Listener
	testutil.Must(t, r.net.InNode(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(r.net.NodeIP.String(), "0"))
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	return ln
}

// burst runs one client process in the client namespace.
func (r *rig) burst(t testing.TB, s clientSpec) clientResult {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(s)
	cmd := exec.Command("ip", "netns", "exec", r.net.Peer, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), clientsEnv+"="+string(spec))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("client process: %v: %s", err, stderr.String())
	}
	var res clientResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("client process output %q: %v", out.String(), err)
	}
	return res
}

// procSample is the process's goroutines and memory at one moment.
type procSample struct {
	goroutines int
	rssBytes   int64 // resident set (statm)
	heapBytes  uint64
}

var heapMetric = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

func sampleProc() procSample {
	s := procSample{goroutines: runtime.NumGoroutine()}
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			s.rssBytes = pages * int64(os.Getpagesize())
		}
	}
	metrics.Read(heapMetric)
	if heapMetric[0].Value.Kind() == metrics.KindUint64 {
		s.heapBytes = heapMetric[0].Value.Uint64()
	}
	return s
}

// peakDuring samples the process every millisecond while f runs and
// returns the largest of each figure.
func peakDuring(f func()) procSample {
	var peak procSample
	var mu sync.Mutex
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for {
			s := sampleProc()
			mu.Lock()
			peak.goroutines = max(peak.goroutines, s.goroutines)
			peak.rssBytes = max(peak.rssBytes, s.rssBytes)
			peak.heapBytes = max(peak.heapBytes, s.heapBytes)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak
}

// bareServe is the baseline: accept, read once when the clients send a
// line, write a constant line, close; a goroutine per connection.
func bareServe(ln net.Listener, read bool, line []byte) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			if read {
				var b [maxRequest]byte
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, _ = c.Read(b[:])
			}
			_, _ = c.Write(line)
			c.Close()
		}()
	}
}

// thousandRun is one run of the measurement: the agent and the bare
// listeners up in the rig, the peers learnt.
type thousandRun struct {
	r     *rig
	agent *Agent
	// agentAddr is the agent's; bareAddr[read] the baselines' (read:
	// reads the line before answering).
	agentAddr string
	bareAddr  [2]string
	// before is the process once everything listens, idle.
	before procSample
	// lat and dial collect the latencies per variant name, over the
	// rounds: from the request complete, and from connect() called
	// (clientResult).
	lat, dial map[string][]time.Duration
	// peak is the process at its largest per variant.
	peak map[string]procSample
	// failed counts clients without a right answer, per variant.
	failed map[string]int
}

// clientKind is one kind of client (see the top of the file).
type clientKind struct {
	name       string
	req        string
	delayedACK bool
	source     int // index of rig.cliIP
}

var clientKinds = []clientKind{
	{"silent", "", false, 0},
	{"haproxy", "tcp/8080\n", true, 0},
	{"late", "tcp/8080\n", false, 1},
}

func newThousandRun(t testing.TB) *thousandRun {
	r := newRig(t)
	a := NewAgent(AgentConfig{}, nil)
	a.Publish(testReport())
	aln := r.listen(t)
	serveUntilCleanup(t, a, aln)
	run := &thousandRun{r: r, agent: a, agentAddr: aln.Addr().String(),
		lat: map[string][]time.Duration{}, dial: map[string][]time.Duration{}, peak: map[string]procSample{}, failed: map[string]int{}}
	for i, read := range []bool{false, true} {
		ln := r.listen(t)
		go bareServe(ln, read, []byte("up drain 30%\n"))
		run.bareAddr[i] = ln.Addr().String()
	}
	// A burst of every kind on each server first: the agent learns its
	// peers (the steady state of HAProxy checking every agent-inter), and
	// one-time costs stay out of the figures (the first burst grows the
	// process's file table, which in a multi-threaded process waits for
	// an RCU grace period: measured 30-50 ms on the first round without
	// this).
	for _, k := range clientKinds {
		run.burstOf(t, "agent", k.name, 1000, false)
		run.burstOf(t, "bare", k.name, 1000, false)
	}
	// The half-closed lingerers are closed SendWait after their answer:
	// the queue empties (the last one leaves within SendWait).
	testutil.Eventually(t, time.Second, time.Millisecond, func() (bool, error) { return len(a.linger) == 0, nil },
		"the lingering connections closed")
	runtime.GC()
	run.before = sampleProc()
	return run
}

// burstOf sends n clients of kind to server ("agent" or "bare") and, when
// record, keeps their figures.
func (run *thousandRun) burstOf(t testing.TB, server, kind string, n int, record bool) {
	t.Helper()
	i := slices.IndexFunc(clientKinds, func(k clientKind) bool { return k.name == kind })
	k := clientKinds[i]
	s := clientSpec{N: n, Req: k.req, DelayedACK: k.delayedACK, Source: run.r.cliIP[k.source]}
	switch {
	case server == "agent" && k.req == "":
		s.Addr, s.Want = run.agentAddr, []string{"up ready 80%\n"}
	case server == "agent" && k.delayedACK:
		s.Addr, s.Want = run.agentAddr, []string{"up drain 30%\n"}
	case server == "agent":
		// A line later than SendWait gets the node's answer.
		s.Addr, s.Want = run.agentAddr, []string{"up drain 30%\n", "up ready 80%\n"}
	case k.req == "":
		s.Addr, s.Want = run.bareAddr[0], []string{"up drain 30%\n"}
	default:
		s.Addr, s.Want = run.bareAddr[1], []string{"up drain 30%\n"}
	}
	var res clientResult
	peak := peakDuring(func() { res = run.r.burst(t, s) })
	if !record {
		return
	}
	name := server + "/" + kind
	for i, ns := range res.LatencyNs {
		run.lat[name] = append(run.lat[name], time.Duration(ns))
		run.dial[name] = append(run.dial[name], time.Duration(res.DialNs[i]))
	}
	run.failed[name] += res.Failed
	if res.Failed > 0 {
		t.Errorf("%s: %d of %d clients without the right answer: %v", name, res.Failed, n, res.Errors)
	}
	p := run.peak[name]
	p.goroutines, p.rssBytes, p.heapBytes = max(p.goroutines, peak.goroutines), max(p.rssBytes, peak.rssBytes), max(p.heapBytes, peak.heapBytes)
	run.peak[name] = p
}

// round is one burst of 1000 of every kind on each server, the agent and
// the baseline alternating.
func (run *thousandRun) round(t testing.TB) {
	for _, k := range clientKinds {
		run.burstOf(t, "agent", k.name, 1000, true)
		run.burstOf(t, "bare", k.name, 1000, true)
	}
}

// quantiles returns p50, p99 and max of d (sorted in place).
func quantiles(d []time.Duration) (p50, p99, mx time.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*99/100], d[len(d)-1]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// variantNames lists the variants in report order.
func variantNames() []string {
	var out []string
	for _, k := range clientKinds {
		out = append(out, "agent/"+k.name, "bare/"+k.name)
	}
	return out
}

// TestAgentThousandNetns is one round of the measurement with generous
// bounds (every client answered right; the connections waiting for their
// line never above MaxConns; goroutines and memory back near where they
// were; p99 under 1 s, far above the goal, so that a loaded CI machine does
// not fail it): the figures are logged, and BenchmarkAgentThousand reports
// them over several rounds.
func TestAgentThousandNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("1000-connection bursts across namespaces")
	}
	run := newThousandRun(t)
	run.round(t)
	for _, name := range variantNames() {
		p50, p99, mx := quantiles(run.lat[name])
		d50, d99, dmx := quantiles(run.dial[name])
		pk := run.peak[name]
		t.Logf("%-14s request to answer p50 %6.2f ms p99 %6.2f ms max %6.2f ms | connect() to answer p50 %6.2f p99 %6.2f max %6.2f ms | at the peak: %4d goroutines, RSS %+5.1f MiB, heap %+5.1f MiB",
			name, ms(p50), ms(p99), ms(mx), ms(d50), ms(d99), ms(dmx), pk.goroutines, float64(pk.rssBytes-run.before.rssBytes)/(1<<20), float64(int64(pk.heapBytes)-int64(run.before.heapBytes))/(1<<20))
		if p99 > time.Second {
			t.Errorf("%s: p99 %v, want well under 1 s", name, p99)
		}
	}
	a := run.agent
	if p := a.Peak(); p > a.cfg.MaxConns {
		t.Errorf("peak %d connections waiting for their line, want at most MaxConns %d", p, a.cfg.MaxConns)
	}
	for _, k := range clientKinds {
		if g := run.peak["agent/"+k.name].goroutines; g > run.before.goroutines+a.cfg.MaxConns+16 {
			t.Errorf("agent/%s: %d goroutines at the peak, want at most %d + MaxConns", k.name, g, run.before.goroutines)
		}
	}
	// Every connection is answered and closed: the lingerers after
	// SendWait, the waiting ones after theirs.
	var after procSample
	_ = testutil.WaitFor(5*time.Second, 10*time.Millisecond, func() (bool, error) { // the check below reports a miss
		after = sampleProc()
		return after.goroutines <= run.before.goroutines+2, nil
	})
	t.Logf("before: %d goroutines, RSS %.1f MiB, heap %.1f MiB; after: %d goroutines, RSS %.1f MiB, heap %.1f MiB; agent: %d waited for their line, peak %d waiting (MaxConns %d), answers %v",
		run.before.goroutines, float64(run.before.rssBytes)/(1<<20), float64(run.before.heapBytes)/(1<<20),
		after.goroutines, float64(after.rssBytes)/(1<<20), float64(after.heapBytes)/(1<<20), a.Waited(), a.Peak(), a.cfg.MaxConns, a.Counts())
	if after.goroutines > run.before.goroutines+2 {
		t.Errorf("%d goroutines 5 s after the bursts, %d before", after.goroutines, run.before.goroutines)
	}
	if grew := after.rssBytes - run.before.rssBytes; grew > 64<<20 {
		t.Errorf("RSS grew %.1f MiB over the bursts, want a bounded few", float64(grew)/(1<<20))
	}
}

// BenchmarkAgentThousand reports, over b.N rounds (-benchtime=8x), each
// variant's request-to-answer p50, p99 and max in ms over all rounds, the
// median round's p99, and connect()-to-answer p99, for the agent and the
// bare baseline; each round's p99s are logged. Root only.
//
//	flock /tmp/olcd-heavy.lock go test -run '^$' -bench AgentThousand -benchtime 8x ./internal/lb
func BenchmarkAgentThousand(b *testing.B) {
	run := newThousandRun(b)
	var rounds atomic.Int64
	perRound := map[string][]time.Duration{}
	for b.Loop() {
		from := map[string]int{}
		for name, l := range run.lat {
			from[name] = len(l)
		}
		run.round(b)
		rounds.Add(1)
		var line []string
		for _, name := range variantNames() {
			_, p99, _ := quantiles(slices.Clone(run.lat[name][from[name]:]))
			perRound[name] = append(perRound[name], p99)
			line = append(line, fmt.Sprintf("%s %.1f", name, ms(p99)))
		}
		b.Logf("round %d, p99 ms: %s", rounds.Load(), strings.Join(line, ", "))
	}
	for _, name := range variantNames() {
		p50, p99, mx := quantiles(run.lat[name])
		_, d99, _ := quantiles(run.dial[name])
		unit := strings.ReplaceAll(name, "/", "-")
		b.ReportMetric(ms(p50), unit+"-p50-ms")
		b.ReportMetric(ms(p99), unit+"-p99-ms")
		b.ReportMetric(ms(mx), unit+"-max-ms")
		b.ReportMetric(ms(d99), unit+"-connect-p99-ms")
		// The median round's p99: one round hit by another process's
		// burst of CPU sets the pooled p99 on this shared VM.
		mid, _, _ := quantiles(perRound[name])
		b.ReportMetric(ms(mid), unit+"-p99-median-round-ms")
	}
	b.ReportMetric(float64(run.agent.Peak()), "agent-waiting-peak")
	b.Logf("%d rounds of 1000 connections per variant; agent answers %v, %d waited for their line", rounds.Load(), run.agent.Counts(), run.agent.Waited())
}
