package overload

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Variant is what protects the backend in a run.
type Variant string

// The five ways each scenario runs.
const (
	// VariantNone: nothing; the collapse the others are measured against.
	VariantNone Variant = "none"
	// VariantObserve: olcd in observe mode; counts what it would drop.
	VariantObserve Variant = "observe"
	// VariantEnforce: olcd in enforce mode on TC ingress of the host veth,
	// watching the backend's cgroup.
	VariantEnforce Variant = "enforce"
	// VariantStatic: an nftables SYN rate limit at the calibrated capacity.
	VariantStatic Variant = "static"
	// VariantInApp: go-kratos/aegis ratelimit/bbr in the backend (429s).
	VariantInApp Variant = "inapp"
	// VariantReject: olcd in enforce mode with the reject action: a shed
	// SYN is answered with a reset instead of dropped (issue 17). Not in
	// Variants: the closed-pool suite runs it beside VariantEnforce.
	VariantReject Variant = "enforce-reject"
)

// Variants lists every variant in report order.
var Variants = []Variant{VariantNone, VariantObserve, VariantEnforce, VariantStatic, VariantInApp}

// ScenarioPhase is a phase of a scenario, its load relative to capacity.
type ScenarioPhase struct {
	// Name labels the phase ("3x").
	Name string
	// Load is the offered load as a multiple of the calibrated capacity C.
	Load float64
	// Duration is the phase's length.
	Duration time.Duration
}

// QuotaChange sets the backend's quota during a run.
type QuotaChange struct {
	// At is the time since the start of the load.
	At time.Duration
	// CPUs is the new quota (1 = one CPU).
	CPUs float64
}

// Scenario is a load pattern with optional capacity changes.
type Scenario struct {
	// Name identifies the scenario in results ("overload-3x").
	Name   string
	Phases []ScenarioPhase
	// Client is the load's kind: "" for the open-loop attacker (a new
	// request at each due time, whatever is outstanding), ClientClosedPool
	// for ClosedPoolClients blocking clients.
	Client string
	// Quota lists capacity changes, in time order.
	Quota []QuotaChange
}

// Overload3x is scenario 1: 0.5 C, then 3 C for 30 s, then 0.5 C again.
var Overload3x = Scenario{
	Name: "overload-3x",
	Phases: []ScenarioPhase{
		{Name: "0.5x", Load: 0.5, Duration: 5 * time.Second},
		{Name: "3x", Load: 3, Duration: 30 * time.Second},
		{Name: "0.5x-after", Load: 0.5, Duration: 10 * time.Second},
	},
}

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

// ClosedPool3x is scenario 1 played by the closed pool: ClosedPoolClients
// blocking clients scheduled at 0.5 C, then 3 C for 30 s, then 0.5 C; each
// request waits ClosedPoolTimeout at most. Under drop a shed client blocks
// in connect() through its SYN retransmits; under reject it is refused at
// once and goes on to its next request.
var ClosedPool3x = Scenario{
	Name:   "closed-pool-3x",
	Client: ClientClosedPool,
	Phases: Overload3x.Phases,
}

// RunOptions are the extras of a run.
type RunOptions struct {
	// KillOlcdAt, when positive, sends SIGKILL to olcd this long after the
	// load starts (the fail-open test).
	KillOlcdAt time.Duration
	// KeepAlive makes the attacker reuse its work connections.
	KeepAlive bool
	// Realtime runs the attacker at a real-time priority (chrt -f 10,
	// when chrt exists), so that its clock readings are not delayed by the
	// CPU the backend burns: the response checks compare latencies.
	Realtime bool
}

