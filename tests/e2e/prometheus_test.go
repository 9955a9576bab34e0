package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/testutil"
	"github.com/olcd/olcd/tools/board"
)

// Paths of the files under test, relative to this package.
const (
	rulesFile     = "../../deploy/prometheus/olcd-rules.yaml"
	rulesTestFile = "olcd-rules.test.yaml" // in the rules' directory
	dashboardFile = "../../deploy/grafana/olcd.json"
)

// requireTools makes sure the programs exist: when one is missing it runs
// the project's install step (scripts/deps.sh GROUP) as root, and skips
// with the reason when not root. It returns each program's path.
func requireTools(t *testing.T, group string, tools ...string) []string {
	t.Helper()
	find := func() ([]string, string) {
		var paths []string
		for _, tool := range tools {
			p, err := exec.LookPath(tool)
			if err != nil {
				return nil, tool
			}
			paths = append(paths, p)
		}
		return paths, ""
	}
	if paths, missing := find(); missing == "" {
		return paths
	} else if os.Geteuid() != 0 {
		t.Skipf("%s not installed and not root to install it: run 'sudo scripts/deps.sh %s'", missing, group)
	}
	out, err := exec.Command("../../scripts/deps.sh", group).CombinedOutput()
	t.Logf("scripts/deps.sh %s: %s", group, out)
	if err != nil {
		t.Fatalf("scripts/deps.sh %s: %v", group, err)
	}
	paths, missing := find()
	if missing != "" {
		t.Fatalf("%s still missing after scripts/deps.sh %s", missing, group)
	}
	return paths
}

