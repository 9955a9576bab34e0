package overload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/testutil"
)

// cpuSignal is the signals line of the cgroup's CPU at threshold (a share
// of the quota).
func cpuSignal(threshold float64) string {
	return fmt.Sprintf("cgroup_cpu_usage_of_quota: {threshold: %.3f}", threshold)
}

// olcdSettings are what a run's olcd config varies in.
type olcdSettings struct {
	// Config is the recommended config the run starts from ("":
	// Options.Config).
	Config string
	// Mode is "observe" or "enforce".
	Mode string
	// Signals are the lines of the signals section, "name: {threshold: x}";
	// nil keeps the recommended config's (the default guards).
	Signals []string
	// Controller are controller keys beyond Options.OlcdController.
	Controller []string
	// Action is action.kind ("": the default, drop).
	Action string
	// RequestGate turns the work port's request gate on.
	RequestGate bool
	// Fair turns the work port's fair shedding on.
	Fair bool
	// PinDir pins the datapath there ("": olcd runs unpinned).
	PinDir string
	// Bin is the olcd binary ("": Options.Olcd); an upgrade run starts
	// an earlier build first (RunOptions.OlcdBeforeRestart).
	Bin string
	// Metrics is olcd's metrics.address ("": off).
	Metrics string
}

// olcdSettingsFor returns the olcd settings of variant v under cal.
// enforce is the recommended config enforcing: the law on the work port's
// measured queue (controller.response_target, h.targetLaw) at its default
// target (auto) or, with Options.ResponseTarget "knee", at the knee's
// latency limit, the file's guards beside it (with Options.CPUGuard the
// cgroup's CPU at the calibrated threshold instead); an olcd without the
// law gets a response_time_p95 threshold at the knee's latency limit.
// enforce-cpu, a comparison, watches the CPU alone (response_target: off).
func (h *Harness) olcdSettingsFor(v Variant, cal *Calibration) olcdSettings {
	cpu := cpuSignal(cal.Threshold)
	set := olcdSettings{Mode: "enforce", Signals: h.opt.Signals}
	if h.opt.CPUGuard || !h.targetLaw {
		set.Signals = []string{cpu}
	}
	switch v {
	case VariantEnforceCPU:
		set.Signals = []string{cpu}
		if h.targetLaw {
			set.Controller = []string{"response_target: off"}
		}
		return set
	case VariantObserve:
		set.Mode = "observe"
	case VariantEnforceReject:
		set.Action = "reject"
	}
	switch {
	case !h.targetLaw:
		set.Signals = []string{fmt.Sprintf("response_time_p95: {threshold: %.4f}", cal.ResponseThreshold), cpu}
	case h.opt.ResponseTarget == "knee":
		set.Controller = []string{fmt.Sprintf("response_target: %.4f", cal.ResponseThreshold)}
	}
	return set
}

// hasTargetLaw reports whether the olcd binary accepts
// controller.response_target (the law on the measured queue).
func hasTargetLaw(olcd, dir string) bool {
	path := filepath.Join(dir, "probe-response-target.yaml")
	if err := os.WriteFile(path, []byte("controller:\n  response_target: off\n"), 0o644); err != nil {
		return false
	}
	defer os.Remove(path)
	return exec.Command(olcd, "check-config", path).Run() == nil
}

// unpinned are the flags that make bin's olcd pin nothing and keep no
// state file, when it has them: the harness's runs each start from nothing,
// and its kill measures the fail-open of a datapath that dies with the
// process (the pinned one's, within stale_after, is tests/e2e's
// TestFailOpenKill9 and TestRestart/KeepsProtection).
func unpinned(bin string) []string {
	out, _ := exec.Command(bin, "run", "-h").CombinedOutput()
	if strings.Contains(string(out), "-pin-dir") {
		return []string{"--pin-dir", "off", "--state-dir", "off"}
	}
	return nil
}

// ConfigHead is the first line of the config a run's olcd ran
// (RunResult.OlcdConfig): the recommended file it came from and the keys
// the run set.
func ConfigHead(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	head, _, _ := strings.Cut(string(b), "\n")
	return head, nil
}

// olcdProc is a running `olcd run`.
type olcdProc struct {
	cmd         *exec.Cmd
	done        chan error
	client      *api.Client
	socket      string
	logPath     string
	config      string // the config file it runs
	decisionLog string
	// metrics is metrics.address ("": none).
	metrics string
	killed  bool
}

// startOlcd writes the config into dir, starts olcd and waits until it has
// attached and ticked twice.
func (h *Harness) startOlcd(ctx context.Context, dir string, set olcdSettings) (*olcdProc, error) {
	bin := set.Bin
	if bin == "" {
		bin = h.opt.Olcd
	}
	base := set.Config
	if base == "" {
		base = h.opt.Config
	}
	return launchOlcd(ctx, bin, dir, "", "", olcdConfigData{
		By: "the overload harness", Base: base, Mode: set.Mode, Iface: h.net.HostIf, Interval: h.opt.OlcdInterval, Selection: h.opt.Selection,
		Signals: set.Signals, Action: set.Action, Cgroup: h.cg.Name, Controller: append(append([]string{}, h.opt.OlcdController...), set.Controller...),
		Port: WorkPort, HealthPort: HealthPort, RequestGate: set.RequestGate, Fair: set.Fair, Metrics: set.Metrics, PinDir: set.PinDir,
	})
}

