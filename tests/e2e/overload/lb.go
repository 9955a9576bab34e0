package overload

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/olcd/olcd/internal/lb"
	"github.com/olcd/olcd/internal/testutil"
)

// The load-balancer test (TestOverloadLB): two backend nodes behind
// Debian's HAProxy, each a network namespace with its backend in its own
// cgroup and its own olcd; HAProxy and the clients in a third namespace.
//
//	lb netns: attacker ──► HAProxy 127.0.0.1:18000 (roundrobin)
//	              │ veth                      │ veth
//	node A netns: backend (cgroup, quota Q)   node B netns: backend (quota Q, then Q/2)
//	              olcd (TC ingress, agent)                  olcd (TC ingress, agent)
//
// Each node reuses the overload harness (Harness with backendNetns set):
// its backend, cgroup and calibration, its olcd config and launcher
// (renderConfig, launchOlcd); a run its attacker (startAttacker) and phase
// summary (phaseResults).

// LB test ports: HAProxy's frontend in the lb namespace, olcd's metrics
// and agent on each node.
const (
	lbFrontendPort = 18000
	lbMetricsPort  = 9477
	lbAgentPort    = 9478
)

// LBVariant is what protects the nodes in a run.
type LBVariant string

// The three variants of the load-balancer test.
const (
	// LBNone: HAProxy alone.
	LBNone LBVariant = "none"
	// LBOlcd: olcd enforcing on both nodes; HAProxy knows nothing of it.
	LBOlcd LBVariant = "olcd"
	// LBAgent: olcd enforcing on both nodes and answering HAProxy's agent
	// checks (weight and drain).
	LBAgent LBVariant = "olcd-agent"
)

// LBCase is how HAProxy reaches the nodes in a run.
type LBCase struct {
	// Name labels the case: its runs go to OutDir/<Name>/lb-<variant>.
	Name string
	// ServerKeepAlive makes HAProxy keep its connections to the nodes
	// open and share them among clients (http-reuse always, retrying a
	// request that a reused connection reset before any answer:
	// retry-on conn-failure empty-response), the nodes' backends keep
	// them, and olcd's request gate is on for the work port (issue 26):
	// the nodes then see few new connections, and their new work arrives
	// as request starts on HAProxy's pool.
	ServerKeepAlive bool
}

// The two cases of the load-balancer test: HAProxy opening a connection
// per request, and HAProxy's shared pool of keep-alive connections.
var (
	LBConnPerRequest  = LBCase{Name: "connection-per-request"}
	LBServerKeepAlive = LBCase{Name: "server-keep-alive", ServerKeepAlive: true}
)

// LBOptions configure an LBHarness. Zero values take the defaults in
// brackets.
type LBOptions struct {
	// Olcd, Self and OutDir as in Options; HAProxy is the haproxy binary.
	Olcd, Self, HAProxy, OutDir string
	// Work, SLO and Timeout as in Options [5ms, 200ms, 1s].
	Work, SLO, Timeout time.Duration
	// Quota is each node's CPU quota [0.5: two nodes leave the clients and
	// HAProxy a CPU of a 2-CPU machine].
	Quota float64
	// Load is the offered load as a multiple of one node's C [1.6].
	Load float64
	// Before and After are the phases before and after node B's quota is
	// halved [10s, 25s].
	Before, After time.Duration
	// Progress receives progress lines (nil: silent).
	Progress io.Writer
	// ResponseTarget is the nodes' controller.response_target ["auto",
	// haproxy.yaml's, olcd's default: each port's law on its measured
	// capacity, the default guards beside it; another value is a
	// comparison]. The nodes are CFS-quota cgroups: while throttled their
	// p95 holds the throttle gap, which the law's standing queue (a
	// minimum over 100 ms) does not read as a queue.
	ResponseTarget string
}

// defaults fills in the zero options: those LBOptions shares with Options
// take the overload harness's defaults (Options.defaults).
func (o *LBOptions) defaults() {
	if o.Quota == 0 {
		o.Quota = 0.5
	}
	n := o.nodeOptions("")
	o.Work, o.SLO, o.Timeout, o.Progress = n.Work, n.SLO, n.Timeout, n.Progress
	if o.ResponseTarget == "" {
		o.ResponseTarget = "auto"
	}
	if o.Load == 0 {
		o.Load = 1.6
	}
	if o.Before == 0 {
		o.Before = 10 * time.Second
	}
	if o.After == 0 {
		o.After = 25 * time.Second
	}
}

