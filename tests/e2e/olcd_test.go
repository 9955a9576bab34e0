package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/vishvananda/netlink"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/testutil"
	"github.com/olcd/olcd/tests/e2e/overload"
)

// Thresholds for cpu_busy that decide the overload state without depending
// on the machine's load: a fraction can never exceed 1, so at thresholdNever
// the pressure never exceeds 1; with burnCPU holding one of the CPUs busy,
// cpu_busy stays far above thresholdAlways.
const (
	thresholdNever  = 1.0
	thresholdAlways = 0.01
)

// interval is the tick of the test daemons: short, to keep the tests fast.
const interval = 200 * time.Millisecond

// daemonConfig renders testdata/olcd.yaml.tmpl.
type daemonConfig struct {
	Mode       string  // off | observe | enforce
	Attach     string  // tc | xdp | ...
	Threshold  float64 // cpu_busy threshold
	StaleAfter string  // heartbeat.stale_after
	// AutoInterfaces leaves interfaces: empty (olcd picks and follows the
	// node namespace's links) instead of naming the veth end.
	AutoInterfaces bool
	// MinSamples is datapath.response_min_samples (0: the default).
	MinSamples int
	// MaxPorts and SYNTableSize are datapath.max_ports and
	// syn_table_size (0: the defaults), which size pinned maps.
	MaxPorts, SYNTableSize int
	// ResponseP95 is a response_time_p95 threshold ("" for none), e.g. "1ms".
	ResponseP95 string
	// ResponseTarget is controller.response_target ("": the default,
	// auto), e.g. "1ms".
	ResponseTarget string
	// AutoPorts writes ports: auto (every listener of the node namespace)
	// instead of the Ports list.
	AutoPorts bool
	// RequestGate turns the request gate on for every listed port.
	RequestGate bool
	// Filled in by startDaemon.
	Iface, Interval, Metrics, Socket, DecisionLog string
	Ports                                         []int
}

// olcd is one `olcd run` in the node namespace.
type olcd struct {
	*proc
	env     *netEnv
	dir     string
	cfgPath string // the path olcd reads: a symlink to realCfg
	realCfg string
	socket  string
	logPath string
	decPath string
	metrics string // host:port inside the node namespace
	// pinDir is where olcd pins its datapath: a bpffs of the test's own,
	// mounted in the host's mount namespace so that it outlives each
	// `ip netns exec` (which mounts a fresh /sys); stateDir holds its
	// state file. docs/datapath.md, "Restarts".
	pinDir   string
	stateDir string
	// guard checks the drop reasons at the end of the test (dropguard_test.go);
	// allowDrops are reasons it allows beyond the drop action's.
	guard      *dropGuard
	allowDrops []string
	// bin is the olcd binary start runs: this build's (bins.olcd) when
	// empty, an earlier one in the upgrade tests.
	bin string
}

// startDaemon renders cfg, starts `olcd run` in env's node namespace and
// waits until it is attached and has ticked. The config file olcd is given
// is a symlink into a subdirectory, so the test can change what it points to
// without a file event in the watched directory (see TestDaemonEndToEnd).
func startDaemon(t *testing.T, env *netEnv, cfg daemonConfig) *olcd {
	t.Helper()
	d := prepareDaemon(t, env, cfg)
	d.start(t)
	return d
}

// prepareDaemon is startDaemon without the start: it writes the config and
// fills in the paths.
func prepareDaemon(t *testing.T, env *netEnv, cfg daemonConfig) *olcd {
	t.Helper()
	dir := t.TempDir()
	d := &olcd{
		env:      env,
		dir:      dir,
		cfgPath:  filepath.Join(dir, "olcd.yaml"),
		realCfg:  filepath.Join(dir, "real", "olcd.yaml"),
		socket:   filepath.Join(dir, "olcd.sock"),
		logPath:  filepath.Join(dir, "olcd.log"),
		decPath:  filepath.Join(dir, "decisions.jsonl"),
		metrics:  "127.0.0.1:9477", // loopback of the node namespace
		stateDir: filepath.Join(dir, "state"),
	}
	d.pinDir = mountPins(t, env, dir)
	if cfg.RequestGate {
		// A port with the request gate resets request starts by design.
		d.allowDrops = append(d.allowDrops, reasonGate)
	}
	cfg = startedConfig(d, cfg)
	if err := os.Mkdir(filepath.Dir(d.realCfg), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, d.realCfg, renderConfig(t, cfg))
	if err := os.Symlink("real/olcd.yaml", d.cfgPath); err != nil {
		t.Fatal(err)
	}
	return d
}

