package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/olcd/olcd/internal/api"
)

// TestLiveness: /healthz follows the tick loop only. Shedding at the bound,
// observe or off, sample errors: all live; a tick older than stale_after
// (the datapath has failed open) or no tick yet: not.
func TestLiveness(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		st       *api.Status
		wantCode int
		wantBody string
	}{
		{"no status yet", nil, 503, "no tick yet"},
		{"fresh tick", &api.Status{UpdatedAt: now.Add(-500 * time.Millisecond), StaleAfterS: 5}, 200, "ok"},
		{"shedding at the bound", &api.Status{UpdatedAt: now.Add(-time.Second), StaleAfterS: 5, Mode: "enforce",
			Overload: api.OverloadStatus{Active: true, DropProbability: 0.7, Bound: 0.7}, SampleErrors: []string{"psi_cpu: absent"}}, 200, "ok"},
		{"tick just under stale_after", &api.Status{UpdatedAt: now.Add(-4999 * time.Millisecond), StaleAfterS: 5}, 200, "ok"},
		{"tick at stale_after: failing open", &api.Status{UpdatedAt: now.Add(-5 * time.Second), StaleAfterS: 5}, 503, "datapath fails open"},
		{"tick long ago", &api.Status{UpdatedAt: now.Add(-time.Minute), StaleAfterS: 5, Overload: api.OverloadStatus{Active: true}}, 503, "last tick 1m0s ago"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Daemon{}
			if tc.st != nil {
				d.board.pub.Store(&published{st: tc.st})
			}
			rec := httptest.NewRecorder()
			err := d.live(now)
			writeHealth(rec, err)
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
		})
	}
}

// TestHealthRoutes: the health endpoints sit in front of the metrics
// handler without hiding it, and the bounds the alerts compare against are
// exported.
func TestHealthRoutes(t *testing.T) {
	d := &Daemon{}
	d.board.pub.Store(&published{st: &api.Status{UpdatedAt: time.Now(), StaleAfterS: 5, Overload: api.OverloadStatus{Bound: 0.7},
		ReloadRefused: &api.ReloadFailure{Error: "bad"}}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(&boundsCollector{fresh: d.freshStatus})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(d.withHealth(mux))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{"olcd_heartbeat_stale_after_seconds 5", "olcd_drop_probability_bound_ratio 0.7",
		"olcd_config_last_reload_successful 0"} {
		if code != 200 || !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics (%d) lacks %q:\n%s", code, want, body)
		}
	}
	if code, _ := get("/nothing"); code != 404 {
		t.Errorf("/nothing = %d, want 404", code)
	}
}