// nodeOptions are the overload harness's options of a node whose records
// go to outDir, defaults filled in.
func (o *LBOptions) nodeOptions(outDir string) Options {
	n := Options{Olcd: o.Olcd, Self: o.Self, OutDir: outDir, Work: o.Work, SLO: o.SLO, Timeout: o.Timeout, Quota: o.Quota, Progress: o.Progress}
	n.defaults()
	return n
}

// LBHarness owns the three namespaces, the nodes' cgroups and processes.
type LBHarness struct {
	opt   LBOptions
	lock  *os.File
	lbNS  string
	nodes []*lbNode

	// CalA is node A's calibration at the full quota (C_A; node B, on the
	// same machine with the same quota, is taken to have the same C);
	// CalBHalved node B's at half of it (C_B').
	CalA, CalBHalved *Calibration
}

// lbNode is one backend node.
type lbNode struct {
	name string
	ns   string
	ip   netip.Addr
	dev  string // the node's veth end, olcd's interface
	h    *Harness
	// socket is the admin socket of the olcd started last.
	socket string
	// responseTarget is LBOptions.ResponseTarget.
	responseTarget string
}

// NewLB checks the prerequisites, takes the host lock and builds the lb
// namespace and the two nodes.
func NewLB(ctx context.Context, opt LBOptions) (*LBHarness, error) {
	opt.defaults()
	lock, err := takeHost(ctx, "the load-balancer test needs root: namespaces, veth pairs, cgroups, BPF",
		[]string{"ip", "nsenter"}, "iproute2 util-linux", opt.OutDir, opt.Olcd, opt.Self, opt.HAProxy)
	if err != nil {
		return nil, err
	}
	l := &LBHarness{opt: opt, lock: lock, lbNS: namePrefix + "-" + newID()}
	if err := l.build(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// build creates the lb namespace and the nodes: a /30 each of a free
// documentation range, the lb end .1 and the node end .2 of the first, .5
// and .6 of the second.
func (l *LBHarness) build() error {
	first, _, err := pickRange()
	if err != nil {
		return err
	}
	for _, s := range [][]string{
		{"ip", "netns", "add", l.lbNS},
		{"ip", "-n", l.lbNS, "link", "set", "lo", "up"},
		{"ip", "netns", "exec", l.lbNS, "sysctl", "-q", "-w", "net.ipv4.ip_local_port_range=1024 65000"},
		{"ip", "netns", "exec", l.lbNS, "sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1"},
	} {
		if err := run(s...); err != nil {
			return err
		}
	}
	base := first.Prev() // x.0
	for i, name := range []string{"a", "b"} {
		lbIP := addrPlus(base, 4*i+1)
		nodeIP := addrPlus(base, 4*i+2)
		id := newID()
		n := &lbNode{name: name, ns: namePrefix + "-" + id, ip: nodeIP, dev: namePrefix + id + "c", responseTarget: l.opt.ResponseTarget}
		l.nodes = append(l.nodes, n)
		lbIf := namePrefix + id + "h"
		for _, s := range [][]string{
			{"ip", "netns", "add", n.ns},
			{"ip", "-n", l.lbNS, "link", "add", lbIf, "type", "veth", "peer", "name", n.dev, "netns", n.ns},
			{"ip", "-n", l.lbNS, "addr", "add", lbIP.String() + "/30", "dev", lbIf},
			{"ip", "-n", l.lbNS, "link", "set", lbIf, "up"},
			{"ip", "-n", n.ns, "addr", "add", nodeIP.String() + "/30", "dev", n.dev},
			{"ip", "-n", n.ns, "link", "set", n.dev, "up"},
			{"ip", "-n", n.ns, "link", "set", "lo", "up"},
		} {
			if err := run(s...); err != nil {
				return err
			}
		}
		cg, err := newCgroup(namePrefix + "-" + id)
		if err != nil {
			return err
		}
		hopt := l.opt.nodeOptions(filepath.Join(l.opt.OutDir, "node-"+name))
		if err := os.MkdirAll(hopt.OutDir, 0o755); err != nil {
			return err
		}
		n.h = &Harness{opt: hopt, id: id, cg: cg, backendNetns: n.ns,
			net: &Net{Netns: l.lbNS, ClientIf: lbIf, HostIP: nodeIP, ClientIP: lbIP}}
	}
	return nil
}

func addrPlus(a netip.Addr, n int) netip.Addr {
	for range n {
		a = a.Next()
	}
	return a
}

// Close stops everything and removes the namespaces and cgroups; safe
// after a failed NewLB and more than once.
func (l *LBHarness) Close() {
	for _, n := range l.nodes {
		if n.h != nil {
			n.h.stopBackend()
			if n.h.cg != nil {
				n.h.cg.Close()
			}
		}
		_ = run("ip", "netns", "del", n.ns)
	}
	l.nodes = nil
	if l.lbNS != "" {
		_ = run("ip", "netns", "del", l.lbNS)
		l.lbNS = ""
	}
	if l.lock != nil {
		l.lock.Close()
		l.lock = nil
	}
}

// Capacity is C_A + C_B': what the two nodes can serve once B's quota is
// halved.
func (l *LBHarness) Capacity() float64 { return l.CalA.CapacityRPS + l.CalBHalved.CapacityRPS }

// CapacityAtRun is C_A + C_B' as the nodes could serve it during r's
// halved phase, the overload suite's CapacityAtRun per node: each node's
// capacity scaled by its CPU per request at its calibration's knee over
// its CPU per 2xx response in the phase, when the run was slower (at most
// MaxSlowdown; a faster run keeps the calibrated figure). slowdown holds
// each node's, ok is false when a node was slower than MaxSlowdown or
// nothing was measured (rps is then C_A + C_B').
func (l *LBHarness) CapacityAtRun(r *LBRunResult) (rps float64, slowdown []float64, ok bool) {
	p := r.Phase(LBPhaseHalved)
	measured := len(p.Nodes) == len(l.nodes)
	ok = measured
	for i, cal := range []*Calibration{l.CalA, l.CalBHalved} {
		if !measured {
			slowdown = append(slowdown, 0)
			rps += cal.CapacityRPS
			continue
		}
		c, slow, nodeOK := cal.capacityAt(p.Nodes[i].CPUBusy, p.Nodes[i].ResponsesPerS)
		ok = ok && nodeOK
		slowdown = append(slowdown, slow)
		rps += c
	}
	return rps, slowdown, ok
}

// Calibrate finds C_A (node A, full quota, through no load balancer) and
// C_B' (node B, half quota).
func (l *LBHarness) Calibrate(ctx context.Context) error {
	a, b := l.nodes[0], l.nodes[1]
	cal, err := a.h.calibrate(ctx, "calibration-a", l.opt.Quota, calibrationSteps)
	if err != nil {
		return err
	}
	l.CalA = cal
	b.h.iterations = a.h.iterations // the same work per request on both
	if l.CalBHalved, err = b.h.calibrate(ctx, "calibration-b-halved", l.opt.Quota/2, halvedSteps); err != nil {
		return err
	}
	fmt.Fprintf(l.opt.Progress, "lb: C_A = %.0f req/s (threshold %.3f), C_B' = %.0f req/s with the quota halved; C_A + C_B' = %.0f req/s\n",
		l.CalA.CapacityRPS, l.CalA.Threshold, l.CalBHalved.CapacityRPS, l.Capacity())
	return nil
}

// startOlcd starts olcd in the node's namespace and waits until it has
// attached and ticked twice. Its config is the recommended one behind
// HAProxy (ConfigHAProxy) enforcing, with the node's veth,
// work and health ports (the work port's request gate on with
// requestGate), metrics on the node's address and the agent there
// (agent) or off.
func (n *lbNode) startOlcd(ctx context.Context, dir string, agent, requestGate bool) (*olcdProc, error) {
	cfg := olcdConfigData{By: "the load-balancer test", Base: ConfigHAProxy, Mode: "enforce", Iface: n.dev, Interval: n.h.opt.OlcdInterval,
		Port: WorkPort, HealthPort: HealthPort,
		Metrics: net.JoinHostPort(n.ip.String(), strconv.Itoa(lbMetricsPort)), RequestGate: requestGate}
	if n.responseTarget != "" && n.responseTarget != "auto" {
		cfg.Controller = []string{"response_target: " + n.responseTarget}
	}
	if agent {
		cfg.Agent = net.JoinHostPort(n.ip.String(), strconv.Itoa(lbAgentPort))
	}
	o, err := launchOlcd(ctx, n.h.opt.Olcd, dir, n.name, n.ns, cfg)
	if err != nil {
		return nil, err
	}
	n.socket = o.socket
	return o, nil
}

// lbReport fetches GET /v1/lb through olcd's admin socket.
func lbReport(ctx context.Context, socket string) (*lb.Report, error) {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://olcd/v1/lb", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/lb: %s", resp.Status)
	}
	var r lb.Report
	return &r, json.NewDecoder(resp.Body).Decode(&r)
}

// haproxyConfig is HAProxy's config: round robin over the two nodes with
// HTTP health checks on the health port (olcd exempts it) and, with the
// agent, olcd's agent answering for the work port. The timeouts and
// retries are those of a common production config: a SYN olcd drops
// costs the request HAProxy's connect timeout (5 s, longer than the
// clients wait), not a quick redispatch. abortonclose gives up the
// connect when the client does: without it HAProxy keeps retransmitting
// the SYN (1 s, 3 s) after the client has left, the node serves the
// request when a retransmit passes, and a drop probability p sheds only
// p³ of the work while it delays the rest past every client's patience
// (measured: node B at p 0.49 still CPU-bound, its weight stuck at 50).
// With LBCase.ServerKeepAlive the server connections are a shared pool
// (http-reuse always), and a request that a node's request gate reset on
// a reused connection, before any byte of answer, is sent again, to the
// other node when redispatch picks it (retry-on empty-response: HAProxy's
// default retries only failed connects).
var haproxyConfig = template.Must(template.New("haproxy.cfg").Parse(`# written by the load-balancer test
global
    maxconn 4000
    stats socket {{.Socket}} mode 600 level admin
defaults
    mode http
    timeout connect 5s
    timeout client 10s
    timeout server 10s
    timeout check 1s
    retries 3
    option redispatch
    option abortonclose
frontend fe
    bind 127.0.0.1:{{.Port}}
    default_backend be
backend be
    balance roundrobin
{{- if .KeepAlive}}
    http-reuse always
    retry-on conn-failure empty-response
{{- else}}
    http-reuse never
{{- end}}
    option httpchk GET /health
{{- range .Servers}}
    server {{.Name}} {{.Addr}} weight 100 check port {{$.HealthPort}} inter 1s{{if $.Agent}} agent-check agent-port {{$.AgentPort}} agent-inter 1s agent-send "tcp/{{$.WorkPort}}\n"{{end}}
{{- end}}
`))

// haproxyProc is a running HAProxy.
type haproxyProc struct {
	cmd    *exec.Cmd
	done   chan error
	socket string
	log    string
}

// startHAProxy starts HAProxy in the lb namespace, its server
// connections kept alive with keepAlive (LBCase.ServerKeepAlive), and
// waits until both servers are up.
func (l *LBHarness) startHAProxy(dir string, agent, keepAlive bool) (*haproxyProc, error) {
	p := &haproxyProc{socket: filepath.Join(dir, "haproxy.sock"), log: filepath.Join(dir, "haproxy.log")}
	_ = os.Remove(p.socket)
	type server struct{ Name, Addr string }
	var servers []server
	for _, n := range l.nodes {
		servers = append(servers, server{n.name, net.JoinHostPort(n.ip.String(), strconv.Itoa(WorkPort))})
	}
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	f, err := os.Create(cfgPath)
	if err != nil {
		return nil, err
	}
	err = haproxyConfig.Execute(f, map[string]any{"Socket": p.socket, "Port": lbFrontendPort, "Servers": servers,
		"HealthPort": HealthPort, "Agent": agent, "AgentPort": lbAgentPort, "WorkPort": WorkPort, "KeepAlive": keepAlive})
	f.Close()
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command(l.opt.HAProxy, "-c", "-f", cfgPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("haproxy -c %s: %w\n%s", cfgPath, err, out)
	}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command("nsenter", "--net=/run/netns/"+l.lbNS, l.opt.HAProxy, "-db", "-f", cfgPath)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start haproxy: %w", err)
	}
	p.done = make(chan error, 1)
	go func() { p.done <- p.cmd.Wait(); logf.Close() }()
	var (
		st     map[string]haproxyServer
		gone   bool // haproxy exited, with exitEr
		exitEr error
	)
	err = testutil.WaitFor(15*time.Second, 200*time.Millisecond, func() (bool, error) {
		var err error
		st, err = p.servers()
		if err == nil && strings.HasPrefix(st["a"].status, "UP") && strings.HasPrefix(st["b"].status, "UP") {
			return true, nil
		}
		select {
		case exitEr = <-p.done:
			gone = true
			return true, nil
		default:
		}
		return false, err
	})
	switch {
	case gone:
		b, _ := os.ReadFile(p.log)
		return nil, fmt.Errorf("haproxy exited at start: %w\n%s", exitEr, b)
	case err != nil:
		p.stop()
		return nil, fmt.Errorf("haproxy: servers not up: %v %w (see %s)", st, err, p.log)
	}
	return p, nil
}

