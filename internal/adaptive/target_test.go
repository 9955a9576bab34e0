package adaptive

import (
	"math"
	"testing"

	"github.com/olcd/olcd/internal/olc"
)

// TestAutoTargetProtocols is issue 24's must-show 4 on the controller: an
// auto target leaves initial_target within 10 s of quiet traffic on every
// protocol the datapath times, set to target_factor × the p95 of those
// ticks, and stays there while the queue grows. Each case is a 500 ms tick
// of 35 connections as the daemon hands it over: requests the datapath
// started timers for, answers, in flight at the tick's end (a request
// whose flow closes unanswered is abandoned, not in flight).
func TestAutoTargetProtocols(t *testing.T) {
	key := olc.PortKey{Proto: olc.ProtoTCP, Port: 3306}
	const p95 = 0.0015
	tests := []struct {
		name string
		// tick returns tick i's requests, answers and in flight.
		tick       func(i int) (requests, responses, inflight float64)
		wantTarget float64
	}{
		{"one request per connection (HTTP/1.0)", func(int) (float64, float64, float64) { return 35, 35, 0 }, 3 * p95},
		{"keep-alive, several exchanges per connection", func(int) (float64, float64, float64) { return 140, 140, 1 }, 3 * p95},
		{"connection per query, last message unanswered (COM_QUIT, then close)",
			func(int) (float64, float64, float64) { return 105, 70, 0 }, 3 * p95},
		{"server-first greeting: more answers than requests timed", func(int) (float64, float64, float64) { return 70, 105, 0 }, 3 * p95},
		{"pipelining: the first of each burst timed, in flight at the edges", func(i int) (float64, float64, float64) {
			return 35, 34 + float64(i%2), float64(i % 2)
		}, 3 * p95},
		{"a queue that grows every tick teaches nothing", func(i int) (float64, float64, float64) {
			return 105, 70, float64(10 * i)
		}, DefaultParams().InitialTarget.Seconds()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			step := onePort(t, cfgWith(), key, ResponseTarget{Auto: true})
			var d Decision
			for i := range 20 { // 10 s
				req, resp, infl := tc.tick(i)
				d = step(PortStats{New: 35, Response: PortResponse{Available: true, P95: p95, Samples: uint64(resp),
					Requests: req, Responses: resp, Inflight: infl}})
			}
			if got := d.Ports[0].ResponseTarget; math.Abs(got-tc.wantTarget) > 1e-9 {
				t.Errorf("target after 10 s: %.4f s, want %.4f s (%s)", got, tc.wantTarget, d.Reason)
			}
		})
	}
}
