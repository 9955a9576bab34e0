package daemon

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/lb"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/resptime"
	"github.com/olcd/olcd/internal/rules"

	"github.com/olcd/olcd/internal/olc"
)

// TestLBInput: what the weigher reads is the tick's decision: the ports'
// p and the node's, at the bound only in an overload, offered and admitted
// from the counter deltas, the node enforcing when one port enforces.
func TestLBInput(t *testing.T) {
	cfg, _, err := rules.Parse([]byte("mode: observe\ncontroller: {min_pass_rate: 0.1}\nports: [{port: 80, mode: enforce}, {port: 81}]\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k80, k81 := olc.PortKey{Proto: olc.ProtoTCP, Port: 80}, olc.PortKey{Proto: olc.ProtoTCP, Port: 81}
	ports := []loader.PortPolicy{{Key: k80, Mode: olc.ModeEnforce}, {Key: k81, Mode: olc.ModeObserve}}
	r := tickResult{
		at: time.Unix(100, 0), interval: 500 * time.Millisecond,
		decision: adaptive.Decision{Overloaded: true, DropProbability: 0.9,
			Ports: []adaptive.PortDecision{{Key: k80, DropProbability: 0.9}, {Key: k81, DropProbability: 0.5}}},
		deltas: map[olc.PortKey]loader.Counters{k80: {NewConns: 100, Dropped: 90}, k81: {NewConns: 50}},
	}
	in := lbInput(cfg, ports, r)
	if in.Node.Mode != olc.ModeEnforce || !in.Node.AtBound || in.Node.DropProbability != 0.9 {
		t.Errorf("node %+v: want enforce, at the bound 0.9", in.Node)
	}
	if p := in.Ports[0]; !p.AtBound || p.OfferedPerS != 200 || p.AdmittedPerS != 20 || p.Mode != olc.ModeEnforce {
		t.Errorf("tcp/80 %+v: want at the bound, 200/s offered, 20/s admitted", p)
	}
	if p := in.Ports[1]; p.AtBound || p.Mode != olc.ModeObserve || p.AdmittedPerS != 100 {
		t.Errorf("tcp/81 %+v: want observe, not at the bound, 100/s admitted", p)
	}
	if in.Ports[0].ResponseTime != nil || in.Node.ResponseTime != nil {
		t.Errorf("response time %+v / %+v without any timing: want null", in.Ports[0].ResponseTime, in.Node.ResponseTime)
	}
	// Timed ports carry their quantiles; one with too few samples stays null.
	r.resp = map[olc.PortKey]resptime.Port{
		k80: {Samples: 40, Available: true, P50: 0.01, P95: 0.05, P99: 0.09},
		k81: {Samples: 1},
	}
	r.snap.Set(olc.ResponseTimeP95, 0.05)
	timed := lbInput(cfg, ports, r)
	if rt := timed.Ports[0].ResponseTime; rt == nil || *rt.P50S != 0.01 || *rt.P95S != 0.05 || *rt.P99S != 0.09 {
		t.Errorf("tcp/80 response time %+v: want p50 10 ms, p95 50 ms, p99 90 ms", rt)
	}
	if timed.Ports[1].ResponseTime != nil {
		t.Errorf("tcp/81 with 1 sample: response time %+v, want null", timed.Ports[1].ResponseTime)
	}
	if rt := timed.Node.ResponseTime; rt == nil || *rt.P95S != 0.05 || rt.P50S != nil {
		t.Errorf("node response time %+v: want the node-wide p95 only", rt)
	}
	r.decision.Overloaded = false
	if in := lbInput(cfg, ports, r); in.Ports[0].AtBound {
		t.Error("at the bound outside an overload")
	}
	w, _ := lb.NewWeigher(lb.Params{Smoothing: 1, MinWeight: 0.1})
	rep := w.Update(in)
	if rep.Ports[0].AgentReply != "up drain 10%" || rep.Ports[1].AgentReply != "up ready 100%" {
		t.Errorf("replies %q, %q: want the enforcing port drained at its floor, the observing one untouched", rep.Ports[0].AgentReply, rep.Ports[1].AgentReply)
	}
}

// TestLBEndpoints: with lb.agent.address set, the agent answers from the
// daemon's ticks, and GET /v1/lb (admin socket and metrics listener) and
// the status carry the same answer.
func TestLBEndpoints(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	d := startTestDaemon(t, testConfig(1, "500ms", "5s", 4)+"lb: {agent: {address: "+addr+"}}\n")
	stop, err := d.lb.start(d.eng.cfg.LB.Agent.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	d.tick()

	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("tcp/8080\n"))
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "up ready 100%\n" {
		t.Errorf("agent answered %q, want full weight on an idle node", b)
	}

	srv := httptest.NewServer(d.withLB(d.metrics.handler()))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/lb")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep lb.Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Ports) != 1 || rep.Ports[0].Port != 8080 || rep.Ports[0].Weight != 1 || rep.Node.AgentReply != "up ready 100%" || rep.Mode != "enforce" {
		t.Errorf("GET /v1/lb: %+v", rep)
	}
	resp2, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if !strings.Contains(string(body), `olcd_lb_weight_ratio{port="8080",proto="tcp"} 1`) {
		t.Errorf("metrics lack olcd_lb_weight_ratio for tcp/8080")
	}
	d.publish()
	if st := d.Status().LB; st == nil || st.AgentAddress != addr || st.AgentAnswers[lb.AnswerPort] != 1 {
		t.Errorf("status lb %+v", st)
	}
}

// TestLBAgentFollowsReload: a reload that moves lb.agent.address moves the
// listener; one naming a busy address is refused naming it, and the old
// listener stays; one removing it closes the listener.
func TestLBAgentFollowsReload(t *testing.T) {
	free := func() (string, net.Listener) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln.Addr().String(), ln
	}
	first, ln1 := free()
	ln1.Close()
	second, ln2 := free()
	ln2.Close()
	busy, lnBusy := free()
	defer lnBusy.Close()
	base := testConfig(1, "500ms", "5s", 4)
	d := startTestDaemon(t, base+"lb: {agent: {address: "+first+"}}\n")
	stop, err := d.lb.start(d.eng.cfg.LB.Agent.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	d.links.following = true
	answers := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		b, _ := io.ReadAll(c)
		return strings.HasPrefix(string(b), "up ")
	}
	step := func(cfg string) {
		t.Helper()
		d.write(t, cfg)
		if err := d.reload("test"); err != nil {
			t.Fatal(err)
		}
		d.tick()
		d.tick()
	}
	step(base + "lb: {agent: {address: " + second + "}}\n")
	if !answers(second) || answers(first) {
		t.Errorf("after moving to %s: answers there %v, still at %s %v", second, answers(second), first, answers(first))
	}
	// A busy address refuses the reload, at its line: the running config
	// and listener stay (the reload used to succeed, the agent staying
	// where it was with only a log line to say so).
	running := d.eng.cfg
	d.write(t, base+"lb: {agent: {address: "+busy+"}}\n")
	if err := d.reload("test"); err == nil || !strings.Contains(err.Error(), "olcd.yaml:8: lb.agent.address: listen for the load-balancer agent on "+busy) {
		t.Fatalf("reload to the busy %s: %v, want a refusal at its line", busy, err)
	}
	d.tick()
	if !answers(second) || d.eng.cfg != running {
		t.Errorf("a busy address %s dropped the listener on %s (config replaced: %v)", busy, second, d.eng.cfg != running)
	}
	step(base)
	if answers(second) || d.lb.ln != nil {
		t.Errorf("without lb.agent.address the listener stays")
	}
}