// Run plays sc under v and returns its results. It needs a calibration.
func (h *Harness) Run(ctx context.Context, sc Scenario, v Variant, ro RunOptions) (*RunResult, error) {
	cal := h.Calibration
	if cal == nil {
		return nil, errors.New("run: no calibration (call Calibrate first)")
	}
	dir := filepath.Join(h.opt.OutDir, sc.Name+"-"+string(v))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	limiter := ""
	if v == VariantInApp {
		limiter = "bbr"
	}
	if err := h.startBackend(limiter); err != nil {
		return nil, err
	}
	defer h.stopBackend()
	h.waitIdle(5 * time.Second)

	var od *olcdProc
	var nft *nftLimit
	switch v {
	case VariantObserve, VariantEnforce, VariantReject:
		var err error
		od, err = h.startOlcd(ctx, dir, v, cal.Threshold)
		if err != nil {
			return nil, err
		}
		defer od.stop()
	case VariantStatic:
		var err error
		nft, err = h.addStaticLimit(cal.CapacityRPS)
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
	rec, err := h.attack(ctx, dir, label, sc.Client, phases, sc.Quota, od, nft, ro)
	if err != nil {
		return nil, err
	}
	res := analyse(rec, sc, v, h.opt, cal)
	if od != nil {
		res.OlcdLog = od.logPath
		res.DecisionLog = od.decisionLog
	}
	if err := writePlot(filepath.Join(dir, "timeseries.png"), res); err != nil {
		return nil, fmt.Errorf("plot %s: %w", label, err)
	}
	res.Plot = filepath.Join(dir, "timeseries.png")
	return res, nil
}

// records is everything a run observed.
type records struct {
	start    time.Time
	phases   []Phase
	requests []request
	dials    []dial
	samples  []sample
	killedAt time.Duration // 0: olcd not killed
	quota    []QuotaChange
	baseQ    float64
}

// request is one request of the attacker.
type request struct {
	health  bool
	start   time.Duration // since the start of the load
	latency time.Duration
	outcome string
}

// dial is one connect of a work request.
type dial struct {
	start, dur time.Duration
	outcome    string
}

// sample is one look at the backend and the protection, every 500 ms.
type sample struct {
	t        time.Duration // since the start of the load
	usage    time.Duration // cgroup CPU time, cumulative
	quota    float64       // CPUs
	olcd     bool          // the olcd fields are valid
	p        float64       // olcd's drop probability of the work port
	newConns uint64        // cumulative datapath counters of the work port
	dropped  uint64
	would    uint64
	nftSeen  uint64 // nftables counters (static)
	nftDrop  uint64
}

// attack runs the attacker in the client namespace, samples every 500 ms
// while it runs, applies the quota changes and the kill, and returns what
// it saw.
func (h *Harness) attack(ctx context.Context, dir, label, client string, phases []Phase, quota []QuotaChange, od *olcdProc, nft *nftLimit, ro RunOptions) (*records, error) {
	cfg := AttackConfig{
		Target:     fmt.Sprintf("http://%s:%d/", h.net.HostIP, WorkPort),
		Health:     fmt.Sprintf("http://%s:%d/health", h.net.HostIP, HealthPort),
		HealthRate: h.opt.HealthRate,
		Timeout:    h.opt.Timeout,
		Phases:     phases,
		KeepAlive:  ro.KeepAlive,
	}
	sub := "attack"
	if client == ClientClosedPool {
		sub, cfg.Timeout, cfg.Clients = ClientClosedPool, ClosedPoolTimeout, ClosedPoolClients
	}
	cfgPath := filepath.Join(dir, "attack.json")
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		return nil, err
	}
	recPath := filepath.Join(dir, "requests.log")
	recFile, err := os.Create(recPath)
	if err != nil {
		return nil, err
	}
	defer recFile.Close()
	cmd := h.net.Command(h.opt.Self, sub, "-config", cfgPath)
	if chrt, err := exec.LookPath("chrt"); err == nil && ro.Realtime {
		cmd = h.net.Command(chrt, "-f", "10", h.opt.Self, sub, "-config", cfgPath)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	errLog, err := os.Create(filepath.Join(dir, "attack.stderr"))
	if err != nil {
		return nil, err
	}
	defer errLog.Close()
	cmd.Stderr = errLog
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start attacker: %w", err)
	}
	rec := &records{phases: phases, quota: quota, baseQ: h.opt.Quota}
	var mu sync.Mutex
	started := make(chan struct{})
	readDone := make(chan error, 1)
	go func() { readDone <- readAttack(out, recFile, rec, &mu, started) }()
	select {
	case <-started:
	case <-ctx.Done():
		cmd.Process.Kill()
		cmd.Wait()
		return nil, ctx.Err()
	case err := <-readDone:
		cmd.Wait()
		return nil, fmt.Errorf("attacker ended before it started: %v (see %s)", err, errLog.Name())
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, errors.New("attacker did not start within 15 s")
	}

	total := phasePacer(phases).total()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	nextQuota, curQuota := 0, h.opt.Quota
	lastProgress := time.Duration(0)
	finished := make(chan error, 1)
	go func() { err := <-readDone; finished <- errors.Join(err, cmd.Wait()) }()
	take := func() {
		mu.Lock()
		t := time.Since(rec.start)
		mu.Unlock()
		s := sample{t: t, quota: curQuota}
		s.usage, _ = h.cg.Usage()
		if od != nil && !od.killed {
			if st, err := od.status(ctx); err == nil {
				for _, p := range st.Ports {
					if p.Port == WorkPort && p.Proto == "tcp" {
						s.olcd, s.p = true, p.DropProbability
						s.newConns, s.dropped, s.would = p.Totals.NewConns, p.Totals.Dropped, p.Totals.WouldDrop
					}
				}
			}
		}
		if nft != nil {
			s.nftSeen, s.nftDrop, _ = nft.counters()
		}
		mu.Lock()
		rec.samples = append(rec.samples, s)
		mu.Unlock()
	}
	take()
	for {
		select {
		case <-ctx.Done():
			cmd.Process.Kill()
			<-finished
			return nil, ctx.Err()
		case err := <-finished:
			take()
			if err != nil {
				return nil, fmt.Errorf("attacker: %w (see %s)", err, errLog.Name())
			}
			return rec, nil
		case <-tick.C:
			el := time.Since(rec.start)
			for nextQuota < len(quota) && el >= quota[nextQuota].At {
				curQuota = quota[nextQuota].CPUs
				if err := h.cg.SetQuota(curQuota); err != nil {
					return nil, err
				}
				fmt.Fprintf(h.opt.Progress, "  [%s] %4.0fs backend quota set to %.2g CPU\n", label, el.Seconds(), curQuota)
				nextQuota++
			}
			if ro.KillOlcdAt > 0 && od != nil && !od.killed && el >= ro.KillOlcdAt {
				take()
				od.kill()
				mu.Lock()
				rec.killedAt = time.Since(rec.start)
				mu.Unlock()
				fmt.Fprintf(h.opt.Progress, "  [%s] %4.0fs olcd killed with SIGKILL\n", label, el.Seconds())
			}
			take()
			if el-lastProgress >= 5*time.Second && el <= total+time.Second {
				lastProgress = el.Truncate(5 * time.Second)
				mu.Lock()
				line := progressLine(rec, el, h.opt.SLO)
				mu.Unlock()
				fmt.Fprintf(h.opt.Progress, "  [%s] %4.0fs %s\n", label, el.Seconds(), line)
			}
		}
	}
}

