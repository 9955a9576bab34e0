package overload

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/olcd/olcd/internal/api"
)

// Variant is what protects the backend in a run.
type Variant string

// The ways a scenario runs.
const (
	// VariantNone: nothing; the collapse the others are measured against.
	VariantNone Variant = "none"
	// VariantObserve: olcd in observe mode; counts what it would drop.
	VariantObserve Variant = "observe"
	// VariantEnforce: olcd in enforce mode on TC ingress of the host veth,
	// watching the backend's cgroup and the work port's response time
	// (Calibration.ResponseThreshold), the CPU as a guard.
	VariantEnforce Variant = "enforce"
	// VariantEnforceCPU: olcd enforcing on the cgroup's CPU alone, as
	// before response times were measured: blind to a bottleneck that is
	// not CPU (pool, php).
	VariantEnforceCPU Variant = "enforce-cpu"
	// VariantEnforceReject: VariantEnforce answering shed SYNs with a
	// RST|ACK (action.kind: reject) instead of dropping them.
	VariantEnforceReject Variant = "enforce-reject"
	// VariantStatic: an nftables SYN rate limit at the calibrated capacity.
	VariantStatic Variant = "static"
	// VariantStaticReject: the same limit answering with a TCP reset.
	VariantStaticReject Variant = "static-reject"
	// VariantInApp: go-kratos/aegis ratelimit/bbr in the backend (429s;
	// the cpu backend only).
	VariantInApp Variant = "inapp"
)

// Variants lists every variant in report order.
var Variants = []Variant{VariantNone, VariantObserve, VariantEnforce, VariantEnforceCPU, VariantEnforceReject, VariantStatic, VariantStaticReject, VariantInApp}

// olcdVariant reports whether v runs olcd.
func olcdVariant(v Variant) bool {
	switch v {
	case VariantObserve, VariantEnforce, VariantEnforceCPU, VariantEnforceReject:
		return true
	}
	return false
}

// Backend is the service under load.
type Backend string

// The backends of the matrix.
const (
	// BackendCPU is the harness's HTTP server spending Options.Work of
	// CPU per request under a 1-CPU quota: CPU is the bottleneck.
	BackendCPU Backend = "cpu"
	// BackendPool is the harness's HTTP server with PoolWorkers workers
	// that each hold a request PoolHold without CPU (a thread or database
	// connection pool): C ≈ 320/s at a small share of the quota.
	BackendPool Backend = "pool"
	// BackendPHP is Debian's nginx in front of php-fpm (pm = static,
	// PHPChildren children) running a script with a little CPU and a
	// 20 ms sleep (php.go).
	BackendPHP Backend = "php"
	// BackendDB is Debian's MariaDB answering one CPU-bound query
	// (DBQueryWork) per connection (mariadb.go); its clients are
	// closed-pool database clients only.
	BackendDB Backend = "db"
)

// Backends lists the backends in report order.
var Backends = []Backend{BackendCPU, BackendPool, BackendPHP, BackendDB}

// ClientsOf lists the clients backend b is run with: a database speaks no
// HTTP, so the db backend has the closed pool's database clients alone.
func ClientsOf(b Backend) []Clients {
	if b == BackendDB {
		return []Clients{ClientsClosedPool}
	}
	return ClientKinds
}

// The pool backend's workers and how long each holds a request.
const (
	PoolWorkers = 8
	PoolHold    = 25 * time.Millisecond
)

// Clients is how the load's clients behave.
type Clients string

// The clients of the matrix.
const (
	// ClientsOpenGiveUp: vegeta, open loop, a new connection per request,
	// giving up after Options.Timeout (1 s), before a dropped SYN's first
	// retransmit.
	ClientsOpenGiveUp Clients = "open-giveup"
	// ClientsOpenRetry: the same open loop with a 10 s connect timeout
	// (RetryConnectTimeout), in which the kernel retransmits a dropped
	// SYN after 1, 3 and 7 s.
	ClientsOpenRetry Clients = "open-retry"
	// ClientsClosedPool: ClosedPoolClients blocking clients, each
	// connecting, sending one request and waiting for the answer or
	// ClosedPoolTimeout (closedpool.go),
	// at its share of the schedule with catch-up skipped (a
	// thread-per-request application, a connection-per-query database
	// client).
	ClientsClosedPool Clients = "closed-pool"
	// ClientsKeepAlive: KeepAliveClients blocking clients as the closed
	// pool's, each with one keep-alive connection of its own (its own
	// http.Transport) that it reuses for every request, and a
	// KeepAliveTimeout budget per request: the pooled clients of a
	// service (issue 26). A request that times out closes its connection
	// (net/http cancels it), so the next one connects again; a reset
	// reused connection is retried once on a new one, within the budget.
	ClientsKeepAlive Clients = "keepalive"
)

// The keep-alive clients: 600 connections, the pool of a few application
// servers in front of one node, each request given 1 s, a typical client
// timeout (the open-loop clients' Options.Timeout).
const (
	KeepAliveClients = 600
	KeepAliveTimeout = time.Second
)

// KeepAliveLow is the 0.5 C phase of the keep-alive scenarios: long enough
// that every one of the KeepAliveClients has sent its first request, and so
// opened its connection, before the 3 C phase: client i's first request is
// due at i / (0.5 C), 600 / (0.5 × 150/s) = 8 s at C = 150/s, what the cpu
// and php backends calibrate to on a 1-CPU quota of this 2-core machine
// (150–180/s). At a lower C the last clients open their connections early
// in the 3 C phase, as new connections.
const KeepAliveLow = 8 * time.Second

