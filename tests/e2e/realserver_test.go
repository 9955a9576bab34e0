package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/debpkg"
	"github.com/olcd/olcd/internal/testutil"
	"github.com/olcd/olcd/tests/e2e/overload"
)

// Response timing against servers no one here wrote, from Debian packages,
// and the edges of the signal (idle, sparse, a server that never answers).

// requirePackages finds the commands (command → Debian package),
// installing what is missing when root (debpkg); without them the test is
// skipped with the reason.
func requirePackages(t *testing.T, cmds map[string]string) map[string]string {
	t.Helper()
	found := map[string]string{}
	for cmd, pkg := range cmds {
		p, err := debpkg.Find(cmd, pkg)
		if err != nil {
			t.Skip(err)
		}
		found[cmd] = p
	}
	return found
}

// startGroup starts a server with its workers in a process group of its
// own and kills the whole group at the end of the test: a master killed
// alone leaves its workers behind (nginx, php-fpm), holding whatever the
// test inherited. Nothing the server inherits is kept open but its log.
func startGroup(t *testing.T, logPath string, argv ...string) {
	t.Helper()
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("start %s: %v", strings.Join(argv, " "), err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not exit", argv[len(argv)-1])
		}
		// Workers reparented before the group kill reached them are in
		// the group still; one more sweep.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
}

// peerClient is an HTTP client whose connections are made from the peer
// namespace, keeping them alive.
func (e *netEnv) peerClient() *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := e.InPeer(func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		MaxIdleConnsPerHost: 4,
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// connectRTT is the median TCP handshake time from the peer to addr: one
// round trip of the veth.
func (e *netEnv) connectRTT(t *testing.T, addr string) time.Duration {
	t.Helper()
	var ds []time.Duration
	for range 20 {
		var c net.Conn
		var d time.Duration
		err := e.InPeer(func() error {
			var err error
			t0 := time.Now() // the handshake only, not the switch of namespace
			c, err = net.DialTimeout("tcp", addr, 2*time.Second)
			d = time.Since(t0)
			return err
		})
		if err != nil {
			t.Fatalf("connect %s: %v", addr, err)
		}
		ds = append(ds, d)
		c.Close()
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// get runs n sequential GETs of url on kept-alive connections and returns
// each latency (request written to body read), minus rtt.
func get(t *testing.T, c *http.Client, url string, n int, rtt time.Duration) []float64 {
	t.Helper()
	var out []float64
	for range n {
		t0 := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", url, resp.Status)
		}
		out = append(out, (time.Since(t0) - rtt).Seconds())
	}
	slices.Sort(out)
	return out
}

func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func statusPort(st *api.Status, port int) *api.PortStatus {
	for i := range st.Ports {
		if st.Ports[i].Proto == "tcp" && int(st.Ports[i].Port) == port {
			return &st.Ports[i]
		}
	}
	return nil
}

// TestResponseTimeRealServers: nginx serving a static file and nginx with
// php-fpm running a script that sleeps 20 ms, from Debian's packages,
// started by the test in the node namespace; olcd times port 80 and its
// p50 matches the client's (latency minus the veth round trip) within 5 %
// or 0.5 ms, whichever is larger.
func TestResponseTimeRealServers(t *testing.T) {
	requireRoot(t)
	bin := requirePackages(t, map[string]string{"nginx": "nginx", "php-fpm": "php-fpm"})
	env := newNetEnv(t)
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "index.html"), []byte(strings.Repeat("olcd static file\n", 64)), 0o644))
	must(os.WriteFile(filepath.Join(dir, "sleep.php"), []byte("<?php usleep(20000); echo \"slept 20 ms\\n\";\n"), 0o644))
	sock := filepath.Join(dir, "php-fpm.sock")
	must(os.WriteFile(filepath.Join(dir, "php-fpm.conf"), []byte(fmt.Sprintf(`[global]
error_log = %[1]s/php-fpm.log
pid = %[1]s/php-fpm.pid
daemonize = no
[www]
user = root
group = root
listen = %[2]s
pm = static
pm.max_children = 4
`, dir, sock)), 0o644))
	must(os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(fmt.Sprintf(`user root;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server {
		listen %[2]s:80;
		root %[1]s;
		location ~ \.php$ {
			include /etc/nginx/fastcgi_params;
			fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
			fastcgi_pass unix:%[3]s;
		}
	}
}
`, dir, env.NodeIP, sock)), 0o644))
	startGroup(t, filepath.Join(dir, "php-fpm.out"), "ip", "netns", "exec", env.Node, bin["php-fpm"], "-F", "-R", "-y", filepath.Join(dir, "php-fpm.conf"))
	startGroup(t, filepath.Join(dir, "nginx.out"), "ip", "netns", "exec", env.Node, bin["nginx"], "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{"nginx-error.log", "php-fpm.log", "nginx.out", "php-fpm.out"} {
				dumpFile(t, f, filepath.Join(dir, f))
			}
		}
	})
	addr := fmt.Sprintf("%s:80", env.NodeIP)
	testutil.Eventually(t, 10*time.Second, 100*time.Millisecond, func() (bool, error) {
		err := env.InPeer(func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		return err == nil, err
	}, "nginx reachable on %s", addr)
	d := startDaemon(t, env, daemonConfig{Mode: "observe", Attach: "tc", Threshold: thresholdNever, Ports: []int{80}})
	client := env.peerClient()
	rtt := env.connectRTT(t, addr)
	for _, c := range []struct {
		name, path string
		n          int
	}{
		{"nginx static file", "/index.html", 300},
		{"nginx + php-fpm, 20 ms", "/sleep.php", 150},
	} {
		url := "http://" + addr + c.path
		get(t, client, url, 5, rtt) // warm the connections and php-fpm
		before := statusPort(d.nextTick(t, d.mustStatus(t)), 80)
		lat := get(t, client, url, c.n, rtt)
		after := statusPort(d.nextTick(t, d.nextTick(t, d.mustStatus(t))), 80)
		if after == nil || !after.Timed {
			t.Fatalf("%s: port 80 not timed: %+v", c.name, after)
		}
		n, p50, _ := overload.HistogramQuantiles(before, after)
		want := quantile(lat, 0.5)
		t.Logf("%-24s client p50 %.3f ms (rtt %.3f ms subtracted), olcd p50 %.3f ms, %d requests, %d timed",
			c.name, want*1e3, rtt.Seconds()*1e3, p50*1e3, c.n, n)
		if n < uint64(c.n)*9/10 {
			t.Errorf("%s: olcd timed %d of %d requests", c.name, n, c.n)
		}
		if math.IsNaN(p50) || math.Abs(p50-want) > math.Max(0.05*want, 0.0005) {
			t.Errorf("%s: p50 olcd %.3f ms, client %.3f ms: more than 5 %% or 0.5 ms apart", c.name, p50*1e3, want*1e3)
		}
	}
}

