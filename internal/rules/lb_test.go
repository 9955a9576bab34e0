package rules

import (
	"testing"

	"github.com/olcd/olcd/internal/lb"
)

// TestLBOffByDefault: the embedded default and a config without `lb` open
// no agent listener.
func TestLBOffByDefault(t *testing.T) {
	c, _, err := Parse([]byte("mode: enforce\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []*Config{Default(), c} {
		if cfg.LB.Agent.Address != "" || cfg.LB.Agent.AllowAny {
			t.Errorf("agent %+v, want off", cfg.LB.Agent)
		}
		if cfg.LB.Weight != lb.DefaultParams() || cfg.LB.Agent.SendWait != lb.DefaultSendWait {
			t.Errorf("lb %+v, want the defaults", cfg.LB)
		}
	}
}

// TestLBAgentSameAsMetrics: the agent cannot take the metrics address.
func TestLBAgentSameAsMetrics(t *testing.T) {
	_, _, err := Parse([]byte("metrics: {address: 127.0.0.1:9477}\nlb: {agent: {address: 127.0.0.1:9477}}\n"), "t.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	if want := "t.yaml:2: lb.agent.address: \"127.0.0.1:9477\" is also metrics.address"; err.Error() != "invalid config: "+want+" (use another port, e.g. 9478)" {
		t.Errorf("error %q, want %q", err, want)
	}
}
