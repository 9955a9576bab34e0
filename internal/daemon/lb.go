package daemon

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/lb"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/rules"

	"github.com/olcd/olcd/internal/olc"
)

// lbState is what the daemon tells load balancers: the HAProxy agent and
// the report of GET /v1/lb, both built each tick from the controller's
// decision (lb.Weigher), never from an estimate of their own.
type lbState struct {
	log     *slog.Logger
	weigher *lb.Weigher // owned by the tick loop
	agent   *lb.Agent
	report  atomic.Pointer[lb.Report]

	// The agent's listener, owned by the tick loop once Run started it.
	ln     net.Listener
	addr   string // what ln listens on as configured ("" off)
	served chan error
}

// init sets up the weigher and agent for cfg (nothing listens yet).
func (l *lbState) init(cfg *rules.Config, log *slog.Logger) error {
	w, err := lb.NewWeigher(cfg.LB.Weight)
	if err != nil {
		return fmt.Errorf("lb: %w", err)
	}
	l.log = log
	l.weigher = w
	l.agent = lb.NewAgent(lb.AgentConfig{SendWait: agentSendWait(cfg)}, log.With("component", "lb-agent"))
	l.report.Store(lb.FullWeight())
	return nil
}

// agentSendWait maps lb.agent.send_wait onto the agent's: in the config 0
// means never wait.
func agentSendWait(cfg *rules.Config) time.Duration {
	if cfg.LB.Agent.SendWait == 0 {
		return -1
	}
	return cfg.LB.Agent.SendWait
}

// start opens the agent listener when addr (lb.agent.address) is set,
// before the datapath attaches (a busy address fails the start); the
// returned function closes it and waits for the connections in hand.
func (l *lbState) start(addr string) (stop func(), err error) {
	if err := l.listen(addr); err != nil {
		return nil, err
	}
	return l.close, nil
}

// listen makes addr the agent's listener ("" closes it). On error the
// listener in place stays.
func (l *lbState) listen(addr string) error {
	if addr == l.addr && (addr == "") == (l.ln == nil) {
		return nil
	}
	ln, err := openAgent(addr)
	if err != nil {
		return err
	}
	l.adopt(addr, ln)
	return nil
}

// openAgent listens on addr for the agent; nil for "" (off).
func openAgent(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the load-balancer agent on %s: %w", addr, err)
	}
	return ln, nil
}

// adopt makes ln, opened by openAgent for addr, the agent's listener,
// closing the one in place. Opening and adopting are two steps so that a
// reload can refuse an address it cannot listen on before anything changes.
func (l *lbState) adopt(addr string, ln net.Listener) {
	l.close()
	l.ln, l.addr = ln, addr
	if ln == nil {
		return
	}
	served := make(chan error, 1)
	l.served = served
	go func() { served <- l.agent.Serve(ln) }()
	l.log.Info("load-balancer agent listening", "address", ln.Addr().String())
}

// close closes the agent's listener and waits for its connections.
func (l *lbState) close() {
	if l.ln == nil {
		return
	}
	l.ln.Close()
	if err := <-l.served; err != nil {
		l.log.Error("load-balancer agent stopped", "err", err)
	}
	l.ln, l.addr, l.served = nil, "", nil
}

// update folds the last tick's decision (r, on ports under cfg) into the
// weights, publishes the new report to the agent and GET /v1/lb, and
// follows a reload of the lb section's send_wait and weight parameters
// (reconfigure moves the address).
func (l *lbState) update(cfg *rules.Config, ports []loader.PortPolicy, r tickResult) {
	if err := l.weigher.SetParams(cfg.LB.Weight); err != nil {
		l.log.Error("lb weight parameters", "err", err)
	}
	l.agent.SetSendWait(agentSendWait(cfg))
	rep := l.weigher.Update(lbInput(cfg, ports, r))
	l.report.Store(rep)
	l.agent.Publish(rep)
}