// ClientKinds lists the clients in report order.
var ClientKinds = []Clients{ClientsOpenGiveUp, ClientsOpenRetry, ClientsClosedPool}

// RetryConnectTimeout bounds a connect of the open-retry clients.
const RetryConnectTimeout = 10 * time.Second

// ScenarioPhase is a phase of a scenario, its load relative to capacity.
type ScenarioPhase struct {
	// Name labels the phase ("3x").
	Name string
	// Load is the offered load as a multiple of the calibrated capacity C.
	Load float64
	// Duration is the phase's length.
	Duration time.Duration
	// Caps, when set, are the work port's static caps from the phase's
	// start on (olcd variants; patched into the running olcd, `olcd set
	// patch`). Once a phase has set caps, every later phase's Caps is
	// what is in force: nil there removes them.
	Caps *PhaseCaps
}

// PhaseCaps are the work port's static caps (ports[].caps) in a phase,
// rates as multiples of the calibrated capacity C. The zero value sets
// none.
type PhaseCaps struct {
	// Rate is caps.rate, the port's new connections per second, × C.
	Rate float64
	// HeavyRate is a caps.sources entry for the heavy client (the client
	// namespace's own address, /32), × C.
	HeavyRate float64
	// InFlight is caps.in_flight as the work it holds: InFlight × C
	// requests, the queue that takes InFlight to serve at C.
	InFlight time.Duration
	// ResponseTarget is the port's response_target ("": the
	// controller's).
	ResponseTarget string
}

// InFlightOf is caps.in_flight at capacity c (0: none).
func (pc PhaseCaps) InFlightOf(c float64) int {
	if pc.InFlight <= 0 {
		return 0
	}
	return max(1, int(math.Round(pc.InFlight.Seconds()*c)))
}

// keys are pc as keys of the work port's entry at capacity c, heavy
// being the heavy client's address (none for the zero value).
func (pc PhaseCaps) keys(c float64, heavy netip.Addr) map[string]any {
	caps, out := map[string]any{}, map[string]any{}
	if pc.Rate > 0 {
		caps["rate"] = math.Round(10*pc.Rate*c) / 10
	}
	if n := pc.InFlightOf(c); n > 0 {
		caps["in_flight"] = n
	}
	if pc.HeavyRate > 0 {
		caps["sources"] = []any{map[string]any{"prefix": netip.PrefixFrom(heavy, heavy.BitLen()).String(), "rate": math.Round(10*pc.HeavyRate*c) / 10}}
	}
	if len(caps) > 0 {
		out["caps"] = caps
	}
	if pc.ResponseTarget != "" {
		out["response_target"] = pc.ResponseTarget
	}
	return out
}

// QuotaChange sets the backend's quota during a run.
type QuotaChange struct {
	// At is the time since the start of the load.
	At time.Duration
	// CPUs is the new quota (1 = one CPU).
	CPUs float64
}

// Scenario is a load pattern with optional capacity changes, against one
// backend with one kind of client.
type Scenario struct {
	// Name identifies the scenario in results ("cpu-open-giveup-3x").
	Name string
	// Backend and Clients pick the service and its clients (zero: cpu,
	// open-giveup).
	Backend Backend
	Clients Clients
	Phases  []ScenarioPhase
	// Quota lists capacity changes, in time order.
	Quota []QuotaChange
	// RequestGate turns the work port's request gate on
	// (ports[].request_gate) in the olcd variants: a stateless HTTP
	// service whose clients keep their connections open.
	RequestGate bool
	// Fair turns the work port's fair shedding on (ports[].fair) in the
	// olcd variants.
	Fair bool
	// Light, when set, adds light clients of their own source addresses
	// beside the phases' clients, which then are one heavy client of the
	// namespace's own address.
	Light *LightLoad
}

// LightLoad are a scenario's light clients: Sources clients of an
// address each (Net.SourceAddrs), Load × C together, for the whole run,
// open loop as ClientsOpenGiveUp.
type LightLoad struct {
	Sources int
	Load    float64
}

// backend returns the scenario's backend, cpu by default.
func (sc Scenario) backend() Backend {
	if sc.Backend == "" {
		return BackendCPU
	}
	return sc.Backend
}

// clients returns the scenario's clients, open-giveup by default.
func (sc Scenario) clients() Clients {
	if sc.Clients == "" {
		return ClientsOpenGiveUp
	}
	return sc.Clients
}

// OverloadPhase is the name of the phase with the highest offered load
// relative to the capacity in force (the load over the share of the quota
// left at the phase's start; the first of equals): the one a scenario's
// summary reports. In capacity-halved that is the phase after the halving,
// 1.5 C on half the quota.
func (sc Scenario) OverloadPhase() string {
	best, bestLoad := "", 0.0
	var at time.Duration
	for _, p := range sc.Phases {
		if l := p.Load / sc.quotaShareAt(at); best == "" || l > bestLoad {
			best, bestLoad = p.Name, l
		}
		at += p.Duration
	}
	return best
}

// quotaShareAt is the share of the initial quota in force at t (1 before
// any change; the changes' CPUs taken against a 1-CPU start, as
// Options.Quota defaults).
func (sc Scenario) quotaShareAt(t time.Duration) float64 {
	share := 1.0
	for _, q := range sc.Quota {
		if q.At <= t && q.CPUs > 0 {
			share = q.CPUs
		}
	}
	return share
}

