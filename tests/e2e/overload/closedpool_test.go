package overload

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
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
