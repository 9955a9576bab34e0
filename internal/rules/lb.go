package rules

import (
	"fmt"
	"time"

	"github.com/olcd/olcd/internal/lb"
	"github.com/olcd/olcd/internal/ranges"
)

// LBConfig is what olcd tells load balancers (docs/config.md, "lb"): the
// weight is computed from the controller's decision, never estimated
// apart.
type LBConfig struct {
	// Agent is the HAProxy agent-check listener.
	Agent LBAgentConfig
	// Weight shapes the weight: smoothing of the pass rate and its floor
	// (defaults lb.DefaultParams).
	Weight lb.Params
}

// LBAgentConfig is the HAProxy agent-check listener.
type LBAgentConfig struct {
	// Address is host:port with a literal IP; "" (the default) turns the
	// listener off. An unspecified address is refused unless AllowAny.
	Address string `yaml:"address"`
	// AllowAny permits 0.0.0.0, :: or an empty host in Address.
	AllowAny bool `yaml:"allow_any"`
	// SendWait is how long a connection may take to send its agent-send
	// line (0..1s, default lb.DefaultSendWait).
	SendWait time.Duration `yaml:"send_wait"`
}

// MaxSendWait bounds lb.agent.send_wait: HAProxy's agent check times out
// after agent-inter (1 s in the README's wiring) unless "timeout check"
// says otherwise.
const MaxSendWait = time.Second

// validateLB checks the `lb` section.
func (d *decoder) validateLB(c *Config) {
	a := c.LB.Agent
	if a.Address != "" && !d.failed["lb.agent.address"] {
		if err := lb.CheckAddress(a.Address, a.AllowAny); err != nil {
			d.addAt("lb.agent.address", err.Error(), "the listener tells anyone who connects the node's weight: bind the address the load balancer reaches")
		} else if a.Address == c.MetricsAddress {
			d.addAt("lb.agent.address", fmt.Sprintf("%q is also metrics.address", a.Address), "use another port, e.g. 9478")
		}
	}
	if a.SendWait < 0 || a.SendWait > MaxSendWait {
		d.addAt("lb.agent.send_wait", fmt.Sprintf("%v is outside [0, %v]", a.SendWait, MaxSendWait), "5ms is the default; 0 never waits (node answers only)")
	}
	for _, pr := range ranges.Check(c.LB.Weight) {
		d.addAt("lb."+pr.Key, pr.Msg, pr.Hint)
	}
}