// Phases3x are the phases of every `<backend>-<clients>-3x` scenario:
// 0.5 C, then 3 C, then 0.5 C again.
func Phases3x(low, high, after time.Duration) []ScenarioPhase {
	return []ScenarioPhase{
		{Name: "0.5x", Load: 0.5, Duration: low},
		{Name: "3x", Load: 3, Duration: high},
		{Name: "0.5x-after", Load: 0.5, Duration: after},
	}
}

// Matrix3x is the 3 C scenario of backend b with clients c, named
// `<backend>-<clients>-3x`, with phases of the given lengths.
func Matrix3x(b Backend, c Clients, low, high, after time.Duration) Scenario {
	return Scenario{Name: fmt.Sprintf("%s-%s-3x", b, c), Backend: b, Clients: c, Phases: Phases3x(low, high, after)}
}

// KeepAlive3x is `<backend>-keepalive-3x`: the keep-alive clients open
// their connections at 0.5 C (KeepAliveLow), then send 3 C on the same
// connections for high, then 0.5 C for after, with the work port's
// request gate on.
func KeepAlive3x(b Backend, high, after time.Duration) Scenario {
	sc := Matrix3x(b, ClientsKeepAlive, KeepAliveLow, high, after)
	sc.RequestGate = true
	return sc
}

// Overload3x is scenario 1: the cpu backend and vegeta clients that give
// up after 1 s; 0.5 C, then 3 C for 30 s, then 0.5 C again.
var Overload3x = Matrix3x(BackendCPU, ClientsOpenGiveUp, 5*time.Second, 30*time.Second, 10*time.Second)

// ColdStart is 1.5 C from an idle backend: olcd's first reaction, with no
// earlier overload to learn from, over the whole phase.
var ColdStart = Scenario{
	Name: "cpu-open-giveup-coldstart",
	Phases: []ScenarioPhase{
		{Name: "1.5x", Load: 1.5, Duration: 20 * time.Second},
		{Name: "0.5x-after", Load: 0.5, Duration: 5 * time.Second},
	},
}

// FairHeavy and EvenHeavy are issue 29's must-show 2 on the cpu backend:
// 20 light clients of an address each at 0.5 C together for the whole run
// (FairLightSources, 0.025 C each) and one heavy client of the namespace's
// own address, silent for 4 s (0.5 C, the light clients alone: the port's
// baseline) and then at 2.5 C for 20 s (3 C together), all open loop,
// giving up after 1 s. FairHeavy has the work port's fair shedding on,
// EvenHeavy is the same load under today's even shedding.
var (
	FairHeavy = fairHeavy("cpu-fair-heavy", true)
	EvenHeavy = fairHeavy("cpu-even-heavy", false)
)

// FairLightSources is the number of FairHeavy's light clients.
const FairLightSources = 20

func fairHeavy(name string, fair bool) Scenario {
	return Scenario{Name: name, Fair: fair, Light: &LightLoad{Sources: FairLightSources, Load: 0.5},
		Phases: []ScenarioPhase{
			{Name: "0.5x", Load: 0, Duration: 4 * time.Second},
			{Name: "3x", Load: 2.5, Duration: 20 * time.Second},
		}}
}

// StaticCaps is issue 29's must-show 3 on the cpu backend with olcd's
// controller running: one run whose phases patch the work port's static
// caps (PhaseCaps) while the heavy client (the namespace's own address)
// offers each phase's load and CapsLightSources light clients of an address
// each offer 0.2 C together throughout (open loop, giving up after 1 s):
//
//   - port-cap: 1.4 C offered, a port cap at 0.6 C: the cap, not the law,
//     holds the admitted rate (the backend, at 0.6 C, has no queue);
//   - prefix-cap: the same load, a cap of 0.4 C on the heavy client's
//     address alone: it is held there, the light clients untouched;
//   - cap-above: 3 C offered, a port cap at 2 C, above capacity: the
//     adaptive law sheds to C and the cap refuses next to nothing;
//   - in-flight-cap: 2 C offered, a ceiling of 0.1 s of work at C in
//     flight (caps.in_flight) and the port's response target at 0.5 s, so
//     that the law alone would hold five times that queue: the ceiling
//     holds it.
//
// The phases are short (26 s in all: make test's budget): a cap's rate is
// measured over the 4 s after the phase's first second (the patch, the new
// bucket's burst, the law's reaction: CapsSettle), the in-flight ceiling
// over the 4 s after its second second (the law's release of the 3 C
// phase's p), cap-above's goodput from +SettleTime as the suite's other
// 3 C phases'.
var StaticCaps = Scenario{Name: "cpu-static-caps", Light: &LightLoad{Sources: CapsLightSources, Load: 0.2},
	Phases: []ScenarioPhase{
		{Name: "port-cap", Load: 1.2, Duration: 5 * time.Second, Caps: &PhaseCaps{Rate: 0.6}},
		{Name: "prefix-cap", Load: 1.2, Duration: 5 * time.Second, Caps: &PhaseCaps{HeavyRate: 0.4}},
		{Name: "cap-above", Load: 2.8, Duration: 2 * SettleTime, Caps: &PhaseCaps{Rate: 2}},
		{Name: "in-flight-cap", Load: 1.8, Duration: 6 * time.Second, Caps: &PhaseCaps{InFlight: 100 * time.Millisecond, ResponseTarget: "500ms"}},
	}}

// CapsLightSources is the number of StaticCaps's light clients.
const CapsLightSources = 20