// progressLine summarises the 5 s that ended a second before el (answers
// arrive up to the timeout after the request started).
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
	phase := ""
	var at time.Duration
	for _, p := range rec.phases {
		if to > at {
			phase = p.Name
		}
		at += p.Duration
	}
	s := fmt.Sprintf("%-10s offered %4.0f/s  connected %4.0f/s  goodput %4.0f/s  health %d/%d",
		phase, float64(offered)/span, float64(admitted)/span, float64(good)/span, hOK, hAll)
	if n := len(rec.samples); n >= 2 {
		a, b := rec.samples[n-2], rec.samples[n-1]
		if busy, ok := busyBetween(a, b); ok {
			s += fmt.Sprintf("  cpu %.2f", busy)
		}
		if b.olcd {
			s += fmt.Sprintf("  p %.2f", b.p)
		}
	}
	return s
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
			rec.requests = append(rec.requests, request{health: f[1] == "h", start: time.Unix(0, st).Sub(rec.start), latency: time.Duration(lat), outcome: f[4]})
		case len(f) == 4 && f[0] == "d":
			st, _ := strconv.ParseInt(f[1], 10, 64)
			du, _ := strconv.ParseInt(f[2], 10, 64)
			rec.dials = append(rec.dials, dial{start: time.Unix(0, st).Sub(rec.start), dur: time.Duration(du), outcome: f[3]})
		}
		mu.Unlock()
	}
	return sc.Err()
}
