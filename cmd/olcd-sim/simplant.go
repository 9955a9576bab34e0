package main

import (
	"bufio"
	"fmt"
	"io"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/plant"
	"github.com/olcd/olcd/internal/rules"
)

// plantCSVHeader is the first line of `olcd-sim simulate --plant`'s CSV.
const plantCSVHeader = "t_s,new,retransmits,dropped,responses,response_time_p95_s,inflight_requests,cpu_busy,goodput_per_s,response_target_s,queue_p,drop_probability,retransmit_rule"

// plantPort is the port a plant run protects: the config's first port, or
// tcp/18080 (the harness's) under ports: auto.
func plantPort(cfg *rules.Config) []adaptive.PortConfig {
	if ports := cfg.PortConfigs(); len(ports) > 0 {
		return ports[:1]
	}
	return []adaptive.PortConfig{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: 18080}, Class: olc.ClassNormal}}
}

// simulatePlant runs the named plant scenario under the config's
// controller, writes one CSV row per tick to out and the scenario's
// figures to summary.
func simulatePlant(cfg *rules.Config, name string, seed uint64, out, summary io.Writer) error {
	sc, phase, err := plant.ParseScenario(name, seed)
	if err != nil {
		return err
	}
	sc.Random = cfg.Datapath.Selection == "random" // the datapath's draw, as the config picks it
	ccfg := cfg.ControllerConfig(plantPort(cfg))
	ccfg.Interval = sc.Tick
	c, err := adaptive.New(ccfg)
	if err != nil {
		return fmt.Errorf("build controller: %w", err)
	}
	key := ccfg.Ports[0].Key
	bw := bufio.NewWriter(out)
	fmt.Fprintln(bw, plantCSVHeader)
	var events []string
	res, err := plant.Drive(c, sc, key, cfg.Datapath.ResponseMinSamples, func(t plant.DriveTick) {
		for _, ev := range t.Decision.Events {
			if ev.Kind != adaptive.EventProbabilityChange {
				events = append(events, fmt.Sprintf("t=%s %s: %s", seconds(t.T), ev.Kind, ev.Reason))
			}
		}
		if t.Window {
			return // one row a tick; a window's p is in force until the next row's
		}
		p95 := ""
		if t.Responses >= cfg.Datapath.ResponseMinSamples && t.Responses > 0 {
			p95 = num(t.P95)
		}
		fmt.Fprintf(bw, "%s,%d,%d,%d,%d,%s,%d,%s,%s,%s,%s,%s,%s\n", num(t.T), t.New, t.Retransmits, t.Dropped, t.Responses, p95,
			t.Inflight, num(t.CPUBusy), num(t.Goodput), num(t.Port.ResponseTarget), num(t.Port.QueueP), num(t.Port.DropProbability), t.Port.Retransmits)
	})
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	for _, e := range events {
		fmt.Fprintln(summary, e)
	}
	st := res.SteadyPart(phase[0]+5, phase[1])
	fmt.Fprintf(summary, "%s (seed %d, %s, C = %.0f/s): goodput %.3f C over the phase [%s, %s] (%.3f C within %.0f ms of the first SYN, the overload harness's SLO); steady part from +5 s: std(p) over 1 s windows %.4f, windows with goodput ≥ 0.8 × mean %.0f%%, client p99 %.0f ms\n",
		name, seed, key, res.Capacity, res.Goodput(phase[0], phase[1])/res.Capacity, seconds(phase[0]), seconds(phase[1]),
		res.GoodputWithin(phase[0], phase[1], harnessSLO)/res.Capacity, harnessSLO*1000, st.PStd, 100*st.GoodShare, st.P99*1000)
	return nil
}

// harnessSLO is the overload harness's latency limit (seconds,
// tests/e2e/overload Options.SLO): the summary's second goodput counts the
// answers within it.
const harnessSLO = 0.2