// CapsSettle is the start of a StaticCaps phase left out of its rates: the
// patch lands within milliseconds, a new bucket's burst (a tenth of a
// second of its rate) is spent at once, and the law answers a step within
// a tick or two (docs/controller.md §1).
const CapsSettle = time.Second

// CapacityHalved is scenario 2: 1.5 C throughout while the backend's quota
// halves after 20 s, so 1.5 C becomes 3 × the new capacity; the 30 s after
// the change show where each protection settles.
var CapacityHalved = Scenario{
	Name: "capacity-halved",
	Phases: []ScenarioPhase{
		{Name: "1.5x", Load: 1.5, Duration: 20 * time.Second},
		{Name: "1.5x-quota-halved", Load: 1.5, Duration: 30 * time.Second},
	},
	Quota: []QuotaChange{{At: 20 * time.Second, CPUs: 0.5}},
}

// RunOptions are the extras of a run.
type RunOptions struct {
	// KillOlcdAt, when positive, sends SIGKILL to olcd this long after the
	// load starts (the fail-open test).
	KillOlcdAt time.Duration
	// RestartOlcdAt, when positive, restarts olcd this long after the load
	// starts as systemd's restart does: SIGTERM, then a new olcd at once.
	// The run's olcd then pins its datapath (in a bpffs of the run's own)
	// so that the new one takes it over (docs/datapath.md, "Restarts").
	RestartOlcdAt time.Duration
	// OlcdBeforeRestart, with RestartOlcdAt, is the olcd binary the run
	// starts with, an earlier build of the same pinned layout: the
	// restart is then an upgrade to Options.Olcd.
	OlcdBeforeRestart string
	// Config is the recommended config of the run's olcd ("":
	// Options.Config), e.g. ConfigKubernetes.
	Config string
	// OlcdMetrics is the run's olcd's metrics.address ("": none), for a
	// Prometheus that scrapes it (the board's picture); its /metrics at
	// the end of the load is kept too (RunResult.Metrics).
	OlcdMetrics string
	// restart starts the new olcd of RestartOlcdAt (set by Run).
	restart func() (*olcdProc, error)
	// light are the scenario's light clients (set by Run).
	light *LightClients
	// caps are the scenario's phase caps as patches (set by Run).
	caps []CapsChange
	// KeepAlive makes the attacker reuse its work connections.
	KeepAlive bool
	// Realtime runs the attacker at a real-time priority (chrt -f 10,
	// when chrt exists), so that its clock readings are not delayed by the
	// CPU the backend burns: the response checks compare latencies.
	Realtime bool
	// stopLoad, when set, is asked with the records so far (a.mu held)
	// at every sample; true ends the load there (the calibration's steps
	// past capacity, stopPastCapacity).
	stopLoad func(rec *records, el time.Duration) bool
}