// lineServer listens on port in the node namespace and answers each line
// after 2 ms, except lines starting with "hang", which it never answers.
func (e *netEnv) lineServer(t *testing.T, port int) {
	t.Helper()
	e.ServeTCP(t, uint16(port), 256, 30*time.Second, func(in []byte) []byte {
		if strings.HasPrefix(string(in), "hang") {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
		return []byte("ok\n")
	})
}

func (e *netEnv) peerDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	var c net.Conn
	if err := e.InPeer(func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

func ask(t *testing.T, c net.Conn, line string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
}

// TestResponseTimeEdges: an idle port, a sparse one (one request now and
// then) and a server that never answers give an unavailable response time,
// never 0, and nothing stuck: the next tick without samples is unavailable
// again, requests that wait are bounded in flight and leave it when their
// clients close, and the flow table's occupancy is in the status. The
// status text, JSON and metrics carry the signals.
func TestResponseTimeEdges(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	env.lineServer(t, serverPort)
	d := startDaemon(t, env, daemonConfig{Mode: "observe", Attach: "tc", Threshold: thresholdNever, MinSamples: 3})
	addr := env.serverAddr()
	unavailable := func(st *api.Status, what string) {
		t.Helper()
		p := statusPort(st, serverPort)
		if p == nil || !p.Timed || p.ResponseTime == nil {
			t.Fatalf("%s: port %d not timed: %+v", what, serverPort, p)
		}
		if rt := p.ResponseTime; rt.P50S != nil || rt.P95S != nil || rt.P99S != nil {
			t.Errorf("%s: response time %v/%v/%v with %d samples, want unavailable", what, deref(rt.P50S), deref(rt.P95S), deref(rt.P99S), rt.Samples)
		}
		if s := signalNamed(st, "response_time_p95"); s != nil && s.Value != nil {
			t.Errorf("%s: node response_time_p95 = %v, want unavailable", what, *s.Value)
		}
	}

	// Idle.
	st := d.nextTick(t, d.nextTick(t, d.mustStatus(t)))
	unavailable(st, "idle port")
	if st.ResponseTiming == nil || st.ResponseTiming.FlowTableCapacity == 0 {
		t.Fatalf("status has no flow table: %+v", st.ResponseTiming)
	}

	// Sparse: one request is below the minimum of 3.
	c := env.peerDial(t, addr)
	defer c.Close()
	st = d.mustStatus(t)
	ask(t, c, "one")
	unavailable(d.nextTick(t, d.nextTick(t, st)), "one request")

	// A burst of 5 is available in its tick; the ticks after it are not.
	st = d.nextTick(t, d.mustStatus(t))
	for range 5 {
		ask(t, c, "burst")
	}
	seen := false
	for i := 0; i < 3 && !seen; i++ {
		st = d.nextTick(t, st)
		if p := statusPort(st, serverPort); p != nil && p.ResponseTime != nil && p.ResponseTime.P50S != nil {
			seen = true
			if v := *p.ResponseTime.P50S; v < 0.0015 || v > 0.05 {
				t.Errorf("burst p50 %.6f s, want about 2 ms", v)
			}
			if s := signalNamed(st, "response_time_p50"); s == nil || s.Value == nil {
				t.Errorf("node response_time_p50 unavailable in the burst's tick")
			}
		}
	}
	if !seen {
		t.Fatalf("the burst's 5 responses never made the signal available")
	}
	unavailable(d.nextTick(t, d.nextTick(t, st)), "after the burst")

	// A server that never answers: in flight while the clients wait, none
	// once they close; never a response time.
	var hung []net.Conn
	for range 6 {
		h := env.peerDial(t, addr)
		if _, err := h.Write([]byte("hang\n")); err != nil {
			t.Fatal(err)
		}
		hung = append(hung, h)
	}
	st = d.pollStatus(t, "6 requests in flight", 5*time.Second, func(s *api.Status) bool {
		p := statusPort(s, serverPort)
		return p != nil && p.InflightRequests != nil && *p.InflightRequests == 6
	})
	unavailable(st, "never answering")
	if s := signalNamed(st, "inflight_requests"); s == nil || s.Value == nil || *s.Value != 6 {
		t.Errorf("node inflight_requests %+v, want 6", s)
	}
	text := d.mustCLI(t, "status")
	for _, want := range []string{"RESPONSE P50", "INFLIGHT", "flow table:", "waiting for an answer"} {
		if !strings.Contains(text, want) {
			t.Errorf("olcd status lacks %q:\n%s", want, text)
		}
	}
	mfs := d.scrape(t)
	if mf := mfs["olcd_port_response_time_seconds"]; mf == nil || len(mf.GetMetric()) == 0 {
		t.Errorf("no olcd_port_response_time_seconds histogram")
	} else if n := len(mf.GetMetric()[0].GetHistogram().GetBucket()); n == 0 || n > 30 {
		t.Errorf("olcd_port_response_time_seconds has %d le-buckets, want 1..30", n)
	}
	if v, ok := metricValue(mfs, "olcd_port_inflight_requests", "port", fmt.Sprint(serverPort)); !ok || v != 6 {
		t.Errorf("olcd_port_inflight_requests = %v (%v), want 6", v, ok)
	}
	for _, h := range hung {
		h.Close()
	}
	st = d.pollStatus(t, "nothing in flight after the clients closed", 5*time.Second, func(s *api.Status) bool {
		p := statusPort(s, serverPort)
		return p != nil && p.InflightRequests != nil && *p.InflightRequests == 0
	})
	unavailable(st, "after the clients gave up")
}

// TestResponseTimeDrivesShedding: a threshold on response_time_p95 (1 ms,
// written as a duration) against a server that answers in 2 ms starts an
// overload through the existing law, in enforce mode: the port's drop
// probability rises and the decision log's overload event carries the
// measured queue.
func TestResponseTimeDrivesShedding(t *testing.T) {
	requireRoot(t)
	env := newNetEnv(t)
	env.lineServer(t, serverPort)
	d := startDaemon(t, env, daemonConfig{Mode: "enforce", Attach: "tc", Threshold: thresholdNever, MinSamples: 3, ResponseP95: "1ms"})
	c := env.peerDial(t, env.serverAddr())
	defer c.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			if _, err := c.Write([]byte("req\n")); err != nil {
				return
			}
			if _, err := io.ReadFull(c, make([]byte, 3)); err != nil {
				return
			}
			if d.proc.exited() {
				return
			}
		}
	}()
	st := d.pollStatus(t, "an overload from response_time_p95", 10*time.Second, func(s *api.Status) bool {
		return s.Overload.Active && portP(s) > 0
	})
	if s := signalNamed(st, "response_time_p95"); s == nil || s.Value == nil || *s.Value < 0.0015 || s.Threshold == nil || *s.Threshold != 0.001 {
		t.Errorf("response_time_p95 %+v, want about 2 ms against a 1 ms threshold", s)
	}
	c.Close()
	<-done
	found := false
	for _, r := range records(d.decisionRecords(t), "overload_start") {
		if _, ok := r["response_time"]; ok {
			found = true
		}
	}
	if !found {
		t.Errorf("no overload_start with the measured queue in the decision log")
	}
}