// capsPatch is the `olcd set patch` document that gives the work port of
// an olcd started with set the caps pc (rates × c, the calibrated
// capacity; heavy is the heavy client's address): the port's entry as the
// config file has it (workPortEntry), with the caps. A patch replaces the
// ports list whole, so a phase without caps (pc zero) removes the previous
// phase's.
func capsPatch(set olcdSettings, pc PhaseCaps, c float64, heavy netip.Addr) ([]byte, error) {
	entry := workPortEntry(WorkPort, set.RequestGate, set.Fair)
	maps.Copy(entry, pc.keys(c, heavy))
	var n yaml.Node
	if err := n.Encode(map[string]any{"ports": []any{entry}}); err != nil {
		return nil, err
	}
	for _, c := range n.Content {
		c.Style = flowStyle(c)
	}
	return yaml.Marshal(&n)
}

// mountRunPins mounts a bpffs under dir for a run's pinned olcd and returns
// its pin directory; a leftover of an earlier run there is detached first.
func mountRunPins(bin, dir string) (string, error) {
	mnt := filepath.Join(dir, "bpf")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return "", err
	}
	if err := syscall.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
		return "", fmt.Errorf("mount bpffs on %s: %w", mnt, err)
	}
	return filepath.Join(mnt, "olcd"), nil
}

// detachRunPins removes what the run's olcd left pinned and unmounts.
func detachRunPins(bin, pinDir string) {
	_ = exec.Command(bin, "detach", "--pin-dir", pinDir).Run()
	_ = syscall.Unmount(filepath.Dir(pinDir), syscall.MNT_DETACH)
}

// launchOlcd writes cfg (renderConfig) into dir, starts bin's `olcd run` on it (inside
// network namespace netns, unless "") and waits until it has attached and
// ticked twice. node, unless "", names the files (olcd-<node>.yaml,
// olcd-<node>.log, olcd-<node>.sock, decisions-<node>.jsonl; else
// olcd.yaml, ...) and the errors ("olcd on node <node>").
func launchOlcd(ctx context.Context, bin, dir, node, netns string, cfg olcdConfigData) (*olcdProc, error) {
	suffix, who := "", "olcd"
	if node != "" {
		suffix, who = "-"+node, "olcd on node "+node
	}
	o := &olcdProc{socket: filepath.Join(dir, "olcd"+suffix+".sock"), logPath: filepath.Join(dir, "olcd"+suffix+".log"),
		decisionLog: filepath.Join(dir, "decisions"+suffix+".jsonl"), metrics: cfg.Metrics}
	_ = os.Remove(o.socket)
	_ = os.Remove(o.decisionLog)
	cfg.Socket, cfg.DecisionLog = o.socket, o.decisionLog
	cfgPath := filepath.Join(dir, "olcd"+suffix+".yaml")
	o.config = cfgPath
	text, err := renderConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfgPath, text, 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(o.logPath)
	if err != nil {
		return nil, err
	}
	argv := append([]string{bin, "run", "--config", cfgPath}, unpinned(bin)...)
	if cfg.PinDir != "" {
		argv = []string{bin, "run", "--config", cfgPath, "--pin-dir", cfg.PinDir, "--state-dir", filepath.Join(dir, "state"+suffix)}
	}
	if netns != "" {
		argv = append([]string{"nsenter", "--net=/run/netns/" + netns}, argv...)
	}
	o.cmd = exec.Command(argv[0], argv[1:]...)
	o.cmd.Stdout, o.cmd.Stderr = logf, logf
	o.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := o.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", who, err)
	}
	o.done = make(chan error, 1)
	go func() { o.done <- o.cmd.Wait(); logf.Close() }()
	o.client = api.NewClient(o.socket, 2*time.Second)
	var (
		gone   bool // olcd exited, with exitEr
		exitEr error
	)
	err = testutil.WaitFor(15*time.Second, 100*time.Millisecond, func() (bool, error) {
		st, err := o.status(ctx)
		if err == nil && st.Ticks >= 2 && len(st.Interfaces) > 0 {
			return true, nil
		}
		select {
		case exitEr = <-o.done:
			gone = true
			return true, nil
		default:
		}
		return false, err
	})
	switch {
	case gone:
		return nil, fmt.Errorf("%s exited at start: %w (see %s)", who, exitEr, o.logPath)
	case err != nil:
		o.stop()
		return nil, fmt.Errorf("%s not attached and ticking: %w (see %s)", who, err, o.logPath)
	}
	return o, nil
}

// scrape writes olcd's /metrics (metrics.address, set) to dir/metrics.txt
// and returns the file's path.
func (o *olcdProc) scrape(ctx context.Context, dir string) (string, error) {
	if o.metrics == "" {
		return "", errors.New("scrape metrics: olcd has no metrics address")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.metrics+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	if err != nil {
		return "", fmt.Errorf("scrape metrics: %w", err)
	}
	path := filepath.Join(dir, "metrics.txt")
	return path, os.WriteFile(path, body, 0o644)
}

// status asks the daemon for its status.
func (o *olcdProc) status(ctx context.Context) (*api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return o.client.Status(ctx)
}

// kill sends SIGKILL, as the OOM killer or a crash would.
func (o *olcdProc) kill() {
	_ = o.cmd.Process.Signal(syscall.SIGKILL)
	o.killed = true
	<-o.done
}

// stop ends olcd with SIGTERM (it detaches) and SIGKILL after 10 s.
func (o *olcdProc) stop() {
	if o.killed {
		return
	}
	terminate(o.cmd, o.done, 10*time.Second)
	o.killed = true
}

// terminate sends cmd SIGTERM and SIGKILL after grace, and returns once
// done (cmd's Wait) has answered.
func terminate(cmd *exec.Cmd, done <-chan error, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}
