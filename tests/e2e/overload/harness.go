package overload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/olcd/olcd/internal/testutil"
)

// Ports of the backend on the host side of the veth pair.
const (
	// WorkPort serves the CPU-costly requests; olcd protects it.
	WorkPort = 18080
	// HealthPort answers health checks; olcd exempts it.
	HealthPort = 18081
)

// Options configure a Harness. Zero values take the defaults in brackets.
type Options struct {
	// Olcd is the olcd binary (bin/olcd).
	Olcd string
	// Self is the olcd-overload binary, which the harness runs as the
	// backend and the attacker ("backend", "attack" subcommands).
	Self string
	// OutDir receives logs, per-run records, plots and results.json.
	OutDir string
	// Work is the CPU time per request [5ms].
	Work time.Duration
	// SLO is the latency within which a success counts as goodput [200ms].
	SLO time.Duration
	// Timeout bounds every request, connect included [1s].
	Timeout time.Duration
	// HealthRate is health checks per second on HealthPort [10].
	HealthRate float64
	// Quota is the backend's CPU quota in CPUs [1].
	Quota float64
	// GOMAXPROCS is the backend's GOMAXPROCS; 0 leaves it to the Go
	// runtime, which since Go 1.25 derives it from the cgroup's quota but
	// never below 2 [1: a service tuned to its 1-CPU quota, as
	// uber-go/automaxprocs does; two threads under a 1-CPU quota are
	// throttled for half of a CFS period whenever both run].
	GOMAXPROCS int
	// OlcdInterval is olcd's tick [500ms].
	OlcdInterval time.Duration
	// OlcdController are controller keys set over the recommended
	// config's, one "key: value" each: a comparison [none: the file's,
	// whose bound min_pass_rate 0.1 holds 3 C; docs/measurements.md §20].
	OlcdController []string
	// Selection is olcd's datapath.selection, "random" or "even" ["":
	// the embedded default].
	Selection string
	// Config is the recommended config every olcd of the harness starts
	// from, relative to the repository [ConfigBareMetal]; RunOptions.Config
	// overrides it for a run.
	Config string
	// CPUGuard keeps the cgroup's CPU at the calibrated threshold as a
	// guard beside the queue law in the enforce variants [false: the
	// recommended config's guards; docs/tuning.md §0 measures both].
	CPUGuard bool
	// Signals, when not nil, are the enforce variants' signals in place of
	// the recommended config's guards, "name: {threshold: x}" each: a
	// comparison (docs/measurements.md §20 measures the default guards
	// against the file's less one) [nil].
	Signals []string
	// Progress receives one line every few seconds while a run goes on
	// (nil: silent).
	Progress io.Writer
	// ResponseTarget is the enforce variants' response-time target where
	// olcd has the law on the measured queue: "" its default (auto, a
	// multiple of the port's baseline), "knee" the calibration's latency
	// limit (Calibration.ResponseThreshold).
	ResponseTarget string
}

