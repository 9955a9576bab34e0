package overload

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/olcd/olcd/internal/testutil"
)

// BoardRun is the run behind the board's picture (`olcd-overload board`,
// docs/img/board.png): the cpu backend and clients that give up after
// 1 s, 0.5 C for 30 s, 3 C for 60 s, 0.5 C for 30 s, long enough for the
// recording rules' one-minute rates to fill.
var BoardRun = func() Scenario {
	sc := Matrix3x(BackendCPU, ClientsOpenGiveUp, 30*time.Second, 60*time.Second, 30*time.Second)
	sc.Name = "board"
	return sc
}()

// PrometheusScrape is how often the harness's Prometheus scrapes olcd and
// evaluates its rules: one olcd tick is 500 ms, so a 1 s scrape sees every
// second tick, and the board's $__rate_interval (4 scrapes) spans 8 ticks.
const PrometheusScrape = time.Second

// Prometheus is a Prometheus server the harness started on the host's
// loopback, scraping one olcd and evaluating olcd's rules.
type Prometheus struct {
	// URL is its HTTP API's base; Dir holds its config, log and data.
	URL, Dir string

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited, with its error in err
	err    error
}

// FreeLoopback returns 127.0.0.1:port with a port free now.
func FreeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartPrometheus starts bin (Debian's prometheus) with its config, log
// and data in dir: olcd's rules (deploy/prometheus/olcd-rules.yaml) and
// one job, olcd, scraping target as instance, every PrometheusScrape. It
// returns once Prometheus is ready.
func StartPrometheus(ctx context.Context, bin, dir, target, instance string) (*Prometheus, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	addr, err := FreeLoopback()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`# written by the overload harness (StartPrometheus)
global:
  scrape_interval: %[1]s
  scrape_timeout: %[2]s
  evaluation_interval: %[1]s
rule_files: [%[3]q]
scrape_configs:
  - job_name: olcd
    static_configs:
      - targets: [%[4]q]
        labels: {instance: %[5]q}
`, PrometheusScrape, PrometheusScrape*9/10, filepath.Join(root, "deploy/prometheus/olcd-rules.yaml"), target, instance)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	p := &Prometheus{URL: "http://" + addr, Dir: dir, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { p.err = p.cmd.Wait(); logf.Close(); close(p.exited) }()
	hc := &http.Client{Timeout: time.Second}
	err = testutil.WaitFor(30*time.Second, 200*time.Millisecond, func() (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("prometheus exited (see %s): %w", logf.Name(), p.err)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/-/ready", nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("prometheus not ready: %w", err)
	}
	return p, nil
}

// Close stops Prometheus (SIGTERM, then SIGKILL after 10 s); its data
// stays in Dir.
func (p *Prometheus) Close() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