// Run plays sc under v and returns its results. It needs the calibration
// of the scenario's backend (CalibrateBackend).
func (h *Harness) Run(ctx context.Context, sc Scenario, v Variant, ro RunOptions) (*RunResult, error) {
	cal := h.CalibrationOf(sc.backend())
	if cal == nil {
		return nil, fmt.Errorf("run %s: backend %s not calibrated (call CalibrateBackend first)", sc.Name, sc.backend())
	}
	if v == VariantInApp && sc.backend() != BackendCPU {
		return nil, fmt.Errorf("run %s: the in-app limiter exists in the cpu backend only", sc.Name)
	}
	dir := filepath.Join(h.opt.OutDir, sc.Name+"-"+string(v))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	limiter := ""
	if v == VariantInApp {
		limiter = "bbr"
	}
	h.backend = sc.backend()
	h.keepAlive = sc.clients() == ClientsKeepAlive
	defer func() { h.backend, h.keepAlive = "", false }()
	if err := h.startBackend(limiter); err != nil {
		return nil, err
	}
	defer h.stopBackend()
	h.waitIdle(5 * time.Second)

	var od *olcdProc
	var nft *nftLimit
	switch v {
	case VariantObserve, VariantEnforce, VariantEnforceCPU, VariantEnforceReject:
		var err error
		set := h.olcdSettingsFor(v, cal)
		set.RequestGate = sc.RequestGate
		set.Fair = sc.Fair
		set.Config, set.Metrics = ro.Config, ro.OlcdMetrics
		if ro.RestartOlcdAt > 0 {
			// Each run starts from nothing: the previous run's state
			// file (same directory) would hand it what that one learnt.
			if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
				return nil, err
			}
			if set.PinDir, err = mountRunPins(h.opt.Olcd, dir); err != nil {
				return nil, err
			}
			defer detachRunPins(h.opt.Olcd, set.PinDir)
			ro.restart = func() (*olcdProc, error) {
				// The stopped olcd's log and decision log are kept
				// beside the new one's: the restart's evidence is
				// the ticks on both sides of it.
				for _, f := range []string{"olcd.log", "decisions.jsonl"} {
					old := filepath.Join(dir, f)
					if err := os.Rename(old, strings.TrimSuffix(old, filepath.Ext(old))+"-before-restart"+filepath.Ext(old)); err != nil && !errors.Is(err, fs.ErrNotExist) {
						return nil, err
					}
				}
				return h.startOlcd(ctx, dir, set)
			}
		}
		first := set
		first.Bin = ro.OlcdBeforeRestart
		if first.Bin != "" && ro.RestartOlcdAt <= 0 {
			return nil, fmt.Errorf("run %s: OlcdBeforeRestart without RestartOlcdAt", sc.Name)
		}
		if ro.caps, err = capsChanges(sc, set, cal.CapacityRPS, h.net.ClientIP); err != nil {
			return nil, err
		}
		od, err = h.startOlcd(ctx, dir, first)
		if err != nil {
			return nil, err
		}
		defer func() { od.stop() }()
		// The first phase's caps are in force when the load starts.
		if len(ro.caps) > 0 && ro.caps[0].At == 0 {
			if err := od.client.Patch(ctx, ro.caps[0].Doc); err != nil {
				return nil, fmt.Errorf("run %s: caps of phase %s: %w", sc.Name, ro.caps[0].Phase, err)
			}
		}
	case VariantStatic, VariantStaticReject:
		var err error
		nft, err = h.addStaticLimit(cal.CapacityRPS, v == VariantStaticReject)
		if err != nil {
			return nil, err
		}
		defer nft.remove()
	case VariantNone, VariantInApp:
	default:
		return nil, fmt.Errorf("unknown variant %q", v)
	}

	phases := make([]Phase, len(sc.Phases))
	for i, p := range sc.Phases {
		phases[i] = Phase{Name: p.Name, Rate: p.Load * cal.CapacityRPS, Duration: p.Duration}
	}
	label := fmt.Sprintf("%s/%s", sc.Name, v)
	if sc.Light != nil {
		if (sc.clients() != ClientsOpenGiveUp && sc.clients() != ClientsOpenRetry) || sc.backend() == BackendDB {
			return nil, fmt.Errorf("run %s: light clients beside open-loop clients over HTTP only", sc.Name)
		}
		addrs, err := h.net.SourceAddrs(sc.Light.Sources)
		if err != nil {
			return nil, err
		}
		ro.light = &LightClients{Rate: sc.Light.Load * cal.CapacityRPS}
		for _, a := range addrs {
			ro.light.Addrs = append(ro.light.Addrs, a.String())
		}
	}
	rec, err := h.attack(ctx, dir, label, sc.clients(), phases, sc.Quota, od, nft, ro)
	if err != nil {
		return nil, err
	}
	if od != nil {
		logs := []string{od.decisionLog, strings.TrimSuffix(od.decisionLog, ".jsonl") + "-before-restart.jsonl"}
		if rec.shed, err = shedSpans(logs, rec.start, fmt.Sprintf("tcp/%d", WorkPort)); err != nil {
			return nil, fmt.Errorf("run %s: %w", sc.Name, err)
		}
	}
	res := analyse(rec, sc, v, h.opt, cal)
	if od != nil {
		res.OlcdLog = od.logPath
		res.OlcdConfig = od.config
		res.DecisionLog = od.decisionLog
		res.Caps = ro.caps
		res.StatusLog = filepath.Join(dir, statusLogName)
		if ro.OlcdMetrics != "" {
			if res.Metrics, err = od.scrape(ctx, dir); err != nil {
				return nil, fmt.Errorf("run %s: %w", sc.Name, err)
			}
		}
	}
	if err := writePlot(filepath.Join(dir, "timeseries.png"), res); err != nil {
		return nil, fmt.Errorf("plot %s: %w", label, err)
	}
	res.Plot = filepath.Join(dir, "timeseries.png")
	return res, nil
}

// CapsChange is a patch of the work port's caps as a phase starts
// (ScenarioPhase.Caps).
type CapsChange struct {
	// Phase names the phase whose caps it sets; At is its start since
	// the load began.
	Phase string
	At    time.Duration
	// Doc is the patch (`olcd set patch`).
	Doc []byte
	// Applied is when olcd took it, since the load began (0 for a
	// phase at 0: applied before the load).
	Applied time.Duration
}

// capsChanges are the patches of sc's phase caps for an olcd started with
// set, at capacity c, heavy being the heavy client's address: one at each
// phase whose caps differ from those in force before it (none before the
// first phase with caps).
func capsChanges(sc Scenario, set olcdSettings, c float64, heavy netip.Addr) ([]CapsChange, error) {
	var out []CapsChange
	var at time.Duration
	var cur *PhaseCaps
	for _, p := range sc.Phases {
		next := p.Caps
		if next == nil && cur != nil {
			next = &PhaseCaps{}
		}
		if next != nil && (cur == nil || *next != *cur) {
			doc, err := capsPatch(set, *next, c, heavy)
			if err != nil {
				return nil, fmt.Errorf("caps of phase %s: %w", p.Name, err)
			}
			out = append(out, CapsChange{Phase: p.Name, At: at, Doc: doc})
			cur = next
		}
		at += p.Duration
	}
	return out, nil
}

// patchCaps applies each change of changes whose At is after the start at
// that time since the load began (a's clock), through od's admin socket,
// and notes when in its Applied. It returns at once; the channel answers
// the first error (or nil) once every change is applied, or stop is
// closed or ctx ends.
func patchCaps(ctx context.Context, a *attacker, od *olcdProc, changes []CapsChange, stop <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i := range changes {
			ch := &changes[i]
			if ch.At == 0 {
				continue
			}
			select {
			case <-time.After(ch.At - a.since()):
			case <-stop:
				done <- nil
				return
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
			if err := od.client.Patch(ctx, ch.Doc); err != nil {
				done <- fmt.Errorf("caps of phase %s: %w", ch.Phase, err)
				return
			}
			ch.Applied = a.since()
		}
		done <- nil
	}()
	return done
}

// statusLogName is the file in a run's directory that has olcd's status
// at every sample (RunResult.StatusLog).
const statusLogName = "status.jsonl"