func (o *Options) defaults() {
	if o.Work == 0 {
		o.Work = 5 * time.Millisecond
	}
	if o.SLO == 0 {
		o.SLO = 200 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if o.HealthRate == 0 {
		o.HealthRate = 10
	}
	if o.Quota == 0 {
		o.Quota = 1
	}
	if o.GOMAXPROCS == 0 {
		o.GOMAXPROCS = 1
	}
	if o.OlcdInterval == 0 {
		o.OlcdInterval = 500 * time.Millisecond
	}
	if o.Config == "" {
		o.Config = ConfigBareMetal
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Harness owns the client namespace, the veth pair, the backend's cgroup and
// the backend process. It runs one thing at a time; Close removes it all.
type Harness struct {
	opt  Options
	id   string
	lock *os.File
	net  *Net
	cg   *Cgroup

	backends   []*backendProc
	iterations int // spin rounds per request, fixed by the first backend
	// backendNetns, when set, is the network namespace the backend runs
	// in (the load-balancer test's nodes, lb.go); net is then the client
	// side, whose HostIP is the node's address.
	backendNetns string
	// sleep, when positive, makes the next work backend wait instead of
	// spinning; keepAlive keeps its connections open (response.go).
	sleep     time.Duration
	keepAlive bool
	// backend is the kind of backend the next start runs ("": cpu).
	backend Backend
	// dbQuery is the db backend's query, sized at its first start, and
	// dbCycleCPU the server's CPU per connection running it (mariadb.go).
	dbQuery    string
	dbCycleCPU time.Duration

	// Calibration is set by Calibrate (or by the caller, from an earlier
	// results.json): the capacity and the olcd threshold every later run
	// uses.
	Calibration *Calibration
	// calibrations are the backends' calibrations (cpu: Calibration).
	calibrations map[Backend]*Calibration
	// targetLaw is set when olcd accepts controller.response_target.
	targetLaw bool
}

// New checks the prerequisites, takes the host lock (waiting for another
// harness until ctx ends), removes what a killed earlier run left behind and
// builds the network and the cgroup.
func New(ctx context.Context, opt Options) (*Harness, error) {
	opt.defaults()
	lock, err := takeHost(ctx, "the overload harness needs root: it creates a network namespace, a veth pair, a cgroup and nftables rules, and olcd loads BPF programs (run it with sudo)",
		[]string{"ip", "nft"}, "iproute2 nftables", opt.OutDir, opt.Olcd, opt.Self)
	if err != nil {
		return nil, err
	}
	h := &Harness{opt: opt, id: newID(), lock: lock, targetLaw: hasTargetLaw(opt.Olcd, opt.OutDir)}
	law := "response_time_p95 threshold (this olcd has no controller.response_target)"
	if h.targetLaw {
		law = "controller.response_target"
	}
	fmt.Fprintf(opt.Progress, "olcd %s: enforce controls on the response time through %s\n", opt.Olcd, law)
	if h.net, err = newNet(h.id); err != nil {
		h.Close()
		return nil, err
	}
	if h.cg, err = newCgroup(namePrefix + "-" + h.id); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// takeHost checks what a harness needs (root, else the error needsRoot;
// tools, from the Debian packages pkgs; the binaries bins), creates outDir,
// takes the host lock (waiting for another harness until ctx ends) and
// removes what a killed earlier run left behind.
func takeHost(ctx context.Context, needsRoot string, tools []string, pkgs, outDir string, bins ...string) (*os.File, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New(needsRoot)
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not found: apt-get install -y %s", tool, pkgs)
		}
	}
	for _, b := range bins {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("binary: %w", err)
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", outDir, err)
	}
	lock, err := lockHost(ctx)
	if err != nil {
		return nil, err
	}
	removeLeftovers()
	return lock, nil
}

// newID is a random suffix for the names of what a harness creates.
func newID() string { return fmt.Sprintf("%05x", rand.IntN(1<<20)) }

// Close stops the backend and removes the namespace, the veth pair, the
// cgroup and the lock. It is safe after a failed New and more than once.
func (h *Harness) Close() {
	h.stopBackend()
	if h.cg != nil {
		h.cg.Close()
		h.cg = nil
	}
	if h.net != nil {
		h.net.Close()
		h.net = nil
	}
	if h.lock != nil {
		h.lock.Close()
		h.lock = nil
	}
}

// Options returns the options with their defaults filled in.
func (h *Harness) Options() Options { return h.opt }

// backendProc is one process of the backend.
type backendProc struct {
	cmd  *exec.Cmd
	done chan error
}

// startBackend starts a fresh backend of h.backend in the cgroup with the
// full quota: the work server on WorkPort and, as a process of its own in
// the same cgroup, the health server on HealthPort, and waits until both
// answer. A fresh work server per run drops the work an earlier overload
// left queued, which would otherwise burn the CPU for tens of seconds into
// the next run. The health server is a process of its own so that its
// answers measure what happens to its connections on the way (olcd must
// never shed them: the port is an exception), not the scheduler of a work
// server with a backlog of thousands of requests, where a health check
// waits its turn behind them whatever the network did.
func (h *Harness) startBackend(limiter string) error {
	h.stopBackend()
	if err := h.cg.SetQuota(h.opt.Quota); err != nil {
		return err
	}
	switch h.backend {
	case BackendPHP:
		if err := h.startPHP(); err != nil {
			h.stopBackend()
			return err
		}
	case BackendDB:
		if err := h.startMariaDB(); err != nil {
			h.stopBackend()
			return err
		}
	case BackendCPU, BackendPool, "":
		args := []string{"-port", strconv.Itoa(WorkPort), "-health-port", "0", "-limiter", limiter}
		if h.backend == BackendPool {
			args = append(args, "-workers", strconv.Itoa(PoolWorkers))
		}
		work, line, err := h.startBackendProc("work", args...)
		if err != nil {
			return err
		}
		h.backends = append(h.backends, work)
		if _, v, ok := strings.Cut(line, "iterations="); ok && h.iterations == 0 && h.sleep == 0 && h.backend != BackendPool {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			h.iterations = n
			fmt.Fprintf(h.opt.Progress, "backend: %s\n", line)
		}
	default:
		return fmt.Errorf("unknown backend %q (have cpu, pool, php, db)", h.backend)
	}
	health, _, err := h.startBackendProc("health", "-port", "0", "-health-port", strconv.Itoa(HealthPort))
	if err != nil {
		h.stopBackend()
		return err
	}
	h.backends = append(h.backends, health)
	// Ready means listening; wait until both ports answer from the client
	// namespace too, across the veth pair.
	for _, port := range []int{HealthPort, WorkPort} {
		probe := fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", h.net.HostIP, port)
		if err := testutil.WaitFor(10*time.Second, 100*time.Millisecond, func() (bool, error) {
			err := h.net.Command("timeout", "1", "bash", "-c", probe).Run()
			return err == nil, err
		}); err != nil {
			h.stopBackend()
			return fmt.Errorf("backend port %d does not answer from the client namespace: %w", port, err)
		}
	}
	return nil
}

// startBackendProc starts one process of the harness's own backend (the
// olcd-overload binary) in the cgroup and waits for its "ready" line, which
// it returns.
func (h *Harness) startBackendProc(role string, args ...string) (*backendProc, string, error) {
	sleep := h.sleep
	if h.backend == BackendPool && role == "work" {
		sleep = PoolHold
	}
	argv := append([]string{h.opt.Self, "backend",
		"-addr", h.net.HostIP.String(), "-work", h.opt.Work.String(), "-iterations", strconv.Itoa(h.iterations),
		"-sleep", sleep.String(), "-keepalive=" + strconv.FormatBool(h.keepAlive)}, args...)
	return h.startInCgroup(role, true, argv...)
}

// startInCgroup starts argv in the backend's cgroup (and network
// namespace, if any), its stderr to backend-<role>.log; with waitReady it
// waits for the first line on stdout and returns it.
func (h *Harness) startInCgroup(role string, waitReady bool, argv ...string) (*backendProc, string, error) {
	logPath := filepath.Join(h.opt.OutDir, "backend-"+role+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", err
	}
	// The shell joins the cgroup and then execs the backend, so the Go
	// runtime starts under the quota, as it does for a service a container
	// runtime or systemd starts.
	join := ""
	for _, f := range h.cg.ProcsFiles() {
		join += fmt.Sprintf("echo $$ > %q && ", f)
	}
	run := `exec "$@"`
	if h.backendNetns != "" {
		// nsenter, not ip netns exec: that remounts /sys, and with it the
		// cgroup hierarchies, in a mount namespace of its own.
		run = `exec nsenter --net=/run/netns/` + h.backendNetns + ` "$@"`
	}
	argv = append([]string{"-c", join + run, "sh"}, argv...)
	cmd := exec.Command("sh", argv...)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = os.Environ()
	if h.opt.GOMAXPROCS > 0 { // -1: the runtime's choice
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOMAXPROCS=%d", h.opt.GOMAXPROCS))
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("start backend (%s): %w", role, err)
	}
	p := &backendProc{cmd: cmd, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case ready <- sc.Text():
			default:
			}
		}
	}()
	go func() { p.done <- cmd.Wait(); logf.Close() }()
	if !waitReady {
		select {
		case err := <-p.done:
			return nil, "", fmt.Errorf("backend (%s) exited at start: %w (see %s)", role, err, logPath)
		case <-time.After(200 * time.Millisecond):
			return p, "", nil
		}
	}
	select {
	case line := <-ready:
		return p, line, nil
	case err := <-p.done:
		return nil, "", fmt.Errorf("backend (%s) exited before it was ready: %w (see %s)", role, err, logPath)
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-p.done
		return nil, "", fmt.Errorf("backend (%s) not ready within 10 s", role)
	}
}

// stopBackend kills the backend's processes and everything left in its
// cgroup.
func (h *Harness) stopBackend() {
	for _, p := range h.backends {
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
	h.backends = nil
	if h.cg != nil {
		for _, d := range h.cg.procsDirs {
			killCgroup(d)
		}
	}
}

// waitIdle waits until the backend's cgroup uses less than 5 % of a CPU
// over 300 ms, or gives up after limit.
func (h *Harness) waitIdle(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		u0, err := h.cg.Usage()
		if err != nil {
			return
		}
		time.Sleep(300 * time.Millisecond)
		u1, _ := h.cg.Usage()
		if (u1 - u0) < 15*time.Millisecond {
			return
		}
	}
}
