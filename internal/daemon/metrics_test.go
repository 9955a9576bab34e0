package daemon

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/olcd/olcd/internal/olc"
)

// TestMetricsLint runs promlint (the checks of `promtool check metrics`)
// over the golden daemon's whole exposition: a name, unit or type that
// breaks Prometheus's conventions fails here, before a real scrape does in
// tests/e2e TestPrometheus.
func TestMetricsLint(t *testing.T) {
	d, _ := goldenDaemon(t)
	rec := httptest.NewRecorder()
	d.metrics.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	problems, err := promlint.New(strings.NewReader(rec.Body.String())).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestMetricsConventions holds the families to the rules docs/metrics.md
// states: one unit per family (no unit label), no precomputed rate of a
// counter (a gauge named per_second is a measured state docs/metrics.md
// names), and the node's load-balancer answer in families of its own (no
// series with an empty port label).
func TestMetricsConventions(t *testing.T) {
	d, _ := goldenDaemon(t)
	rec := httptest.NewRecorder()
	d.metrics.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	// The measured states that are per second and kept (docs/metrics.md,
	// "Rates"): the controller's capacity figure and the signals
	// listen_overflows_per_s and requests_per_s, which are the
	// controller's input shown against their thresholds.
	allowed := map[string]bool{
		"olcd_port_capacity_requests_per_second": true,
		"olcd_signal_per_second":                 true,
		"olcd_signal_threshold_per_second":       true,
	}
	typeLine := regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`)
	for _, m := range typeLine.FindAllStringSubmatch(body, -1) {
		name, typ := m[1], m[2]
		if typ == "gauge" && strings.Contains(name, "per_second") && !allowed[name] {
			t.Errorf("%s: a per-second gauge; export the counter and leave the rate to PromQL", name)
		}
	}
	for _, bad := range []string{`unit="`, `port=""`, "olcd_signal_value", "olcd_port_requests_per_second"} {
		if strings.Contains(body, bad) {
			t.Errorf("the exposition contains %q", bad)
		}
	}
	for _, want := range []string{"olcd_lb_node_weight_ratio ", "olcd_lb_node_drain ", `olcd_signal_ratio{signal="cpu_busy"}`,
		`olcd_signal_threshold_ratio{signal="cpu_busy"}`, "olcd_response_timing_sample_ratio "} {
		if !strings.Contains(body, want) {
			t.Errorf("the exposition lacks %q", want)
		}
	}
}

// TestSignalFamilies: every signal unit has its value and threshold
// families, each named once.
func TestSignalFamilies(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range olc.Signals() {
		d, ok := sigDescs[s.Unit().String()]
		if !ok {
			t.Errorf("signal %s: unit %s has no metric family", s, s.Unit())
			continue
		}
		for _, desc := range []*prometheus.Desc{d.value, d.threshold} {
			seen[desc.String()] = true
		}
	}
	if len(seen) != 2*len(sigDescs) {
		t.Errorf("%d families for %d units", len(seen), len(sigDescs))
	}
}