// records is everything a run observed.
type records struct {
	start    time.Time
	phases   []Phase
	requests []request
	dials    []dial
	// healthDials are the health checks' connects: one per check, spread
	// over the run.
	healthDials []dial
	samples     []sample
	killedAt    time.Duration // 0: olcd not killed
	// restartedAt is when olcd got SIGTERM for a restart (0: none).
	restartedAt time.Duration
	quota       []QuotaChange
	baseQ       float64
	// shed are the spans in which olcd's decision log shows the work
	// port's p above 0 (shedSpans).
	shed []span
}

// request is one request of the attacker.
type request struct {
	health  bool
	light   bool          // a light client's (AttackConfig.Light)
	start   time.Duration // since the start of the load
	latency time.Duration
	outcome string
}

// parseDial reads a "d" or "c" line's fields (attack.go): start, duration,
// outcome and, on a light client's "d", the l.
func (rec *records) parseDial(f []string) dial {
	st, _ := strconv.ParseInt(f[1], 10, 64)
	du, _ := strconv.ParseInt(f[2], 10, 64)
	return dial{start: time.Unix(0, st).Sub(rec.start), dur: time.Duration(du), outcome: f[3], light: len(f) == 5}
}

// dial is one connect of a work request.
type dial struct {
	start, dur time.Duration
	outcome    string
	light      bool // a light client's (AttackConfig.Light)
}

// sample is one look at the backend and the protection, every 500 ms.
type sample struct {
	t        time.Duration // since the start of the load
	usage    time.Duration // cgroup CPU time, cumulative
	quota    float64       // CPUs
	olcd     bool          // the olcd fields are valid
	p        float64       // the drop probability a first attempt meets at the work port
	target   float64       // the work port's response target (seconds; 0: none)
	connCap  float64       // the work port's measured capacity in new connections/s (0: none)
	newConns uint64        // cumulative datapath counters of the work port
	dropped  uint64
	rejected uint64
	would    uint64
	capped   uint64 // of dropped (or would): refused by a static cap
	// inflight is olcd's count of the work port's requests in flight at
	// its last tick (NaN: not timed).
	inflight float64
	nftSeen  uint64 // nftables counters (static)
	nftDrop  uint64
}

