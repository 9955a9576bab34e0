package overload

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestClosedPool: against a server that takes 300 ms per request, 2 clients
// scheduled at 20 requests/s for 1.2 s never have more than 2 requests in
// flight, skip the due times they were blocked through instead of catching
// up (about 4 requests each, not 12), and report every request and connect.
func TestClosedPool(t *testing.T) {
	var mu sync.Mutex
	inFlight, maxInFlight := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		mu.Unlock()
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
	}))
	defer srv.Close()
	var out bytes.Buffer
	cfg := AttackConfig{Target: srv.URL, Pool: 2, Timeout: time.Second,
		Phases: []Phase{{Name: "p", Rate: 20, Duration: 1200 * time.Millisecond}}}
	if err := RunClosedPool(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	var reqs, ok, dials, skipped int
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 5 && f[0] == "r" && f[1] == "a":
			reqs++
			if f[4] == outcomeOK {
				ok++
			}
		case len(f) == 4 && f[0] == "d":
			dials++
		case len(f) == 2 && f[0] == "skipped":
			skipped, _ = strconv.Atoi(f[1])
		}
	}
	if maxInFlight > 2 {
		t.Errorf("%d requests in flight at once, want at most the 2 clients", maxInFlight)
	}
	if reqs < 6 || reqs > 10 || ok != reqs || dials != reqs {
		t.Errorf("%d requests (%d ok, %d connects), want 6..10, all ok, one connect each", reqs, ok, dials)
	}
	if reqs+skipped != 24 {
		t.Errorf("%d requests + %d skipped, want the 24 due", reqs, skipped)
	}
}

// TestAttackClients: the open-loop attacker's clients. open-retry answers
// within its connect timeout plus Timeout (a request slower than Timeout
// alone still succeeds); open-giveup gives up after Timeout; a refused
// connect (nothing listening) is "refused", not "error"; closed-pool is not
// the attacker's and a client kind it does not know is an error.
func TestAttackClients(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(150 * time.Millisecond)
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	refusedURL := closed.URL
	closed.Close()
	outcomes := func(cfg AttackConfig) map[string]int {
		t.Helper()
		var out bytes.Buffer
		if err := RunAttack(context.Background(), cfg, &out); err != nil {
			t.Fatalf("%s: %v", cfg.Clients, err)
		}
		n := map[string]int{}
		for _, l := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(l); len(f) == 5 && f[0] == "r" && f[1] == "a" {
				n[f[4]]++
			}
		}
		return n
	}
	phases := []Phase{{Name: "p", Rate: 20, Duration: 500 * time.Millisecond}}
	if n := outcomes(AttackConfig{Target: srv.URL, Clients: ClientsOpenRetry, ConnectTimeout: time.Second, Timeout: 100 * time.Millisecond, Phases: phases}); n[outcomeOK] < 8 || len(n) != 1 {
		t.Errorf("open-retry, 150 ms answers, 1 s connect + 100 ms: outcomes %v, want all ok", n)
	}
	if n := outcomes(AttackConfig{Target: srv.URL, Clients: ClientsOpenGiveUp, Timeout: 100 * time.Millisecond, Phases: phases}); n[outcomeTimeout] < 8 || len(n) != 1 {
		t.Errorf("open-giveup, 150 ms answers, 100 ms timeout: outcomes %v, want all timeouts", n)
	}
	if n := outcomes(AttackConfig{Target: refusedURL, Timeout: time.Second, Phases: phases}); n[outcomeRefused] < 8 || len(n) != 1 {
		t.Errorf("nothing listening: outcomes %v, want all refused", n)
	}
	for _, c := range []Clients{ClientsClosedPool, "closed-loop"} {
		if err := RunAttack(context.Background(), AttackConfig{Target: srv.URL, Clients: c, Timeout: time.Second, Phases: phases}, &bytes.Buffer{}); err == nil {
			t.Errorf("clients %q: no error", c)
		}
	}
	if err := RunAttack(context.Background(), AttackConfig{Target: srv.URL, Clients: ClientsOpenRetry, Timeout: time.Second, Phases: phases}, &bytes.Buffer{}); err == nil {
		t.Error("open-retry without a connect timeout: no error")
	}
}