// stop ends HAProxy with SIGTERM and SIGKILL after 5 s.
func (p *haproxyProc) stop() { terminate(p.cmd, p.done, 5*time.Second) }

// haproxyServer is one server's line of `show stat`.
type haproxyServer struct {
	status string // "UP", "DRAIN (agent)", "DOWN", ...
	weight float64
	stot   uint64 // sessions since start
	ok     uint64 // 2xx responses since start (hrsp_2xx)
}

// servers reads `show stat` for the backend's servers.
func (p *haproxyProc) servers() (map[string]haproxyServer, error) {
	servers, err := testutil.HAProxyServers(p.socket, "be")
	if err != nil {
		return nil, err
	}
	out := map[string]haproxyServer{}
	for name, sv := range servers {
		if _, ok := sv["stot"]; !ok {
			continue
		}
		w, _ := strconv.ParseFloat(sv["weight"], 64)
		n, _ := strconv.ParseUint(sv["stot"], 10, 64)
		ok, _ := strconv.ParseUint(sv["hrsp_2xx"], 10, 64)
		out[name] = haproxyServer{status: sv["status"], weight: w, stot: n, ok: ok}
	}
	return out, nil
}

// LBNodePhase is one node over one phase.
type LBNodePhase struct {
	// Node is "a" or "b".
	Node string `json:"node"`
	// SessionsPerS is HAProxy's sessions to the node per second.
	SessionsPerS float64 `json:"sessions_per_s"`
	// Share is the node's share of HAProxy's sessions.
	Share float64 `json:"share"`
	// MeanWeight is HAProxy's weight of the node, mean of the samples (of
	// the configured 100).
	MeanWeight float64 `json:"mean_weight"`
	// DrainShare is the share of samples HAProxy showed the node draining.
	DrainShare float64 `json:"drain_share"`
	// CPUBusy is the node's cgroup CPU as a share of its quota.
	CPUBusy float64 `json:"cpu_busy"`
	// SYNDropRatio and MeanP are olcd's, 0 without olcd.
	SYNDropRatio float64 `json:"syn_drop_ratio"`
	MeanP        float64 `json:"mean_drop_probability"`
	// ResponsesPerS is the node's 2xx responses per second (HAProxy's
	// hrsp_2xx, late ones included): with CPUBusy, its CPU per request.
	ResponsesPerS float64 `json:"responses_per_s"`
}