// attack runs the attacker in the client namespace, samples every 500 ms
// while it runs, applies the quota changes and the kill, and returns what
// it saw.
func (h *Harness) attack(ctx context.Context, dir, label string, clients Clients, phases []Phase, quota []QuotaChange, od *olcdProc, nft *nftLimit, ro RunOptions) (*records, error) {
	target := fmt.Sprintf("http://%s:%d/", h.net.HostIP, WorkPort)
	if h.backend == BackendDB {
		if clients != ClientsClosedPool {
			return nil, fmt.Errorf("%s: the db backend runs with closed-pool clients only", label)
		}
		target = dbTarget(net.JoinHostPort(h.net.HostIP.String(), strconv.Itoa(WorkPort)))
	}
	cfg := AttackConfig{
		Target:     target,
		Query:      h.dbQuery,
		Health:     fmt.Sprintf("http://%s:%d/health", h.net.HostIP, HealthPort),
		HealthRate: h.opt.HealthRate,
		Timeout:    h.opt.Timeout,
		Clients:    clients,
		Phases:     phases,
		KeepAlive:  ro.KeepAlive,
		Light:      ro.light,
	}
	switch clients {
	case ClientsOpenRetry:
		cfg.ConnectTimeout = RetryConnectTimeout
	case ClientsClosedPool:
		cfg.Pool, cfg.Timeout = ClosedPoolClients, ClosedPoolTimeout
	case ClientsKeepAlive:
		cfg.Pool, cfg.Timeout, cfg.KeepAlive = KeepAliveClients, KeepAliveTimeout, true
	}
	sub := "attack"
	if clients == ClientsClosedPool || clients == ClientsKeepAlive {
		sub = string(ClientsClosedPool)
	}
	// olcd's status document at every sample, one JSON line each (what
	// `olcd status --json` prints): the per-tick view of a run.
	var statusLog *json.Encoder
	if od != nil {
		f, err := os.Create(filepath.Join(dir, statusLogName))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		statusLog = json.NewEncoder(f)
	}
	rec := &records{phases: phases, quota: quota, baseQ: h.opt.Quota}
	a, err := startAttacker(ctx, dir, cfg, rec, func(cfgPath string) *exec.Cmd {
		if chrt, err := exec.LookPath("chrt"); err == nil && ro.Realtime {
			return h.net.Command(chrt, "-f", "10", h.opt.Self, sub, "-config", cfgPath)
		}
		return h.net.Command(h.opt.Self, sub, "-config", cfgPath)
	})
	if err != nil {
		return nil, err
	}

	stopPatches := make(chan struct{})
	patched := patchCaps(ctx, a, od, ro.caps, stopPatches)
	total := phasePacer(phases).total()
	nextQuota, curQuota := 0, h.opt.Quota
	take := func() {
		s := sample{t: a.since(), quota: curQuota, inflight: math.NaN()}
		s.usage, _ = h.cg.Usage()
		if od != nil && !od.killed {
			if st, err := od.status(ctx); err == nil {
				_ = statusLog.Encode(struct {
					T float64 `json:"t_s"` // since the load started
					*api.Status
				}{s.t.Seconds(), st})
				for _, p := range st.Ports {
					if p.Port == WorkPort && p.Proto == "tcp" {
						s.olcd, s.p = true, p.FirstP()
						if p.ResponseTarget != nil {
							s.target = *p.ResponseTarget
						}
						if p.Capacity != nil {
							s.connCap = p.Capacity.ConnectionsPerS
						}
						s.newConns, s.dropped, s.rejected, s.would = p.Totals.NewConns, p.Totals.Dropped, p.Totals.Rejected, p.Totals.WouldDrop
						s.capped = p.Totals.Capped
						if p.InflightRequests != nil {
							s.inflight = *p.InflightRequests
						}
					}
				}
			}
		}
		if nft != nil {
			s.nftSeen, s.nftDrop, _ = nft.counters()
		}
		a.mu.Lock()
		rec.samples = append(rec.samples, s)
		a.mu.Unlock()
	}
	err = a.follow(ctx, take, func(el time.Duration) error {
		if ro.stopLoad != nil {
			a.mu.Lock()
			stop := ro.stopLoad(rec, el)
			a.mu.Unlock()
			if stop {
				return errStopLoad
			}
		}
		for nextQuota < len(quota) && el >= quota[nextQuota].At {
			curQuota = quota[nextQuota].CPUs
			if err := h.cg.SetQuota(curQuota); err != nil {
				return err
			}
			fmt.Fprintf(h.opt.Progress, "  [%s] %4.0fs backend quota set to %.2g CPU\n", label, el.Seconds(), curQuota)
			nextQuota++
		}
		if ro.KillOlcdAt > 0 && od != nil && !od.killed && el >= ro.KillOlcdAt {
			take()
			od.kill()
			a.mu.Lock()
			rec.killedAt = time.Since(rec.start)
			a.mu.Unlock()
			fmt.Fprintf(h.opt.Progress, "  [%s] %4.0fs olcd killed with SIGKILL\n", label, el.Seconds())
		}
		if ro.RestartOlcdAt > 0 && od != nil && rec.restartedAt == 0 && el >= ro.RestartOlcdAt {
			take()
			t0 := time.Now()
			a.mu.Lock()
			rec.restartedAt = time.Since(rec.start)
			a.mu.Unlock()
			od.stop()
			nod, err := ro.restart()
			if err != nil {
				return fmt.Errorf("restart olcd: %w", err)
			}
			*od = *nod
			fmt.Fprintf(h.opt.Progress, "  [%s] %4.0fs olcd restarted (SIGTERM, start, attached and ticking in %v)\n", label, el.Seconds(), time.Since(t0).Round(time.Millisecond))
		}
		take()
		if el <= total+time.Second {
			if line, ok := a.progress(el, h.opt.SLO); ok {
				fmt.Fprintf(h.opt.Progress, "  [%s] %4.0fs %s\n", label, el.Seconds(), line)
			}
		}
		return nil
	})
	close(stopPatches)
	err = errors.Join(err, <-patched)
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// attacker is a running attacker (RunAttack or RunClosedPool in a process
// of its own) and the records its event lines fill.
type attacker struct {
	cmd *exec.Cmd
	rec *records
	// mu guards rec while the attacker runs.
	mu sync.Mutex
	// errPath is the attacker's stderr, named in errors.
	errPath string
	// finished receives the end of the attacker and of its output.
	finished     chan error
	lastProgress time.Duration
}

// startAttacker writes cfg to dir/attack.json, starts the command that
// command builds for that file, copies its event lines to
// dir/requests.log and into rec, its stderr to dir/attack.stderr, and
// waits (15 s at most) until the load has started.
func startAttacker(ctx context.Context, dir string, cfg AttackConfig, rec *records, command func(cfgPath string) *exec.Cmd) (*attacker, error) {
	cfgPath := filepath.Join(dir, "attack.json")
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		return nil, err
	}
	recFile, err := os.Create(filepath.Join(dir, "requests.log"))
	if err != nil {
		return nil, err
	}
	a := &attacker{cmd: command(cfgPath), rec: rec, errPath: filepath.Join(dir, "attack.stderr"), finished: make(chan error, 1)}
	errLog, err := os.Create(a.errPath)
	if err != nil {
		recFile.Close()
		return nil, err
	}
	closeLogs := func() { recFile.Close(); errLog.Close() }
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	a.cmd.Stderr = errLog
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		closeLogs()
		return nil, err
	}
	if err := a.cmd.Start(); err != nil {
		closeLogs()
		return nil, fmt.Errorf("start attacker: %w", err)
	}
	started := make(chan struct{})
	readDone := make(chan error, 1)
	go func() { readDone <- readAttack(out, recFile, rec, &a.mu, started) }()
	select {
	case <-started:
	case <-ctx.Done():
		_ = a.cmd.Process.Kill()
		_ = a.cmd.Wait()
		closeLogs()
		return nil, ctx.Err()
	case err := <-readDone:
		_ = a.cmd.Wait()
		closeLogs()
		return nil, fmt.Errorf("attacker ended before it started: %w (see %s)", err, a.errPath)
	case <-time.After(15 * time.Second):
		_ = a.cmd.Process.Kill()
		_ = a.cmd.Wait()
		closeLogs()
		return nil, errors.New("attacker did not start within 15 s")
	}
	go func() {
		err := <-readDone
		err = errors.Join(err, a.cmd.Wait())
		closeLogs()
		a.finished <- err
	}()
	return a, nil
}

// errStopLoad is onTick's answer that ends the load early
// (RunOptions.stopLoad).
var errStopLoad = errors.New("load stopped")

// since is the time since the load started.
func (a *attacker) since() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return time.Since(a.rec.start)
}

