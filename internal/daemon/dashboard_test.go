package daemon

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDashboardMetricsExist checks that every olcd_* metric the Grafana
// dashboard queries is one the daemon exports, and every recording rule it
// queries (level:olcd_…:operation) is one deploy/prometheus/olcd-rules.yaml
// records, so a rename cannot leave the dashboard silently empty.
func TestDashboardMetricsExist(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/olcd.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}

	m := newMetrics("test")
	descs := make(chan *prometheus.Desc, 256)
	for _, c := range []prometheus.Collector{m.ticks, m.tickSeconds, m.sampleErrors, m.reloads, m.reloadFailures, &stateCollector{}, &boundsCollector{}, &lbCollector{}} {
		c.Describe(descs)
	}
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var exported []string
	for d := range descs {
		if mm := fqName.FindStringSubmatch(d.String()); mm != nil {
			exported = append(exported, mm[1])
		}
	}
	exported = append(exported, "olcd_build_info")

	rules, err := os.ReadFile("../../deploy/prometheus/olcd-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- record: (\S+)$`).FindAllStringSubmatch(string(rules), -1) {
		recorded[m[1]] = true
	}
	ruleRef := regexp.MustCompile(`\b[a-z_]+:olcd_[a-z0-9_]+:[a-z0-9_]+`)
	metricRef := regexp.MustCompile(`\bolcd_[a-z0-9_]+`)
	queried := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range ruleRef.FindAllString(tg.Expr, -1) {
				queried++
				if !recorded[name] {
					t.Errorf("panel %q queries %s, which no recording rule records", p.Title, name)
				}
			}
			for _, name := range metricRef.FindAllString(ruleRef.ReplaceAllString(tg.Expr, ""), -1) {
				queried++
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if trimmed, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(exported, trimmed) {
						base = trimmed
					}
				}
				if !slices.Contains(exported, base) {
					t.Errorf("panel %q queries %s, which the daemon does not export", p.Title, name)
				}
			}
		}
	}
	if queried < 10 {
		t.Fatalf("dashboard queries only %d olcd metrics; the panels look lost", queried)
	}
}
