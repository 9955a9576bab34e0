// Package plant simulates a protected service and its clients in 1 ms
// steps, for the controller's tests and `olcd simulate --plant`: a backend
// (a pool of workers in front of a FIFO accept queue), real client
// behaviour (SYN retransmits with the kernel's timeouts, clients that give
// up, closed-loop clients that block), and the datapath's view of it per
// tick (new SYNs, retransmits, drops, the response time of the requests
// answered, requests in flight, CPU busy). It knows nothing of the
// controller: a Step function turns each tick's Observation into the next
// drop probability.
package plant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/olcd/olcd/internal/resptime"
)

// step is the simulation step (seconds).
const step = 0.001

// Backend is the service behind the protected port.
type Backend struct {
	// Name is "cpu", "pool" or "php".
	Name string
	// Workers is how many requests are served at once (CPU cores, pool
	// workers, php-fpm children).
	Workers int
	// Service is a request's mean service time (seconds).
	Service float64
	// Exponential draws service times from an exponential distribution
	// (CPU-bound handlers vary); otherwise every request takes Service.
	Exponential bool
	// CPUPerRequest is the CPU a request costs (seconds), for cpu_busy.
	CPUPerRequest float64
	// Cores is the node's CPU count, for cpu_busy.
	Cores int
	// Backlog is the accept queue's size: a SYN arriving while that many
	// requests wait is dropped by the kernel (ListenOverflows) and
	// retransmitted like one olcd drops.
	Backlog int
}

// Capacity returns C, the requests per second the backend serves when
// every worker is busy.
func (b Backend) Capacity() float64 { return float64(b.Workers) / b.Service }

// The backends of the overload harness (tests/e2e/overload), scaled to what the
// controller sees: cpu, 2 cores at 2 ms of CPU a request (C = 1000/s);
// pool, 8 workers that hold a request 25 ms without CPU (C = 320/s);
// php, 4 children, 20 ms sleep and 2 ms of CPU (C ≈ 180/s).
var (
	CPU  = Backend{Name: "cpu", Workers: 2, Service: 0.002, Exponential: true, CPUPerRequest: 0.002, Cores: 2, Backlog: 511}
	Pool = Backend{Name: "pool", Workers: 8, Service: 0.025, CPUPerRequest: 0.0003, Cores: 2, Backlog: 511}
	PHP  = Backend{Name: "php", Workers: 4, Service: 0.022, CPUPerRequest: 0.002, Cores: 2, Backlog: 511}
	// Quota is the harness's cpu backend as it runs there: one CPU of
	// cgroup quota, 5.3 ms of CPU a request (C ≈ 190/s, the calibrated
	// C of 170–190/s). 64 closed-pool clients then queue 0.34 s of work,
	// where on CPU they queue 64 ms.
	Quota = Backend{Name: "quota", Workers: 1, Service: 0.0053, Exponential: true, CPUPerRequest: 0.0053, Cores: 1, Backlog: 511}
)

// ClientKind is how clients behave.
type ClientKind uint8

// The client kinds of the harness.
const (
	// OpenGiveup: open loop (Poisson arrivals); a client gives up 1 s
	// after its SYN, before the SYN's first retransmit would matter.
	OpenGiveup ClientKind = iota
	// OpenRetry: open loop, connect timeout 10 s: the kernel retransmits a
	// dropped SYN; the request is answered within the 10 s or abandoned.
	OpenRetry
	// ClosedPool: a fixed number of blocking clients, each connects, sends
	// one request, waits for the answer or a 2 s timeout, and starts again
	// at its next scheduled slot (missed slots are skipped).
	ClosedPool
)

// String returns the harness's name, e.g. "open-retry".
func (k ClientKind) String() string {
	switch k {
	case OpenGiveup:
		return "open-giveup"
	case OpenRetry:
		return "open-retry"
	case ClosedPool:
		return "closed-pool"
	}
	return fmt.Sprintf("clients(%d)", uint8(k))
}

