package daemon

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/olcd/olcd/internal/api"
)

// Health endpoints on the metrics listener, for process supervisors that
// probe over HTTP (Kubernetes liveness and readiness probes):
//
//   - GET /healthz (liveness): 200 while the tick loop runs, i.e. the last
//     tick is younger than heartbeat.stale_after; 503 once it is older, when
//     the datapath has already failed open and only a restart brings
//     protection back. Overload and shedding never fail it: killing a node
//     agent because the node is busy would drop its protection when it is
//     needed most.
//   - GET /readyz (readiness): 200 when, in addition, at least one interface
//     is attached and the datapath counters can be read; 503 otherwise, with
//     the reason. A DaemonSet rollout waits on it, so a new version that
//     cannot attach stops the rollout instead of spreading.
//
// Both answer in one plain-text line.

// withHealth serves /healthz and /readyz in front of next.
func (d *Daemon) withHealth(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeHealth(w, d.live(time.Now()))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		writeHealth(w, d.ready(time.Now()))
	})
	mux.Handle("/", next)
	return mux
}

func writeHealth(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ok: %v\n", err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// live returns nil while the last tick is younger than the heartbeat's
// stale_after at now; otherwise why not.
func (d *Daemon) live(now time.Time) error {
	st := d.freshStatus()
	if st == nil || st.UpdatedAt.IsZero() {
		return fmt.Errorf("no tick yet")
	}
	age := now.Sub(st.UpdatedAt)
	staleAfter := time.Duration(st.StaleAfterS * float64(time.Second))
	if staleAfter > 0 && age >= staleAfter {
		return fmt.Errorf("last tick %s ago, heartbeat.stale_after is %s: the datapath fails open",
			age.Round(time.Millisecond), staleAfter)
	}
	return nil
}

// ready returns nil when live and attached with readable counters.
func (d *Daemon) ready(now time.Time) error {
	if err := d.live(now); err != nil {
		return err
	}
	st := d.freshStatus()
	if len(st.Interfaces) == 0 {
		return fmt.Errorf("no interface attached (waiting: %v)", st.InterfacesWaiting)
	}
	s, err := d.eng.dp.Stats()
	if err != nil {
		return fmt.Errorf("datapath counters unreadable: %w", err)
	}
	d.eng.dp.ReleaseStats(s)
	return nil
}

var (
	descStaleAfter = prometheus.NewDesc("olcd_heartbeat_stale_after_seconds",
		"Configured heartbeat.stale_after in seconds: once the last tick is older, the datapath passes everything (fail-open).", nil, nil)
	descBound = prometheus.NewDesc("olcd_drop_probability_bound_ratio",
		"Highest drop probability the controller may write (0..1): 1 - controller.min_pass_rate.", nil, nil)
	descReloadOK = prometheus.NewDesc("olcd_config_last_reload_successful",
		"1 unless the last reload of the config file was refused (the running config then differs from the file); 0 until a reload succeeds.", nil, nil)
)

// boundsCollector exports the configured limits the alerting rules compare
// against (deploy/prometheus/olcd-rules.yaml), from the published status
// (fresh).
type boundsCollector struct{ fresh func() *api.Status }

// Describe sends every descriptor the collector may emit.
func (c *boundsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descStaleAfter
	ch <- descBound
	ch <- descReloadOK
}

// Collect reads the last published status.
func (c *boundsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.fresh()
	if st == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descStaleAfter, prometheus.GaugeValue, st.StaleAfterS)
	ch <- prometheus.MustNewConstMetric(descBound, prometheus.GaugeValue, st.Overload.Bound)
	ch <- prometheus.MustNewConstMetric(descReloadOK, prometheus.GaugeValue, b2f(st.ReloadRefused == nil))
}