// start runs `olcd run` on the existing config and waits until it is ready.
func (d *olcd) start(t *testing.T) {
	t.Helper()
	// Registered before the process's own cleanup, so it runs after the
	// kill and shows the complete log.
	t.Cleanup(func() {
		if t.Failed() {
			dumpFile(t, "olcd log", d.logPath)
			dumpFile(t, "decision log", d.decPath)
		}
	})
	d.proc = d.run(t, d.bin, d.logPath)
	d.waitReady(t)
	if d.guard == nil {
		// One guard per daemon, across its restarts (a new process's
		// counters start a new chain).
		d.guard = d.guardDrops(t, d.allowDrops...)
	}
}

// run starts bin (this build's when empty) as `olcd run` on d's config,
// pin and state directories in the node namespace, its output to logPath;
// it waits for nothing.
func (d *olcd) run(t *testing.T, bin, logPath string) *proc {
	t.Helper()
	if bin == "" {
		bin = bins.olcd
	}
	return startProc(t, logPath, "ip", "netns", "exec", d.env.Node,
		bin, "run", "--config", d.cfgPath, "--log-level", "debug", "--pin-dir", d.pinDir, "--state-dir", d.stateDir)
}

// stop sends olcd SIGTERM and waits up to 10 s for it to exit; what names
// the step in the failure.
func (d *olcd) stop(t *testing.T, what string) {
	t.Helper()
	if err := d.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !d.wait(10 * time.Second) {
		t.Fatalf("%s: olcd did not stop within 10s of SIGTERM", what)
	}
}

// mountPins mounts a bpffs for one daemon's pins under dir and returns the
// pin directory in it. At the end of the test (after the daemon is killed)
// `olcd detach` removes what it left in env's node namespace and the bpffs
// is unmounted.
func mountPins(t *testing.T, env *netEnv, dir string) string {
	t.Helper()
	mnt := filepath.Join(dir, "bpf")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs on %s: %v", mnt, err)
	}
	pins := filepath.Join(mnt, "olcd")
	t.Cleanup(func() {
		if out, err := runCmd("ip", "netns", "exec", env.Node, bins.olcd, "detach", "--pin-dir", pins); err != nil {
			t.Errorf("olcd detach --pin-dir %s: %v\n%s", pins, err, out)
		}
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
	})
	return pins
}

// detach runs `olcd detach` for d's pins in the node namespace.
func (d *olcd) detach(t *testing.T) string {
	t.Helper()
	return mustRun(t, "ip", "netns", "exec", d.env.Node, bins.olcd, "detach", "--pin-dir", d.pinDir)
}

// startedConfig fills in the fields that belong to d: its interface, paths
// and addresses, and the defaults of the optional fields.
func startedConfig(d *olcd, cfg daemonConfig) daemonConfig {
	cfg.Iface, cfg.Interval, cfg.Metrics = d.env.NodeIf, interval.String(), d.metrics
	if cfg.AutoInterfaces {
		cfg.Iface = ""
	}
	cfg.Socket, cfg.DecisionLog = d.socket, d.decPath
	if len(cfg.Ports) == 0 {
		cfg.Ports = []int{serverPort}
	}
	if cfg.StaleAfter == "" {
		cfg.StaleAfter = "2s"
	}
	return cfg
}

func renderConfig(t *testing.T, cfg daemonConfig) []byte {
	t.Helper()
	tmpl, err := template.ParseFiles("testdata/olcd.yaml.tmpl")
	if err != nil {
		t.Fatalf("parse config template: %v", err)
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, cfg); err != nil {
		t.Fatalf("render config: %v", err)
	}
	return []byte(b.String())
}