// lbInput is the tick r as the weigher reads it.
func lbInput(cfg *rules.Config, ports []loader.PortPolicy, r tickResult) lb.Input {
	dec := r.decision
	bound := cfg.Controller.Bound()
	atBound := func(p float64) bool { return dec.Overloaded && p >= bound-1e-9 }
	secs := r.interval.Seconds()
	rate := func(n uint64) float64 {
		if secs <= 0 {
			return 0
		}
		return float64(n) / secs
	}
	in := lb.Input{At: r.at, Mode: cfg.Mode}
	byKey := make(map[olc.PortKey]adaptive.PortDecision, len(dec.Ports))
	for _, pd := range dec.Ports {
		byKey[pd.Key] = pd
	}
	nodeMode := cfg.Mode
	var offered, admitted float64
	for _, p := range ports {
		pd := byKey[p.Key]
		dl := r.deltas[p.Key]
		pi := lb.PortInput{
			Key: p.Key, Mode: p.Mode, DropProbability: pd.DropProbability, AtBound: atBound(pd.DropProbability),
			OfferedPerS: rate(dl.NewConns), AdmittedPerS: rate(dl.NewConns - min(dl.Dropped, dl.NewConns)),
		}
		if pr, ok := r.resp[p.Key]; ok && pr.Available {
			p50, p95, p99 := pr.P50, pr.P95, pr.P99
			pi.ResponseTime = &lb.ResponseTime{P50S: &p50, P95S: &p95, P99S: &p99}
		}
		if pd.Capacity > 0 {
			pi.Capacity = &lb.Capacity{RequestsPerS: pd.Capacity, ConnectionsPerS: pd.ConnCapacity, AgeS: pd.CapacityAge}
		}
		offered += pi.OfferedPerS
		admitted += pi.AdmittedPerS
		in.Ports = append(in.Ports, pi)
		if p.Mode == olc.ModeEnforce {
			nodeMode = olc.ModeEnforce
		}
	}
	if cfg.Mode == olc.ModeOff {
		nodeMode = olc.ModeOff
	}
	in.Node = lb.PortInput{Mode: nodeMode, DropProbability: dec.DropProbability, AtBound: atBound(dec.DropProbability),
		OfferedPerS: offered, AdmittedPerS: admitted}
	// The node's response time is the worst timed port's, as the
	// node-wide signals are (docs/signals.md).
	var node lb.ResponseTime
	for _, sig := range []struct {
		s   olc.Signal
		dst **float64
	}{{olc.ResponseTimeP50, &node.P50S}, {olc.ResponseTimeP95, &node.P95S}, {olc.ResponseTimeP99, &node.P99S}} {
		if v, ok := r.snap.Get(sig.s); ok {
			*sig.dst = &v
		}
	}
	if node.P95S != nil {
		in.Node.ResponseTime = &node
	}
	if v, ok := r.snap.Get(olc.CPUBusy); ok {
		in.CPUUtilization = &v
	}
	for _, s := range dec.Signals {
		if s.Available && s.Signal.IsFraction() {
			if in.Utilization == nil {
				in.Utilization = map[string]float64{}
			}
			in.Utilization[s.Signal.String()] = s.Value
		}
	}
	return in
}

// LB returns the document of GET /v1/lb.
func (d *Daemon) LB() *lb.Report { return d.lb.report.Load() }

// withLB serves GET /v1/lb beside h's routes (the admin socket and the
// metrics listener both answer it).
func (d *Daemon) withLB(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/lb", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.LB())
	})
	mux.Handle("/", h)
	return mux
}

// status returns the status's lb section.
func (l *lbState) status() *api.LBStatus {
	if l.agent == nil {
		return nil
	}
	rep := l.report.Load()
	st := &api.LBStatus{Weight: rep.Node.Weight, State: string(rep.Node.State), AgentReply: rep.Node.AgentReply, AgentAnswers: l.agent.Counts()}
	if l.ln != nil {
		st.AgentAddress = l.ln.Addr().String()
	}
	return st
}

var (
	descLBWeight     = prometheus.NewDesc("olcd_lb_weight_ratio", "Weight told to load balancers for a protected port (0..1 of the full weight), the answer to an agent-send naming the port.", []string{"proto", "port"}, nil)
	descLBDrain      = prometheus.NewDesc("olcd_lb_drain", "1 while load balancers are told to drain a protected port (shedding at the bound).", []string{"proto", "port"}, nil)
	descLBNodeWeight = prometheus.NewDesc("olcd_lb_node_weight_ratio", "Weight told to load balancers for the node (0..1 of the full weight), the answer to an agent check that names no port.", nil, nil)
	descLBNodeDrain  = prometheus.NewDesc("olcd_lb_node_drain", "1 while load balancers are told to drain the node (shedding at the bound).", nil, nil)
	descLBAnswers    = prometheus.NewDesc("olcd_lb_agent_answers_total", "HAProxy agent-check connections answered, by kind: node, port, unknown (not a protected port), overflow (answered by the accept loop).", []string{"answer"}, nil)
)

// lbCollector reads the last report at scrape time.
type lbCollector struct{ l *lbState }

func (c *lbCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLBWeight
	ch <- descLBDrain
	ch <- descLBNodeWeight
	ch <- descLBNodeDrain
	ch <- descLBAnswers
}

func (c *lbCollector) Collect(ch chan<- prometheus.Metric) {
	rep := c.l.report.Load()
	// The node's answer has families of its own: summing or averaging
	// the per-port series must not count it as one more port.
	ch <- prometheus.MustNewConstMetric(descLBNodeWeight, prometheus.GaugeValue, rep.Node.Weight)
	ch <- prometheus.MustNewConstMetric(descLBNodeDrain, prometheus.GaugeValue, b2f(rep.Node.State == lb.StateDrain))
	for _, p := range rep.Ports {
		port := strconv.Itoa(int(p.Port))
		ch <- prometheus.MustNewConstMetric(descLBWeight, prometheus.GaugeValue, p.Weight, p.Proto, port)
		ch <- prometheus.MustNewConstMetric(descLBDrain, prometheus.GaugeValue, b2f(p.State == lb.StateDrain), p.Proto, port)
	}
	for k, n := range c.l.agent.Counts() {
		ch <- prometheus.MustNewConstMetric(descLBAnswers, prometheus.CounterValue, float64(n), k)
	}
}