// TestClosedPoolConnectEndsAtTimeout: a closed-pool client's connect ends
// with its request's timeout. The listener's accept queue is full and never
// drained, so the kernel drops every further SYN and the client's connects
// can only time out; each must be reported (its "d" line written before the
// pool returns, but for a client's last) and last no longer than the timeout. net/http detaches a
// dial from its request, so an unbounded dial went on retransmitting its SYN
// for 20 s after the client had given up.
func TestClosedPoolConnectEndsAtTimeout(t *testing.T) {
	ln, err := fullListener(t)
	if err != nil {
		t.Skipf("no loopback listener with a full accept queue: %v", err)
	}
	const timeout = 300 * time.Millisecond
	var out bytes.Buffer
	cfg := AttackConfig{Target: "http://" + ln + "/", Pool: 2, Timeout: timeout,
		Phases: []Phase{{Name: "p", Rate: 4, Duration: 1500 * time.Millisecond}}}
	if err := RunClosedPool(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	var reqs, dials int
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 5 && f[0] == "r" && f[1] == "a":
			reqs++
			if f[4] != outcomeTimeout {
				t.Errorf("request outcome %q against a full accept queue, want %q", f[4], outcomeTimeout)
			}
		case len(f) == 4 && f[0] == "d":
			dials++
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			if d := time.Duration(ns); d > timeout+200*time.Millisecond {
				t.Errorf("connect lasted %v, want at most the %v timeout", d, timeout)
			}
		}
	}
	// Each client's last connect may end with its request, just after the
	// pool returned: at most cfg.Pool unreported.
	if reqs == 0 || dials > reqs || dials < reqs-cfg.Pool {
		t.Errorf("%d requests, %d connects reported before the pool returned, want one each (%d may race the end)", reqs, dials, cfg.Pool)
	}
}

// fullListener returns the address of a loopback TCP listener whose accept
// queue (backlog 0: one connection) is filled and never accepted from, so
// that the kernel drops further SYNs; it is closed with t.
func fullListener(t *testing.T) (string, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return "", err
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return "", err
	}
	if err := syscall.Listen(fd, 0); err != nil {
		return "", err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the queue: connects complete until it holds backlog + 1.
	for i := 0; i < 4; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr, nil // the queue is full: SYNs are dropped
		}
		t.Cleanup(func() { c.Close() })
	}
	return "", errors.New("the accept queue did not fill")
}

// TestAttackLight: the light clients (AttackConfig.Light) connect from
// their addresses in turn, beside the main clients from the default one,
// and their requests are reported as "r l"; a heavy phase at rate 0 sends
// nothing.
func TestAttackLight(t *testing.T) {
	var mu sync.Mutex
	from := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		from[host]++
		mu.Unlock()
	}))
	defer srv.Close()
	var out bytes.Buffer
	cfg := AttackConfig{Target: srv.URL, Timeout: time.Second,
		Phases: []Phase{{Name: "silent", Rate: 0, Duration: 300 * time.Millisecond}, {Name: "heavy", Rate: 40, Duration: 500 * time.Millisecond}},
		Light:  &LightClients{Addrs: []string{"127.0.0.2", "127.0.0.3"}, Rate: 20}}
	if err := RunAttack(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "r" && f[4] == outcomeOK {
			kinds[f[1]]++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// 40/s for 0.5 s and 20/s for 0.8 s, within a request of pacing.
	if kinds["a"] < 18 || kinds["a"] > 21 || kinds["l"] < 14 || kinds["l"] > 17 {
		t.Errorf("requests answered by kind %v, want about 20 a and 16 l", kinds)
	}
	if from["127.0.0.1"] != kinds["a"] || from["127.0.0.2"]+from["127.0.0.3"] != kinds["l"] || from["127.0.0.2"] < 7 || from["127.0.0.3"] < 7 {
		t.Errorf("requests by source %v, kinds %v: want the light ones from 127.0.0.2 and .3 in turn", from, kinds)
	}
	cfg.Light.Addrs = nil
	if err := RunAttack(context.Background(), cfg, &bytes.Buffer{}); err == nil {
		t.Error("light clients without addresses: no error")
	}
}