// ParseClientKind parses a ClientKind's name.
func ParseClientKind(s string) (ClientKind, bool) {
	for k := OpenGiveup; k <= ClosedPool; k++ {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// timeout returns the client's deadline after its first SYN (seconds).
func (k ClientKind) timeout() float64 {
	switch k {
	case OpenRetry:
		return 10
	case ClosedPool:
		return 2
	}
	return 1
}

// SYNRetransmits returns the times (seconds after the first SYN) at which
// Linux retransmits an unanswered SYN: with net.ipv4.tcp_syn_linear_timeouts
// (default 4 since Linux 6.x) the first four every 1 s, then doubling
// (1, 2, 3, 4, 6, 10, …); without it exponential from 1 s (1, 3, 7, 15, …),
// RFC 6298's initial RTO of 1 s doubled each time.
func SYNRetransmits(linear int, upTo float64) []float64 {
	var out []float64
	t, rto := 0.0, 1.0
	for i := 0; ; i++ {
		t += rto
		if t >= upTo {
			return out
		}
		out = append(out, t)
		if i+1 >= linear {
			rto *= 2
		}
	}
}

// Scenario is one plant run.
type Scenario struct {
	// Backend serves the port.
	Backend Backend
	// Clients is the client kind.
	Clients ClientKind
	// Load is the offered rate at time t, as a multiple of the backend's
	// capacity (open loop: new clients per second; closed pool: the
	// clients' scheduled rate, summed).
	Load func(t float64) float64
	// Pool is the number of closed-loop clients (64 in the harness).
	Pool int
	// LinearTimeouts is net.ipv4.tcp_syn_linear_timeouts (4 by default;
	// 0 for the exponential backoff of older kernels).
	LinearTimeouts int
	// Capacity scales the backend's workers' speed at time t (1 when nil).
	Capacity func(t float64) float64
	// Seconds is the run's length.
	Seconds float64
	// Tick is the controller's interval.
	Tick time.Duration
	// Seed seeds the arrivals, the service times and the drops.
	Seed uint64
	// RetransmitP, when set, is the drop probability applied to
	// retransmitted SYNs as a function of the port's p (a selection that
	// prefers older demand); nil applies p to every SYN.
	RetransmitP func(p float64) float64
	// FirstP, when set, is the drop probability applied to first
	// attempts as a function of the port's p; nil applies p.
	FirstP func(p float64) float64
	// Ceiling, when set, is the ceiling on requests in flight the
	// datapath holds (0: none): a SYN that finds that many in flight is
	// shed, as bpf/fair.h refuses it per arrival, but for a share
	// CeilingFloor of them.
	Ceiling      func() int
	CeilingFloor float64
	// Random draws each new connection at random, as the datapath's
	// selection: random does; false sheds an evenly spaced share, as
	// selection: even (the shipped configs') does, by error diffusion over the
	// port's new connections.
	Random bool
	// Noise is the relative standard deviation of cpu_busy's measurement.
	Noise float64
	// Window is the period of the check between ticks (RunWindows); 0
	// turns it off.
	Window time.Duration
	// DialOutlives makes a client's connect outlive its timeout, as Go's
	// net/http does from Go 1.23 on (a dial is detached from its request):
	// a shed SYN whose client has given up goes on being retransmitted on
	// the kernel's schedule up to tcp_syn_retries (6, the last about 19 s
	// after the first SYN); admitted, it opens a connection that carries
	// no request.
	DialOutlives bool
	// Limit, when > 0, is a static SYN rate limit in front of the port
	// (new SYNs per second, retransmits included, a token bucket with a
	// burst of 20 ms of it), like an nftables `limit rate` rule: the
	// harness's comparison at the calibrated C.
	Limit float64
}

// orphanUpTo bounds the kernel's SYN retransmits of a dial that outlives
// its client (seconds): tcp_syn_retries 6 with linear timeouts 4 ends at
// about 19 s.
const orphanUpTo = 20

// Observation is what the datapath and the sampler report for one tick.
type Observation struct {
	// T is the tick's end (seconds since the start).
	T float64
	// New, Retransmits and Dropped are the port's SYN counts of the tick:
	// every SYN, the retransmitted ones among them, and the ones olcd
	// dropped.
	New, Retransmits, Dropped uint64
	// Ceiled counts the SYNs among Dropped the ceiling refused.
	Ceiled uint64
	// Responses is how many requests were answered in the tick.
	Responses int
	// P50, P95, P99 are the response times (seconds: from the request
	// reaching the server to its answer) of the requests answered in the
	// tick; meaningful when Responses > 0.
	P50, P95, P99 float64
	// Hist is the same response times in the datapath's histogram
	// (internal/resptime's buckets).
	Hist []uint64
	// Requests is how many requests reached the server in the tick.
	Requests int
	// Inflight is the requests waiting or in service at the tick's end.
	Inflight int
	// CPUBusy is the node's CPU busy share over the tick, with noise.
	CPUBusy float64
	// Goodput is the clients' successes completed in the tick, per second.
	Goodput float64
	// Offered is the new clients (first SYNs) of the tick, per second.
	Offered float64
}

// Result is a run's outcome.
type Result struct {
	// Ticks holds one Observation per tick and the p decided on it.
	Ticks []Tick
	// Capacity is the backend's C (requests/s).
	Capacity float64
	// Successes holds each success's completion time and its latency as
	// the client saw it (seconds since its first SYN).
	Successes [][2]float64
}

// Tick is one tick of a Result.
type Tick struct {
	Observation
	// P is the drop probability decided at the end of the tick, PFirst
	// the one a first attempt meets (Scenario.FirstP).
	P, PFirst float64
}

// request is a connection in the server.
type request struct {
	client  int     // closed-pool client, -1 for open loop
	start   float64 // the client's first SYN
	arrived float64 // the request reached the server
	service float64 // remaining service (seconds of a worker)
}

// synAttempt is a pending (re)transmitted SYN.
type synAttempt struct {
	at      float64
	start   float64
	n       int // retransmit index (0: first SYN)
	client  int
	retrans bool
	orphan  bool // the client gave up: nothing waits for the connection
}

// Run simulates sc; decide is called at the end of every tick with that
// tick's observation and returns the drop probability for the next one.
func Run(sc Scenario, decide func(Observation) float64) Result {
	return RunWindows(sc, decide, nil)
}

// RunWindows is Run with a check between ticks, as the daemon's onset
// check: every sc.Window, between sees the window's counts (New,
// Retransmits, Dropped, Requests, Responses, Inflight at its end; T its
// end) and may set a new drop probability (ok true).
func RunWindows(sc Scenario, decide func(Observation) float64, between func(Observation) (float64, bool)) Result {
	rng := rand.New(rand.NewPCG(sc.Seed, 0x0c1d))
	b := sc.Backend
	capacity := b.Capacity()
	linear := sc.LinearTimeouts
	timeout := sc.Clients.timeout()
	retx := SYNRetransmits(linear, timeout)
	retxAll := retx // the kernel's whole schedule, for DialOutlives
	if sc.DialOutlives {
		retxAll = SYNRetransmits(linear, orphanUpTo)
	}
	tickSteps := int(math.Round(sc.Tick.Seconds() / step))
	if tickSteps < 1 {
		tickSteps = 500
	}
	res := Result{Capacity: capacity}
	var (
		queue     []*request
		workers   = make([]*request, b.Workers)
		pending   = map[int][]synAttempt{} // by the step they are due in
		p         float64
		obs       Observation
		latencies []float64
		busySum   float64
		good      int
		offered   int
		nextSlot  = make([]float64, sc.Pool) // -1 while the client is busy
		slotBase  = make([]float64, sc.Pool)
		abandoned = map[*request]bool{}
		tokens    = sc.Limit * 0.02
		evenAcc   float64     // the error diffusion's accumulator (not Random)
		win       Observation // the counts since the last window
	)
	if !sc.Random {
		evenAcc = rng.Float64() // a random phase, as the loader starts it
	}
	winSteps := int(math.Round(sc.Window.Seconds() / step))
	push := func(a synAttempt) {
		k := int(math.Ceil(a.at/step - 1e-9))
		pending[k] = append(pending[k], a)
	}
	period := func(now float64) float64 {
		rate := sc.Load(now) * capacity
		if rate <= 0 || sc.Pool == 0 {
			return math.Inf(1)
		}
		return float64(sc.Pool) / rate
	}
	// Closed-pool clients start spread over their first period.
	for i := 0; i < sc.Pool; i++ {
		nextSlot[i] = step + rng.Float64()*math.Min(period(0), 1)
		slotBase[i] = nextSlot[i]
	}
	// done frees client i at now: its next start is the first slot of its
	// schedule after now (missed slots are skipped, not caught up).
	done := func(i int, now float64) {
		if i < 0 {
			return
		}
		per := period(now)
		if math.IsInf(per, 1) {
			nextSlot[i], slotBase[i] = now+0.1, now+0.1
			return
		}
		n := math.Floor((now-slotBase[i])/per) + 1
		nextSlot[i] = slotBase[i] + n*per
		slotBase[i] = nextSlot[i]
	}
	nSteps := int(math.Round(sc.Seconds / step))
	for k := 1; k <= nSteps; k++ {
		now := float64(k) * step
		// New open-loop clients.
		if sc.Clients != ClosedPool {
			lam := sc.Load(now) * capacity * step
			n := poisson(rng, lam)
			offered += n
			for j := 0; j < n; j++ {
				push(synAttempt{at: now, start: now, client: -1})
			}
		} else {
			for i := 0; i < sc.Pool; i++ {
				if nextSlot[i] >= 0 && nextSlot[i] <= now {
					offered++
					push(synAttempt{at: now, start: now, client: i})
					nextSlot[i] = -1 // busy until done
				}
			}
		}
		// SYNs due.
		if sc.Limit > 0 {
			tokens = math.Min(sc.Limit*0.02, tokens+sc.Limit*step)
		}
		due := pending[k]
		delete(pending, k)
		for _, a := range due {
			obs.New++
			win.New++
			if a.retrans {
				obs.Retransmits++
				win.Retransmits++
			}
			dp := p
			switch {
			case a.retrans && sc.RetransmitP != nil:
				dp = sc.RetransmitP(p)
			case !a.retrans && sc.FirstP != nil:
				dp = sc.FirstP(p)
			}
			shed := rng.Float64() < dp // drawn either way: a seed's other draws stay the same
			if !sc.Random {
				evenAcc += dp
				if shed = evenAcc >= 1; shed {
					evenAcc--
				}
			}
			if !shed && sc.Ceiling != nil {
				if c := sc.Ceiling(); c > 0 && inflight(queue, workers, abandoned) >= c && rng.Float64() >= sc.CeilingFloor {
					shed = true
					obs.Ceiled++
					win.Ceiled++
				}
			}
			if sc.Limit > 0 {
				if tokens >= 1 {
					tokens--
				} else {
					shed = true
				}
			}
			full := len(queue) >= b.Backlog
			if shed || full {
				if shed {
					obs.Dropped++
					win.Dropped++
				}
				switch {
				case a.n < len(retx) && !a.orphan:
					push(synAttempt{at: a.start + retx[a.n], start: a.start, n: a.n + 1, client: a.client, retrans: true})
				case a.n < len(retxAll):
					if !a.orphan {
						done(a.client, a.start+timeout)
					}
					push(synAttempt{at: a.start + retxAll[a.n], start: a.start, n: a.n + 1, client: -1, retrans: true, orphan: true})
				case !a.orphan:
					done(a.client, a.start+timeout)
				}
				continue
			}
			if a.orphan {
				continue // a connection nobody sends a request on
			}
			svc := b.Service
			if b.Exponential {
				svc = rng.ExpFloat64() * b.Service
			}
			queue = append(queue, &request{client: a.client, start: a.start, arrived: now, service: svc})
			obs.Requests++
			win.Requests++
		}
		// Clients that give up close their connection: a waiting request
		// is abandoned (the datapath forgets it; the server still serves
		// it, as a server cannot tell before it reads).
		speed := 1.0
		if sc.Capacity != nil {
			speed = sc.Capacity(now)
		}
		busy := 0.0
		for w := range workers {
			// A worker spends its step on as many requests as fit: a
			// request's end does not idle the rest of the step.
			budget := step * speed
			for budget > 1e-12 {
				if workers[w] == nil {
					if len(queue) == 0 {
						break
					}
					workers[w], queue = queue[0], queue[1:]
				}
				r := workers[w]
				use := math.Min(budget, r.service)
				budget -= use
				busy += use / (step * speed)
				r.service -= use
				if r.service > 1e-12 {
					break
				}
				workers[w] = nil
				if now-r.start <= timeout && !abandoned[r] {
					latencies = append(latencies, now-r.arrived)
					win.Responses++
					good++
					res.Successes = append(res.Successes, [2]float64{now, now - r.start})
					done(r.client, now)
				} else if abandoned[r] {
					delete(abandoned, r)
				} else {
					done(r.client, now)
				}
			}
		}
		// Requests past their client's deadline: the client gave up.
		if k%10 == 0 {
			for _, r := range queue {
				if !abandoned[r] && now-r.start > timeout {
					abandoned[r] = true
					done(r.client, r.start+timeout)
				}
			}
			for _, r := range workers {
				if r != nil && !abandoned[r] && now-r.start > timeout {
					abandoned[r] = true
					done(r.client, r.start+timeout)
				}
			}
		}
		busySum += math.Min(1, busy*b.CPUPerRequest/b.Service/float64(b.Cores))
		if between != nil && winSteps > 0 && k%winSteps == 0 && k%tickSteps != 0 {
			win.T = now
			win.Inflight = inflight(queue, workers, abandoned)
			if np, ok := between(win); ok {
				p = np
			}
			win = Observation{}
		} else if winSteps > 0 && k%winSteps == 0 {
			win = Observation{}
		}
		if k%tickSteps != 0 {
			continue
		}
		dt := float64(tickSteps) * step
		obs.T = now
		obs.Responses = len(latencies)
		if len(latencies) > 0 {
			slices.Sort(latencies)
			obs.P50, obs.P95, obs.P99 = quantile(latencies, 0.5), quantile(latencies, 0.95), quantile(latencies, 0.99)
			obs.Hist = make([]uint64, resptime.Buckets)
			for _, l := range latencies {
				obs.Hist[resptime.Bucket(time.Duration(l*float64(time.Second)))]++
			}
		}
		obs.Inflight = inflight(queue, workers, abandoned)
		cpu := busySum / float64(tickSteps)
		obs.CPUBusy = math.Min(1, math.Max(0, cpu+rng.NormFloat64()*sc.Noise))
		obs.Goodput = float64(good) / dt
		obs.Offered = float64(offered) / dt
		p = decide(obs)
		pf := p
		if sc.FirstP != nil {
			pf = sc.FirstP(p)
		}
		res.Ticks = append(res.Ticks, Tick{Observation: obs, P: p, PFirst: pf})
		obs, latencies, busySum, good, offered = Observation{}, latencies[:0], 0, 0, 0
	}
	return res
}

// inflight counts the requests waiting or in service whose clients still
// wait.
func inflight(queue, workers []*request, abandoned map[*request]bool) int {
	n := 0
	for _, r := range queue {
		if !abandoned[r] {
			n++
		}
	}
	for _, r := range workers {
		if r != nil && !abandoned[r] {
			n++
		}
	}
	return n
}

// quantile returns the q-quantile of sorted xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// poisson draws a Poisson count of mean lambda (Knuth's method for small
// means, a rounded normal above 30).
func poisson(rng *rand.Rand, lambda float64) int {
	if lambda <= 0 {
		return 0
	}
	if lambda > 30 {
		return max(0, int(math.Round(lambda+math.Sqrt(lambda)*rng.NormFloat64())))
	}
	l, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// Windows summarises a run over 1 s windows from t0 to t1: each window's
// mean drop probability a first attempt met and goodput (requests/s).
func (r Result) Windows(t0, t1 float64) (p, goodput []float64) {
	for w := t0; w+1 <= t1+1e-9; w++ {
		var sp float64
		var n int
		var g float64
		for _, tk := range r.Ticks {
			if tk.T > w+1e-9 && tk.T <= w+1+1e-9 {
				sp += tk.PFirst
				n++
			}
		}
		for _, s := range r.Successes {
			if s[0] > w && s[0] <= w+1 {
				g++
			}
		}
		if n > 0 {
			sp /= float64(n)
		}
		p = append(p, sp)
		goodput = append(goodput, g)
	}
	return p, goodput
}

// Steady are the no-limit-cycle figures of a run's steady part.
type Steady struct {
	// PStd is the standard deviation of the 1 s windows' mean drop
	// probability.
	PStd float64
	// GoodputMean is the windows' mean goodput (requests/s).
	GoodputMean float64
	// GoodShare is the share of windows whose goodput is at least 0.8 ×
	// GoodputMean.
	GoodShare float64
	// P95 and P99 are the 95th and 99th percentiles of the successes'
	// latency in the part (seconds, as the client saw it).
	P95, P99 float64
}

// SteadyPart returns the figures of [t0, t1].
func (r Result) SteadyPart(t0, t1 float64) Steady {
	ps, gs := r.Windows(t0, t1)
	var s Steady
	var mp float64
	for i := range ps {
		mp += ps[i]
		s.GoodputMean += gs[i]
	}
	n := float64(len(ps))
	mp /= n
	s.GoodputMean /= n
	var ok float64
	for i := range ps {
		s.PStd += (ps[i] - mp) * (ps[i] - mp)
		if gs[i] >= 0.8*s.GoodputMean {
			ok++
		}
	}
	s.PStd = math.Sqrt(s.PStd / n)
	s.GoodShare = ok / n
	var lat []float64
	for _, x := range r.Successes {
		if x[0] > t0 && x[0] <= t1 {
			lat = append(lat, x[1])
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		s.P95, s.P99 = quantile(lat, 0.95), quantile(lat, 0.99)
	}
	return s
}

// Goodput returns the successes per second completed in (t0, t1].
func (r Result) Goodput(t0, t1 float64) float64 {
	var g float64
	for _, s := range r.Successes {
		if s[0] > t0 && s[0] <= t1 {
			g++
		}
	}
	return g / (t1 - t0)
}

// GoodputWithin returns the successes per second completed in (t0, t1]
// whose latency as the client saw it (from its first SYN) is at most slo
// seconds: the harness's goodput within its SLO.
func (r Result) GoodputWithin(t0, t1, slo float64) float64 {
	var g float64
	for _, s := range r.Successes {
		if s[0] > t0 && s[0] <= t1 && s[1] <= slo {
			g++
		}
	}
	return g / (t1 - t0)
}
