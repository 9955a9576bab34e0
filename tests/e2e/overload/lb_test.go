package overload

import (
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLBOptionsDefaults: the options LBOptions shares with Options take
// the overload harness's defaults; a node's harness options carry them.
func TestLBOptionsDefaults(t *testing.T) {
	var o LBOptions
	o.defaults()
	if o.Work != 5*time.Millisecond || o.SLO != 200*time.Millisecond || o.Timeout != time.Second || o.Quota != 0.5 ||
		o.Load != 1.6 || o.Before != 10*time.Second || o.After != 25*time.Second || o.ResponseTarget != "auto" || o.Progress != io.Discard {
		t.Errorf("defaults: %+v", o)
	}
	set := LBOptions{Work: time.Millisecond, SLO: time.Second, Timeout: 2 * time.Second, Quota: 0.25, Load: 2, ResponseTarget: "0.05"}
	set.defaults()
	if set.Work != time.Millisecond || set.SLO != time.Second || set.Timeout != 2*time.Second || set.Quota != 0.25 || set.Load != 2 || set.ResponseTarget != "0.05" {
		t.Errorf("set options changed: %+v", set)
	}
	n := set.nodeOptions("/out/node-a")
	if n.OutDir != "/out/node-a" || n.Work != set.Work || n.SLO != set.SLO || n.Timeout != set.Timeout || n.Quota != 0.25 ||
		n.GOMAXPROCS != 1 || n.OlcdInterval != 500*time.Millisecond || n.HealthRate != 10 {
		t.Errorf("node options: %+v", n)
	}
}

// TestLBCapacityAtRun: each node's C is scaled down by its extra CPU per
// response against its calibration's knee, never up, and not beyond
// MaxSlowdown; without both nodes' figures C_A + C_B' stands.
func TestLBCapacityAtRun(t *testing.T) {
	cal := func(c float64) *Calibration {
		return &Calibration{CapacityRPS: c, Steps: []CalibrationStep{
			{RateRPS: c - 10, GoodputRPS: c - 10, CPUBusy: 0.9},
			{RateRPS: c, GoodputRPS: c, CPUBusy: 0.972, Knee: true},
		}}
	}
	l := &LBHarness{CalA: cal(90), CalBHalved: cal(45), nodes: []*lbNode{{name: "a"}, {name: "b"}}}
	run := func(nodes ...LBNodePhase) *LBRunResult {
		return &LBRunResult{Phases: []LBPhase{{PhaseResult: PhaseResult{Name: LBPhaseHalved}, Nodes: nodes}}}
	}
	at := func(perS, cpu float64) LBNodePhase { return LBNodePhase{ResponsesPerS: perS, CPUBusy: cpu} }
	for _, tc := range []struct {
		name     string
		r        *LBRunResult
		want     float64
		slowdown []float64
		ok       bool
	}{
		{"as calibrated", run(at(90, 0.972), at(45, 0.972)), 135, []float64{0, 0}, true},
		{"a 10 % slower", run(at(90, 1.0692), at(45, 0.972)), 90/1.1 + 45, []float64{0.1, 0}, true},
		{"b faster", run(at(90, 0.972), at(50, 0.972)), 135, []float64{0, -0.1}, true},
		{"b 30 % slower", run(at(90, 0.972), at(45, 1.2636)), 135, []float64{0, 0.3}, false},
		{"b served nothing", run(at(90, 0.972), at(0, 0.5)), 135, []float64{0, 0}, false},
		{"one node only", run(at(90, 0.972)), 135, []float64{0, 0}, false},
	} {
		rps, slow, ok := l.CapacityAtRun(tc.r)
		bad := ok != tc.ok || math.Abs(rps-tc.want) > 0.01 || len(slow) != len(tc.slowdown)
		for i := range slow {
			bad = bad || i >= len(tc.slowdown) || math.Abs(slow[i]-tc.slowdown[i]) > 0.001
		}
		if bad {
			t.Errorf("%s: %.2f/s, slowdown %.3f, ok %v; want %.2f/s, %.3f, %v", tc.name, rps, slow, ok, tc.want, tc.slowdown, tc.ok)
		}
	}
}

// TestHAProxyConfigReuse: connection per request keeps http-reuse never
// and HAProxy's default retries; server keep-alive shares the pool and
// resends a request a reused connection reset before any answer. HAProxy,
// when installed, accepts both (haproxy -c).
func TestHAProxyConfigReuse(t *testing.T) {
	haproxy, haveHAProxy := exec.LookPath("haproxy")
	if haveHAProxy != nil {
		haproxy, haveHAProxy = exec.LookPath("/usr/sbin/haproxy")
	}
	for _, tc := range []struct {
		keepAlive bool
		want      []string
		not       []string
	}{
		{false, []string{"\n    http-reuse never\n"}, []string{"http-reuse always", "retry-on"}},
		{true, []string{"\n    http-reuse always\n    retry-on conn-failure empty-response\n"}, []string{"http-reuse never"}},
	} {
		var b strings.Builder
		err := haproxyConfig.Execute(&b, map[string]any{"Socket": "/tmp/x.sock", "Port": lbFrontendPort,
			"Servers": []struct{ Name, Addr string }{{"a", "192.0.2.1:18080"}}, "HealthPort": HealthPort, "Agent": true,
			"AgentPort": lbAgentPort, "WorkPort": WorkPort, "KeepAlive": tc.keepAlive})
		if err != nil {
			t.Fatal(err)
		}
		cfg := b.String()
		for _, w := range tc.want {
			if !strings.Contains(cfg, w) {
				t.Errorf("keep-alive %v: config lacks %q:\n%s", tc.keepAlive, w, cfg)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(cfg, n) {
				t.Errorf("keep-alive %v: config has %q:\n%s", tc.keepAlive, n, cfg)
			}
		}
		if haveHAProxy == nil {
			path := filepath.Join(t.TempDir(), "haproxy.cfg")
			if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(haproxy, "-c", "-f", path).CombinedOutput(); err != nil {
				t.Errorf("keep-alive %v: haproxy -c: %v\n%s", tc.keepAlive, err, out)
			}
		}
	}
}