// writeFileAtomic replaces path by rename, as config management does.
func writeFileAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func dumpFile(t *testing.T, what, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", what, err)
		return
	}
	const max = 16 << 10
	if len(data) > max {
		data = append([]byte("…\n"), data[len(data)-max:]...)
	}
	t.Logf("%s (%s):\n%s", what, path, data)
}

// pid is the daemon's process id (`ip netns exec` execs olcd in place).
func (d *olcd) pid() int { return d.cmd.Process.Pid }

// waitReady polls the status until the daemon has ticked and attached.
func (d *olcd) waitReady(t *testing.T) *api.Status {
	t.Helper()
	var st *api.Status
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() (bool, error) {
		if d.exited() {
			t.Fatalf("olcd exited before it was ready: %v", d.err)
		}
		var err error
		st, err = d.status()
		return err == nil && st.Ticks >= 1 && len(st.Interfaces) > 0, err
	}, "olcd not ready (ticked and attached)")
	if comm := procComm(d.pid()); comm != "olcd" {
		t.Fatalf("pid %d is %q, not olcd: the kill tests would signal the wrong process", d.pid(), comm)
	}
	return st
}

func procComm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// cli runs the built olcd binary with args against this daemon's socket.
func (d *olcd) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.olcd, append(args, "--socket", d.socket)...)
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return string(out), fmt.Errorf("olcd %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
	}
	return string(out), err
}

// mustCLI is cli that fails the test on error.
func (d *olcd) mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := d.cli(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// status runs `olcd status --json` and decodes it.
func (d *olcd) status() (*api.Status, error) {
	out, err := d.cli("status", "--json")
	if err != nil {
		return nil, err
	}
	var st api.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("decode olcd status --json: %w\n%s", err, out)
	}
	return &st, nil
}

