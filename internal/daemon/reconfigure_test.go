package daemon

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/rules"
)

// TestPlan: plan names what a new config changes in the running daemon
// (a new sampler, a new controller, the timers, the settings that need a
// restart) and nothing else; a config the running datapath cannot hold is
// refused by it, before anything changes.
func TestPlan(t *testing.T) {
	const base = "mode: enforce\ninterval: 500ms\nports: [{port: 80}]\n"
	for _, tt := range []struct {
		name, from, to                  string
		sampler, controller, tick, onst bool
		restart                         []string
		refused                         bool
	}{
		{name: "same settings", from: base, to: base},
		{name: "cgroup", from: base, to: base + "cgroup: system.slice/nginx.service\n", sampler: true},
		{name: "leaving off", from: "mode: off\ninterval: 500ms\nports: [{port: 80}]\n", to: base, controller: true},
		{name: "to off", from: base, to: "mode: off\ninterval: 500ms\nports: [{port: 80}]\n"},
		{name: "interval", from: base, to: "mode: enforce\ninterval: 250ms\nports: [{port: 80}]\n", tick: true, onst: true},
		{name: "onset interval", from: base, to: base + "controller: {onset_interval: 20ms}\n", onst: true},
		{name: "attach", from: base, to: base + "attach: xdp\n", restart: []string{"attach"}},
		{name: "interval past the running stale_after", from: base, to: "mode: enforce\ninterval: 5s\nheartbeat: {stale_after: 20s}\nports: [{port: 80}]\n",
			tick: true, onst: true, refused: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			from, _, err := rules.Parse([]byte(tt.from), "from.yaml")
			must(t, err)
			to, _, err := rules.Parse([]byte(tt.to), "to.yaml")
			must(t, err)
			d := &Daemon{opts: Options{DecisionLog: "-"}, log: slog.New(slog.DiscardHandler)}
			d.eng = &engine{log: d.log, cfg: from, limits: limitsOf(from)}
			ports := []loader.PortPolicy{portPolicy(to, to.Ports[0])}
			c, err := d.plan(to, func() []loader.PortPolicy { return ports })
			if tt.refused {
				if err == nil {
					t.Fatal("planned, want a refusal")
				}
				return
			}
			must(t, err)
			if c.newSampler != tt.sampler || c.newController != tt.controller || c.interval != tt.tick || c.onset != tt.onst {
				t.Errorf("sampler %v controller %v interval %v onset %v, want %v %v %v %v",
					c.newSampler, c.newController, c.interval, c.onset, tt.sampler, tt.controller, tt.tick, tt.onst)
			}
			if !slices.Equal(c.restart, tt.restart) {
				t.Errorf("restart %v, want %v", c.restart, tt.restart)
			}
			if c.switchLog || c.moveAgent || c.interfaces || !slices.Equal(c.ports, ports) {
				t.Errorf("log %v agent %v interfaces %v ports %v: want none but the ports given", c.switchLog, c.moveAgent, c.interfaces, c.ports)
			}
		})
	}
}
