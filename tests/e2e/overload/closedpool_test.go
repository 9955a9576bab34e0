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