// TestPrometheusRules: the rules file is valid for Prometheus and its unit
// tests pass (no root needed).
func TestPrometheusRules(t *testing.T) {
	promtool := requireTools(t, "test", "promtool")[0]
	if out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(promtool, "test", "rules", rulesTestFile)
	cmd.Dir = filepath.Dir(rulesFile)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestPrometheus runs Debian's Prometheus against a running olcd: olcd in
// observe mode in a node namespace, overloaded by a busy CPU, with a little
// traffic from the peer; Prometheus on the node namespace's loopback,
// scraping it every second and evaluating deploy/prometheus/olcd-rules.yaml.
// It asserts that the exposition passes `promtool check metrics`, that
// every query of the Grafana board parses and returns at least one series,
// that every rule evaluates without error with the recording rules
// non-empty and no health alert on a healthy node, and that real faults
// raise their alerts: a refused reload (OlcdConfigReloadFailed) and a
// stopped daemon in enforce mode (OlcdDown while stopped; OlcdHeartbeatStale
// after, from the connections its datapath passed as stale meanwhile).
func TestPrometheus(t *testing.T) {
	requireRoot(t)
	tools := requireTools(t, "test", "prometheus", "promtool")
	prometheus, promtool := tools[0], tools[1]

	env := newNetEnv(t)
	env.serve(t)
	burnCPU(t)
	// A request/response service beside the greeting one, so that the
	// board's response-time panels have answers to show.
	const rrPort = serverPort + 1
	env.lineServer(t, rrPort)
	// The ports' target at 1 ms, under the line server's 2 ms a request:
	// the request the closed-loop client below always has waiting is a
	// standing queue beyond what the target allows (N* = μ̂ × 1 ms ≈ 0.5),
	// so the port is saturated and its capacity measured, which the
	// board's capacity series needs (absent until then).
	d := startDaemon(t, env, daemonConfig{Mode: "observe", Attach: "tc", Threshold: thresholdAlways,
		Ports: []int{serverPort, rrPort}, MinSamples: 1, ResponseTarget: "1ms"})
	traffic := env.trickle(t, 200*time.Millisecond)
	env.requestLoop(t, netip.AddrPortFrom(env.NodeIP, rrPort).String(), 20*time.Millisecond)
	env.requestLoop(t, netip.AddrPortFrom(env.NodeIP, rrPort).String(), 0)

	// --- olcd's exposition, as Prometheus reads it.
	body := d.get(t, "/metrics")
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(body)
	// promtool exits 3 on a naming problem; any line it prints is one.
	if out, err := check.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if got := string(d.get(t, path)); got != "ok\n" {
			t.Errorf("GET %s on an overloaded, observing olcd = %q, want \"ok\\n\"", path, got)
		}
	}

	// --- Prometheus in the node namespace.
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: olcd
    static_configs:
      - targets: [%q]
`, rules, d.metrics)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	const promAddr = "127.0.0.1:9090" // loopback of the node namespace
	logPath := filepath.Join(dir, "prometheus.log")
	t.Cleanup(func() {
		if t.Failed() {
			dumpFile(t, "prometheus log", logPath)
		}
	})
	startProc(t, logPath, "ip", "netns", "exec", env.Node, prometheus,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	pc := &promClient{base: "http://" + promAddr, hc: nsHTTPClient(env)}

	// Enough scrapes that every rate over the board's 15 s window has a
	// pair of samples, with the traffic counted between them: the window
	// full of 1 s scrapes (14, not 15: a scrape may straddle its edge).
	pc.waitSeries(t, `up{job="olcd"} == 1`, 30*time.Second)
	pc.waitSeries(t, `count_over_time(up{job="olcd"}[15s]) >= 14`, 40*time.Second)

	// --- Every query of the Grafana board.
	exprs := dashboardQueries(t)
	if len(exprs) < 10 {
		t.Fatalf("only %d queries found on the board", len(exprs))
	}
	// A panel's series may come later than the window (response time is
	// there once a tick has enough timed requests): every query has until
	// one deadline to return one.
	deadline := time.Now().Add(20 * time.Second)
	for _, q := range exprs {
		var qerr error
		if err := testutil.WaitFor(time.Until(deadline), 250*time.Millisecond, func() (bool, error) {
			n, err := pc.query(q.expr)
			qerr = err
			return err != nil || n > 0, nil
		}); err != nil {
			t.Errorf("board %s: %s: no series (%v)", q.where, q.expr, err)
		} else if qerr != nil {
			t.Errorf("board %s: %s: %v", q.where, q.expr, qerr)
		}
	}
	t.Logf("%d board queries checked", len(exprs))

	// --- The rules: loaded, evaluated without error, recording rules
	// non-empty, no health alert on this healthy node.
	groups := pc.rules(t)
	nrules := 0
	for _, g := range groups {
		for _, r := range g.Rules {
			nrules++
			if r.Health != "ok" || r.LastError != "" {
				t.Errorf("rule %s (group %s): health %q, error %q", r.Name, g.Name, r.Health, r.LastError)
			}
			if r.Type == "recording" {
				if n, err := pc.query(r.Name); err != nil || n == 0 {
					t.Errorf("recording rule %s: %d series, err %v", r.Name, n, err)
				}
			}
		}
	}
	if nrules < 10 {
		t.Fatalf("Prometheus loaded %d rules from %s", nrules, rules)
	}
	health := `ALERTS{alertname=~"OlcdDown|OlcdHeartbeatStale|OlcdConfigReloadFailed|OlcdDatapathStatsUnreadable|OlcdSignalUnavailable"}`
	if n, err := pc.query(health); err != nil || n != 0 {
		t.Errorf("%s: %d series (err %v) on a healthy node, want none", health, n, err)
	}
	// Overloaded in observe mode: the long-overload alert is on its way.
	pc.waitSeries(t, `ALERTS{alertname="OlcdWouldShedLong", alertstate="pending", job="olcd"}`, 10*time.Second)

	// --- A refused reload.
	writeFileAtomic(t, d.realCfg, []byte("mode: sometimes\n"))
	if err := d.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	pc.waitSeries(t, `ALERTS{alertname="OlcdConfigReloadFailed", alertstate="pending"}`, 10*time.Second)

	// --- A stopped daemon: no scrape answers (OlcdDown), and the
	// datapath, its heartbeat stale after 2 s, passes what it would drop in
	// enforce mode as stale.
	d.mustCLI(t, "set", "mode", "enforce")
	pc.waitSeries(t, `olcd_mode{mode="enforce"} == 1`, 10*time.Second)
	if err := d.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pc.waitSeries(t, `ALERTS{alertname="OlcdDown", alertstate="pending"}`, 10*time.Second)
	// Stopped past stale_after (2 s) and a scrape: the datapath must pass
	// as stale for a while, which no state of the stopped daemon shows.
	time.Sleep(3 * time.Second)
	if err := d.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	pc.waitSeries(t, `ALERTS{alertname="OlcdHeartbeatStale", alertstate="pending"}`, 15*time.Second)
	if n, err := pc.query(`ALERTS{alertname="OlcdDown"}`); err != nil || n != 0 {
		t.Errorf("OlcdDown still active after SIGCONT: %d series, err %v", n, err)
	}
	if ok, failed := traffic(); ok == 0 {
		t.Errorf("the trickle got no connection through (%d failed)", failed)
	}
}

// trickle connects from the peer to the server every period until the test
// ends (at most 5 minutes); the returned function stops it and reports the
// successes and failures.
func (e *netEnv) trickle(t *testing.T, period time.Duration) func() (ok, failed int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var nOK, nFail int
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				err := e.connectOnce(passTimeout)
				mu.Lock()
				if err == nil {
					nOK++
				} else {
					nFail++
				}
				mu.Unlock()
			}
		}
	}()
	stop := func() (int, int) {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return nOK, nFail
	}
	t.Cleanup(func() { stop() })
	return stop
}

// nsHTTPClient dials inside the node namespace.
func nsHTTPClient(e *netEnv) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var c net.Conn
				err := e.InNode(func() error {
					var err error
					c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
					return err
				})
				return c, err
			},
		},
	}
}

// get fetches path from olcd's metrics listener.
func (d *olcd) get(t *testing.T, path string) []byte {
	t.Helper()
	resp, err := nsHTTPClient(d.env).Get("http://" + d.metrics + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return b
}

// promClient queries Prometheus's HTTP API.
type promClient struct {
	base string
	hc   *http.Client
}

func (p *promClient) api(path string, params url.Values, into any) error {
	resp, err := p.hc.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return fmt.Errorf("%s: decode answer (%s): %w", path, resp.Status, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s: %s", env.Status, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, into)
}

// query evaluates an instant query and returns the number of series (or 1
// for a scalar).
func (p *promClient) query(expr string) (int, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return 0, err
	}
	if data.ResultType == "scalar" || data.ResultType == "string" {
		return 1, nil
	}
	var series []json.RawMessage
	if err := json.Unmarshal(data.Result, &series); err != nil {
		return 0, err
	}
	return len(series), nil
}

// waitSeries waits until expr returns at least one series.
func (p *promClient) waitSeries(t *testing.T, expr string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, 250*time.Millisecond, func() (bool, error) {
		n, err := p.query(expr)
		return err == nil && n > 0, err
	}, "%s: a series", expr)
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Name      string `json:"name"`
		Type      string `json:"type"`
		Health    string `json:"health"`
		LastError string `json:"lastError"`
	} `json:"rules"`
}

// rules returns the loaded rule groups with each rule's last evaluation.
func (p *promClient) rules(t *testing.T) []ruleGroup {
	t.Helper()
	var data struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := p.api("/api/v1/rules", nil, &data); err != nil {
		t.Fatalf("GET /api/v1/rules: %v", err)
	}
	return data.Groups
}

// grafanaVars are the board's variables and Grafana's built-ins, as
// Grafana writes them for "All" (a regex matching every value) and a rate
// window of a few scrapes.
var grafanaVars = map[string]string{"__rate_interval": "15s", "__interval": "5s", "__range": "1m", "instance": ".+", "job": ".+"}

// boardQuery is one PromQL expression of the Grafana board, its variables
// substituted.
type boardQuery struct{ where, expr string }

// dashboardQueries returns every panel target and template-variable query
// of the board (tools/board reads it as the board's picture does), with
// the variables substituted.
func dashboardQueries(t *testing.T) []boardQuery {
	t.Helper()
	d, err := board.Load(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var out []boardQuery
	for _, q := range d.Queries() {
		e, err := board.Expand(q.Expr, grafanaVars)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", dashboardFile, q.Line, q.Where, err)
		}
		out = append(out, boardQuery{q.Where, e})
	}
	return out
}

// requestLoop asks the line server at addr one line every period (0:
// the next as soon as the answer is in, so that the port is saturated)
// over one keep-alive connection, from the peer namespace, until the test
// ends.
func (e *netEnv) requestLoop(t *testing.T, addr string, period time.Duration) {
	t.Helper()
	c := e.peerDial(t, addr)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		var next <-chan time.Time
		if period > 0 {
			tick := time.NewTicker(period)
			defer tick.Stop()
			next = tick.C
		}
		buf := make([]byte, 3)
		for {
			if next != nil {
				select {
				case <-stop:
					return
				case <-next:
				}
			} else {
				select {
				case <-stop:
					return
				default:
				}
			}
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			if _, err := c.Write([]byte("q\n")); err != nil {
				return
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}