// LBPhase is one phase of a run: the clients' view and each node's.
type LBPhase struct {
	PhaseResult
	Nodes []LBNodePhase `json:"nodes"`
}

// LBRunResult is one run.
type LBRunResult struct {
	// Case is the LBCase's name.
	Case    string    `json:"case"`
	Variant LBVariant `json:"variant"`
	Phases  []LBPhase `json:"phases"`
	// Dir holds the run's logs and configs.
	Dir string `json:"dir"`
}

// Phase returns the phase named name.
func (r *LBRunResult) Phase(name string) LBPhase {
	for _, p := range r.Phases {
		if p.Name == name {
			return p
		}
	}
	return LBPhase{}
}

// The phase names of a run.
const (
	LBPhaseBefore = "1.6x"
	LBPhaseHalved = "1.6x-b-halved"
)

// haproxySample is HAProxy's view at one moment.
type haproxySample struct {
	t       time.Duration
	servers map[string]haproxyServer
}

// Run plays the scenario of case c under v: offered Load × C_A through
// HAProxy for Before, then node B's quota halved for After. Every run
// measures against the one calibration (Calibrate): the nodes' backends
// are the same in both cases, only HAProxy's way to them differs.
func (l *LBHarness) Run(ctx context.Context, c LBCase, v LBVariant) (*LBRunResult, error) {
	if l.CalA == nil {
		return nil, errors.New("lb run: calibrate first")
	}
	dir := filepath.Join(l.opt.OutDir, c.Name, "lb-"+string(v))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, n := range l.nodes {
		n.h.keepAlive = c.ServerKeepAlive
		defer func() { n.h.keepAlive = false }()
		if err := n.h.startBackend(""); err != nil {
			return nil, err
		}
		defer n.h.stopBackend()
	}
	for _, n := range l.nodes {
		n.h.waitIdle(5 * time.Second)
	}
	ods := make([]*olcdProc, len(l.nodes))
	if v != LBNone {
		for i, n := range l.nodes {
			od, err := n.startOlcd(ctx, dir, v == LBAgent, c.ServerKeepAlive)
			if err != nil {
				return nil, err
			}
			defer od.stop()
			ods[i] = od
		}
	}
	hp, err := l.startHAProxy(dir, v == LBAgent, c.ServerKeepAlive)
	if err != nil {
		return nil, err
	}
	defer hp.stop()

	rate := l.opt.Load * l.CalA.CapacityRPS
	phases := []Phase{{Name: LBPhaseBefore, Rate: rate, Duration: l.opt.Before}, {Name: LBPhaseHalved, Rate: rate, Duration: l.opt.After}}
	cfg := AttackConfig{Target: fmt.Sprintf("http://127.0.0.1:%d/", lbFrontendPort), Timeout: l.opt.Timeout, Phases: phases}
	rec := &records{phases: phases}
	a, err := startAttacker(ctx, dir, cfg, rec, func(cfgPath string) *exec.Cmd {
		return exec.Command("nsenter", "--net=/run/netns/"+l.lbNS, l.opt.Self, "attack", "-config", cfgPath)
	})
	if err != nil {
		return nil, err
	}

	label := "lb/" + string(v)
	nodeSamples := make([][]sample, len(l.nodes))
	var hps []haproxySample
	quota := []float64{l.opt.Quota, l.opt.Quota}
	halved := false
	take := func() {
		t := a.since()
		for i, n := range l.nodes {
			s := sample{t: t, quota: quota[i]}
			s.usage, _ = n.h.cg.Usage()
			if od := ods[i]; od != nil {
				if st, err := od.status(ctx); err == nil {
					for _, p := range st.Ports {
						if p.Port == WorkPort {
							s.olcd, s.p, s.newConns, s.dropped = true, p.FirstP(), p.Totals.NewConns, p.Totals.Dropped
						}
					}
				}
			}
			nodeSamples[i] = append(nodeSamples[i], s)
		}
		if st, err := hp.servers(); err == nil {
			hps = append(hps, haproxySample{t: t, servers: st})
		}
	}
	err = a.follow(ctx, take, func(el time.Duration) error {
		if !halved && el >= l.opt.Before {
			quota[1] = l.opt.Quota / 2
			if err := l.nodes[1].h.cg.SetQuota(quota[1]); err != nil {
				return err
			}
			halved = true
			fmt.Fprintf(l.opt.Progress, "  [%s] %4.0fs node b's quota halved to %.2g CPU\n", label, el.Seconds(), quota[1])
		}
		take()
		if line, ok := a.progress(el, l.opt.SLO); ok {
			if len(hps) > 0 {
				last := hps[len(hps)-1].servers
				line += fmt.Sprintf("  haproxy a: %s w%.0f, b: %s w%.0f", last["a"].status, last["a"].weight, last["b"].status, last["b"].weight)
			}
			fmt.Fprintf(l.opt.Progress, "  [%s] %4.0fs %s\n", label, el.Seconds(), line)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := writeLBSeries(filepath.Join(dir, "timeseries.csv"), l.nodes, nodeSamples, hps); err != nil {
		return nil, err
	}
	res := &LBRunResult{Case: c.Name, Variant: v, Dir: dir}
	clients := phaseResults(rec, l.opt.SLO, VariantNone, "-settled")
	var from time.Duration
	for j, ph := range phases {
		to := from + ph.Duration
		lp := LBPhase{PhaseResult: clients[j]}
		var total uint64
		sessions := make([]uint64, len(l.nodes))
		oks := make([]uint64, len(l.nodes))
		for i, n := range l.nodes {
			a, b := haproxyAt(hps, from), haproxyAt(hps, to)
			sessions[i] = b[n.name].stot - min(a[n.name].stot, b[n.name].stot)
			oks[i] = b[n.name].ok - min(a[n.name].ok, b[n.name].ok)
			total += sessions[i]
		}
		for i, n := range l.nodes {
			nr := phaseResult(&records{samples: nodeSamples[i]}, ph.Name, from, to, l.opt.SLO, VariantEnforce)
			np := LBNodePhase{Node: n.name, CPUBusy: nr.CPUBusy, SYNDropRatio: nr.SYNDropRatio, MeanP: nr.MeanP,
				SessionsPerS: float64(sessions[i]) / ph.Duration.Seconds(), ResponsesPerS: float64(oks[i]) / ph.Duration.Seconds()}
			if total > 0 {
				np.Share = float64(sessions[i]) / float64(total)
			}
			var wsum float64
			var nw, ndrain int
			for _, s := range hps {
				if s.t < from || s.t >= to {
					continue
				}
				sv := s.servers[n.name]
				wsum += sv.weight
				nw++
				if strings.HasPrefix(sv.status, "DRAIN") {
					ndrain++
				}
			}
			if nw > 0 {
				np.MeanWeight, np.DrainShare = wsum/float64(nw), float64(ndrain)/float64(nw)
			}
			lp.Nodes = append(lp.Nodes, np)
		}
		res.Phases = append(res.Phases, lp)
		from = to
	}
	if v == LBAgent {
		// What olcd told HAProxy at the end, for the record.
		for _, n := range l.nodes {
			if r, err := lbReport(ctx, n.socket); err == nil {
				b, _ := json.MarshalIndent(r, "", "  ")
				_ = os.WriteFile(filepath.Join(dir, "v1-lb-"+n.name+".json"), b, 0o644)
			}
		}
	}
	return res, nil
}

// haproxyAt returns HAProxy's servers at the sample nearest to t.
func haproxyAt(s []haproxySample, t time.Duration) map[string]haproxyServer {
	if len(s) == 0 {
		return nil
	}
	best := s[0]
	for _, x := range s[1:] {
		if absDur(x.t-t) < absDur(best.t-t) {
			best = x
		}
	}
	return best.servers
}

// writeLBSeries writes one line per sample: time, and per node HAProxy's
// weight and status, olcd's p and the cgroup's CPU since the previous
// sample (share of the quota).
func writeLBSeries(path string, nodes []*lbNode, ns [][]sample, hps []haproxySample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	head := []string{"t_s"}
	for _, n := range nodes {
		head = append(head, n.name+"_weight", n.name+"_status", n.name+"_p", n.name+"_cpu")
	}
	_ = w.Write(head)
	for i := 1; i < len(ns[0]); i++ {
		row := []string{strconv.FormatFloat(ns[0][i].t.Seconds(), 'f', 2, 64)}
		hp := haproxyAt(hps, ns[0][i].t)
		for j, n := range nodes {
			if i >= len(ns[j]) {
				row = append(row, "", "", "", "")
				continue
			}
			busy, _ := busyBetween(ns[j][i-1], ns[j][i])
			row = append(row, strconv.FormatFloat(hp[n.name].weight, 'f', 0, 64), hp[n.name].status,
				strconv.FormatFloat(ns[j][i].p, 'f', 3, 64), strconv.FormatFloat(busy, 'f', 3, 64))
		}
		_ = w.Write(row)
	}
	w.Flush()
	return w.Error()
}