func (d *olcd) mustStatus(t *testing.T) *api.Status {
	t.Helper()
	st, err := d.status()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// pollStatus polls the status every 50 ms until cond holds and returns that
// status; it fails the test after timeout, describing the last status.
func (d *olcd) pollStatus(t *testing.T, what string, timeout time.Duration, cond func(*api.Status) bool) *api.Status {
	t.Helper()
	var last *api.Status
	var lastErr error
	if err := testutil.WaitFor(timeout, 50*time.Millisecond, func() (bool, error) {
		st, err := d.status()
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = st
		return cond(st), nil
	}); err != nil {
		t.Fatalf("%s: %v; last status: %s; last error: %v", what, err, summary(last), lastErr)
	}
	return last
}

// linkEventHandled waits until the daemon's loop has handled a link event
// that the caller's ip command made: by the time that command returns, the
// kernel has queued the event on the daemon's socket, and the loop takes it
// at its next turn, so two ticks later it has been handled.
func (d *olcd) linkEventHandled(t *testing.T) {
	t.Helper()
	d.nextTick(t, d.nextTick(t, d.mustStatus(t)))
}

// nextTick waits for a status published by a tick after the one in st.
func (d *olcd) nextTick(t *testing.T, st *api.Status) *api.Status {
	t.Helper()
	after := st.Ticks
	return d.pollStatus(t, fmt.Sprintf("a tick after tick %d", after), 5*time.Second,
		func(s *api.Status) bool { return s.Ticks > after })
}

// summary renders what the assertions look at, for failure messages.
func summary(st *api.Status) string {
	if st == nil {
		return "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "mode=%s ticks=%d overload=%v pressure=%.3f p=%.3f reason=%q",
		st.Mode, st.Ticks, st.Overload.Active, st.Overload.Pressure, st.Overload.DropProbability, st.Overload.Reason)
	if s := cpuBusy(st); s != nil {
		fmt.Fprintf(&b, " cpu_busy=%v threshold=%v", deref(s.Value), deref(s.Threshold))
	}
	for _, p := range st.Ports {
		fmt.Fprintf(&b, " port %d: p=%.3f totals=%+v", p.Port, p.DropProbability, p.Totals)
	}
	return b.String()
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}

// signalNamed returns the named signal of st, or nil.
func signalNamed(st *api.Status, name string) *api.SignalStatus {
	for i := range st.Signals {
		if st.Signals[i].Name == name {
			return &st.Signals[i]
		}
	}
	return nil
}

// cpuBusy returns st's cpu_busy signal, or nil.
func cpuBusy(st *api.Status) *api.SignalStatus { return signalNamed(st, "cpu_busy") }

// cpuThreshold is the cpu_busy signal's threshold in st, -1 without one.
func cpuThreshold(st *api.Status) float64 {
	if cb := cpuBusy(st); cb != nil && cb.Threshold != nil {
		return *cb.Threshold
	}
	return -1
}

// port returns the status of the server port; it fails the test when the
// port is not listed.
func port(t *testing.T, st *api.Status) api.PortStatus {
	t.Helper()
	for _, p := range st.Ports {
		if p.Port == serverPort && p.Proto == "tcp" {
			return p
		}
	}
	t.Fatalf("tcp/%d not in status: %s", serverPort, summary(st))
	return api.PortStatus{}
}

// portP is the drop probability of the server port in st (-1 when absent).
func portP(st *api.Status) float64 {
	for _, p := range st.Ports {
		if p.Port == serverPort {
			return p.DropProbability
		}
	}
	return -1
}

// waitShedding waits until the server port's p is 1 (every SYN dropped).
func (d *olcd) waitShedding(t *testing.T) *api.Status {
	t.Helper()
	return d.pollStatus(t, "port p = 1", 10*time.Second, func(s *api.Status) bool {
		return s.Mode == "enforce" && s.Overload.Active && portP(s) == 1
	})
}

// scrape fetches /metrics from inside the node namespace and parses it with
// the Prometheus text parser.
func (d *olcd) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mfs, err := scrapeCtx(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// scrapeCtx fetches and parses /metrics of d within ctx.
func scrapeCtx(ctx context.Context, d *olcd) (map[string]*dto.MetricFamily, error) {
	hc := &http.Client{
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var c net.Conn
				err := d.env.InNode(func() error {
					var err error
					c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
					return err
				})
				return c, err
			},
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return mfs, nil
}

// metricValue returns the value of the sample of family name whose labels
// include labels ("k", "v", ...); ok is false when there is none.
func metricValue(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func mustMetric(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	v, ok := metricValue(mfs, name, labels...)
	if !ok {
		t.Fatalf("metric %s%v not exported", name, labels)
	}
	return v
}

// portCounters are the per-port counters of the server port in a scrape.
type portCounters struct {
	New, Retransmits, Passed, Dropped, WouldDrop, Stale, P float64
}

func scrapePort(t *testing.T, mfs map[string]*dto.MetricFamily) portCounters {
	t.Helper()
	l := []string{"proto", "tcp", "port", strconv.Itoa(serverPort), "class", "normal"}
	return portCounters{
		New:         mustMetric(t, mfs, "olcd_port_new_connections_total", l...),
		Retransmits: mustMetric(t, mfs, "olcd_port_syn_retransmits_total", l...),
		Passed:      mustMetric(t, mfs, "olcd_port_passed_total", l...),
		Dropped:     mustMetric(t, mfs, "olcd_port_dropped_total", l...),
		WouldDrop:   mustMetric(t, mfs, "olcd_port_would_drop_total", l...),
		Stale:       mustMetric(t, mfs, "olcd_port_stale_total", l...),
		P:           mustMetric(t, mfs, "olcd_port_drop_probability_ratio", l...),
	}
}

func (c portCounters) sub(o portCounters) portCounters {
	return portCounters{New: c.New - o.New, Retransmits: c.Retransmits - o.Retransmits, Passed: c.Passed - o.Passed,
		Dropped: c.Dropped - o.Dropped, WouldDrop: c.WouldDrop - o.WouldDrop, Stale: c.Stale - o.Stale, P: c.P}
}

// decisionRecords reads the decision log's JSON lines.
func (d *olcd) decisionRecords(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	err := overload.ReadJSONLines(d.decPath, func(b []byte) error {
		var rec map[string]any
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("not JSON: %w: %s", err, b)
		}
		out = append(out, rec)
		return nil
	})
	if err != nil {
		t.Fatalf("decision log: %v", err)
	}
	return out
}

// records returns the decision-log records with msg.
func records(recs []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// attachedProg is a BPF program the kernel lists on the node interface.
type attachedProg struct {
	Hook string // "tcx", "xdp" or "cls_bpf"
	ID   ebpf.ProgramID
	Name string // the program's name, or the cls_bpf filter's
}

// attachedProgs lists every BPF program on the node interface's ingress
// path as the kernel reports it: tcx links, XDP, and cls_bpf filters.
func (e *netEnv) attachedProgs(t *testing.T) []attachedProg {
	t.Helper()
	return e.attachedProgsOn(t, e.NodeIf)
}

// attachedProgsOn is attachedProgs for another interface of the node
// namespace.
func (e *netEnv) attachedProgsOn(t *testing.T, name string) []attachedProg {
	t.Helper()
	l, err := e.nodeNL.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	var out []attachedProg
	var q *link.QueryResult
	if err := e.InNode(func() error {
		var err error
		q, err = link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		return err
	}); err != nil {
		t.Fatalf("query tcx programs on %s: %v", name, err)
	}
	for _, p := range q.Programs {
		out = append(out, attachedProg{Hook: "tcx", ID: p.ID, Name: loader.ProgramName(p.ID)})
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		id := ebpf.ProgramID(x.ProgId)
		out = append(out, attachedProg{Hook: "xdp", ID: id, Name: loader.ProgramName(id)})
	}
	fs, err := e.nodeNL.FilterList(l, netlink.HANDLE_MIN_INGRESS)
	if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("list ingress filters on %s: %v", name, err)
	}
	for _, f := range fs {
		if bf, ok := f.(*netlink.BpfFilter); ok && bf.Handle != 0 {
			out = append(out, attachedProg{Hook: "cls_bpf", ID: ebpf.ProgramID(bf.Id), Name: bf.Name})
		}
	}
	return out
}

// egressProgs lists the BPF programs at the node interface's egress: tcx
// programs and cls_bpf filters.
func (e *netEnv) egressProgs(t *testing.T) []attachedProg {
	t.Helper()
	l, err := e.nodeNL.LinkByName(e.NodeIf)
	if err != nil {
		t.Fatalf("link %s: %v", e.NodeIf, err)
	}
	var out []attachedProg
	var q *link.QueryResult
	if err := e.InNode(func() error {
		var err error
		q, err = link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: ebpf.AttachTCXEgress})
		return err
	}); err != nil {
		t.Fatalf("query tcx egress programs on %s: %v", e.NodeIf, err)
	}
	for _, p := range q.Programs {
		out = append(out, attachedProg{Hook: "tcx", ID: p.ID, Name: loader.ProgramName(p.ID)})
	}
	fs, err := e.nodeNL.FilterList(l, netlink.HANDLE_MIN_EGRESS)
	if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("list egress filters on %s: %v", e.NodeIf, err)
	}
	for _, f := range fs {
		if bf, ok := f.(*netlink.BpfFilter); ok && bf.Handle != 0 {
			out = append(out, attachedProg{Hook: "cls_bpf", ID: ebpf.ProgramID(bf.Id), Name: bf.Name})
		}
	}
	return out
}

// progExists reports whether a program with id is still loaded.
func progExists(t *testing.T, id ebpf.ProgramID) bool {
	t.Helper()
	p, err := ebpf.NewProgramFromID(id)
	if err == nil {
		p.Close()
		return true
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("look up program %d: %v", id, err)
	}
	return false
}

// olcdProgIDs lists the loaded programs whose name starts with "olcd",
// machine-wide (other tests may have theirs loaded; callers compare sets).
func olcdProgIDs(t *testing.T) map[ebpf.ProgramID]string {
	t.Helper()
	out := map[ebpf.ProgramID]string{}
	id := ebpf.ProgramID(0)
	for range 100000 {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return out
		}
		if err != nil {
			t.Fatalf("enumerate BPF programs: %v", err)
		}
		id = next
		if name := loader.ProgramName(id); strings.HasPrefix(name, "olcd") {
			out[id] = name
		}
	}
	t.Fatal("enumerate BPF programs: more than 100000")
	return nil
}

func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
