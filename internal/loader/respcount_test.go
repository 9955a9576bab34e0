package loader

import (
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// TestResponseCounts: for every response-timing case, the cumulative
// counts the onset check reads between ticks are those of Stats, read
// after every step (the two share the fold: neither loses what the other
// read), and the in-flight count is what was neither answered nor
// abandoned.
func TestResponseCounts(t *testing.T) {
	for _, tc := range respCases {
		t.Run(tc.name, func(t *testing.T) {
			d := loadTimed(t, 1)
			port := tc.port
			if port == (olc.PortKey{}) {
				port = tcp8080
			}
			counts := make(map[olc.PortKey]RespCount)
			for i := range tc.steps {
				runSteps(t, d, hookTC, tc.steps[i:i+1])
				must(t, d.ResponseCounts(counts))
			}
			r := stats(t, d).Response[port]
			got := counts[port]
			if got.Requests != r.Requests || got.Responses != r.Responses || got.Abandoned != r.Abandoned {
				t.Errorf("counts %+v, Stats requests %d responses %d abandoned %d", got, r.Requests, r.Responses, r.Abandoned)
			}
			if got.Requests != tc.requests || got.Responses != uint64(len(tc.want)) || got.Abandoned != tc.abandoned {
				t.Errorf("counts %+v, want requests %d responses %d abandoned %d", got, tc.requests, len(tc.want), tc.abandoned)
			}
			if want := uint64(max(r.Outstanding(), 0)); got.Inflight() != want {
				t.Errorf("in flight %d, want %d", got.Inflight(), want)
			}
		})
	}
}

// TestResponseCountsOff: with timing off the map is emptied and nothing is
// read.
func TestResponseCountsOff(t *testing.T) {
	d := loadTimed(t, 0)
	counts := map[olc.PortKey]RespCount{tcp8080: {Requests: 7}}
	must(t, d.ResponseCounts(counts))
	if len(counts) != 0 {
		t.Errorf("timing off: %v, want none", counts)
	}
}

// TestRespCountInflight: never negative when a fold catches the answer
// before the request.
func TestRespCountInflight(t *testing.T) {
	for _, tc := range []struct {
		r    RespCount
		want uint64
	}{
		{RespCount{Requests: 10, Responses: 3, Abandoned: 2}, 5},
		{RespCount{Requests: 10, Responses: 10}, 0},
		{RespCount{Requests: 10, Responses: 9, Abandoned: 2}, 0},
	} {
		if got := tc.r.Inflight(); got != tc.want {
			t.Errorf("%+v: in flight %d, want %d", tc.r, got, tc.want)
		}
	}
}

// BenchmarkResponseCounts is one read of the onset check (twenty a
// second), with two timed ports. ResponseCounts allocates nothing of its
// own; cilium/ebpf's per-CPU Lookup allocates its value buffer (a whole
// olcd_resp_hist per CPU) and reflects into the slice on every call
// (v0.22: 8 allocations, 12 KB for two ports on 2 CPUs).
func BenchmarkResponseCounts(b *testing.B) {
	d := loadTest(b, Config{StaleAfter: time.Hour, ResponseSample: 1, FlowTableSize: 64})
	must(b, d.SetPolicies([]PortPolicy{
		{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop},
		{Key: olc.PortKey{Proto: olc.ProtoUDP, Port: 53}, Mode: olc.ModeEnforce, Action: olc.ActionDrop},
	}))
	counts := make(map[olc.PortKey]RespCount)
	if err := d.ResponseCounts(counts); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := d.ResponseCounts(counts); err != nil {
			b.Fatal(err)
		}
	}
}
