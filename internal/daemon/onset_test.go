package daemon

import (
	"reflect"
	"testing"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
)

// TestWindowResponse: one onset window of a port's measured queue from
// two reads of the cumulative counters, scaled by the sample rate.
func TestWindowResponse(t *testing.T) {
	k := olc.PortKey{Proto: olc.ProtoTCP, Port: 8080}
	cases := []struct {
		name      string
		prev, cur map[olc.PortKey]loader.RespCount
		sample    float64
		want      adaptive.PortResponse
	}{
		{
			name:   "window of a busy port, one flow in 4",
			prev:   map[olc.PortKey]loader.RespCount{k: {Requests: 100, Responses: 90, Abandoned: 2}},
			cur:    map[olc.PortKey]loader.RespCount{k: {Requests: 130, Responses: 100, Abandoned: 3}},
			sample: 4,
			want:   adaptive.PortResponse{Requests: 120, Responses: 40, Inflight: 108},
		},
		{
			name: "port not timed at the window's start",
			cur:  map[olc.PortKey]loader.RespCount{k: {Requests: 5}}, sample: 1,
		},
		{
			name: "port no longer timed",
			prev: map[olc.PortKey]loader.RespCount{k: {Requests: 5}}, sample: 1,
		},
		{
			// the slot was given back and taken again: the counters
			// restarted from 0.
			name:   "slot reset",
			prev:   map[olc.PortKey]loader.RespCount{k: {Requests: 500, Responses: 499}},
			cur:    map[olc.PortKey]loader.RespCount{k: {Requests: 3, Responses: 1}},
			sample: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := windowResponse(tc.cur, tc.prev, k, tc.sample); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