// follow waits until the attacker ends or ctx does (then it kills it):
// take samples at the start and at the end, onTick every 500 ms between,
// with the time since the load started; an error of onTick ends follow,
// errStopLoad with the attacker killed and no error.
func (a *attacker) follow(ctx context.Context, take func(), onTick func(el time.Duration) error) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	take()
	for {
		select {
		case <-ctx.Done():
			_ = a.cmd.Process.Kill()
			<-a.finished
			return ctx.Err()
		case err := <-a.finished:
			take()
			if err != nil {
				return fmt.Errorf("attacker: %w (see %s)", err, a.errPath)
			}
			return nil
		case <-tick.C:
			if err := onTick(time.Since(a.rec.start)); errors.Is(err, errStopLoad) {
				_ = a.cmd.Process.Kill()
				<-a.finished
				take()
				return nil
			} else if err != nil {
				return err
			}
		}
	}
}

// progress returns the progress line at el (progressLine) when one is due:
// every 5 s.
func (a *attacker) progress(el, slo time.Duration) (string, bool) {
	if el-a.lastProgress < 5*time.Second {
		return "", false
	}
	a.lastProgress = el.Truncate(5 * time.Second)
	a.mu.Lock()
	defer a.mu.Unlock()
	return progressLine(a.rec, el, slo), true
}

// progressLine summarises the 5 s that ended a second before el (answers
// arrive up to the timeout after the request started). Every figure is the
// window's: the rates, the backend's CPU (the mean over the intervals
// between its samples, each a share of the quota then in force) and p,
// olcd's mean over its samples. A window that spans a phase change
// is labelled with both phases (0.5x→3x), since its figures mix them; the
// health column is left out when no health check ran in it (the load
// balancer's runs have none).
func progressLine(rec *records, el, slo time.Duration) string {
	from, to := el-6*time.Second, el-time.Second
	if from < 0 {
		from = 0
	}
	span := (to - from).Seconds()
	if span <= 0 {
		return ""
	}
	var offered, good, hOK, hAll int
	for i := len(rec.requests) - 1; i >= 0; i-- {
		r := rec.requests[i]
		if r.start < from || r.start >= to {
			continue
		}
		if r.health {
			hAll++
			if r.outcome == outcomeOK {
				hOK++
			}
			continue
		}
		offered++
		if r.outcome == outcomeOK && r.latency <= slo {
			good++
		}
	}
	var admitted int
	for _, d := range rec.dials {
		if d.outcome == outcomeOK && d.start >= from && d.start < to {
			admitted++
		}
	}
	s := fmt.Sprintf("%-10s offered %4.0f/s  connected %4.0f/s  goodput %4.0f/s",
		phaseSpan(rec.phases, from, to), float64(offered)/span, float64(admitted)/span, float64(good)/span)
	if hAll > 0 {
		s += fmt.Sprintf("  health %d/%d", hOK, hAll)
	}
	// As phaseResult reads a phase: each interval between two samples
	// over the quota then in force, a quota change (capacity-halved)
	// included, and p at each sample.
	var busy, pSum float64
	var nBusy, pN int
	for i, x := range rec.samples {
		if x.olcd && x.t >= from && x.t < to {
			pSum += x.p
			pN++
		}
		if i == 0 {
			continue
		}
		s0 := rec.samples[i-1]
		if mid := (s0.t + x.t) / 2; mid < from || mid >= to {
			continue
		}
		if b, ok := busyBetween(s0, x); ok {
			busy += b
			nBusy++
		}
	}
	if nBusy > 0 {
		s += fmt.Sprintf("  cpu %.2f", busy/float64(nBusy))
	}
	if pN > 0 {
		s += fmt.Sprintf("  p %.2f", pSum/float64(pN))
	}
	return s
}

// phaseSpan names the phases the window [from, to) of the load falls in:
// one name, or the first and the last joined by an arrow. A window past
// the last phase is in the last one.
func phaseSpan(phases []Phase, from, to time.Duration) string {
	first, last := -1, -1
	var at time.Duration
	for i, p := range phases {
		if at <= from {
			first = i
		}
		if at < to {
			last = i
		}
		at += p.Duration
	}
	switch {
	case last < 0:
		return ""
	case first < 0 || first == last:
		return phases[last].Name
	}
	return phases[first].Name + "→" + phases[last].Name
}

// readAttack reads the attacker's event lines (RunAttack's format) from out
// into rec, holding mu for each, copies them to log, and closes started at
// the "start" line.
func readAttack(out io.Reader, log io.Writer, rec *records, mu *sync.Mutex, started chan struct{}) error {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<16), 1<<16)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, line)
		f := strings.Fields(line)
		mu.Lock()
		switch {
		case len(f) == 2 && f[0] == "start":
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			rec.start = time.Unix(0, ns)
			close(started)
		case len(f) == 5 && f[0] == "r":
			st, _ := strconv.ParseInt(f[2], 10, 64)
			lat, _ := strconv.ParseInt(f[3], 10, 64)
			rec.requests = append(rec.requests, request{health: f[1] == "h", light: f[1] == "l", start: time.Unix(0, st).Sub(rec.start), latency: time.Duration(lat), outcome: f[4]})
		case (len(f) == 4 || len(f) == 5 && f[4] == "l") && f[0] == "d":
			rec.dials = append(rec.dials, rec.parseDial(f))
		case len(f) == 4 && f[0] == "c":
			rec.healthDials = append(rec.healthDials, rec.parseDial(f))
		}
		mu.Unlock()
	}
	return sc.Err()
}
