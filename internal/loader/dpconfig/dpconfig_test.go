package dpconfig

import (
	"strings"
	"testing"
)

// TestDefaultsInRange: the defaults lie inside the ranges the config file
// and the loader check, and a zero size takes its default.
func TestDefaultsInRange(t *testing.T) {
	if err := Check(Default()); err != nil {
		t.Error(err)
	}
	if err := Check(DefaultReject()); err != nil {
		t.Error(err)
	}
	if got := (Datapath{}).WithDefaults(); got.MaxPorts != Default().MaxPorts || got.FlowTableSize != Default().FlowTableSize || got.ResponseSample != 0 {
		t.Errorf("WithDefaults = %+v", got)
	}
	for _, tt := range []struct {
		s    any
		want string
	}{
		{Datapath{MaxPorts: 1, SYNTableSize: 1024, MaxPrefixes: 1, ResponsePorts: 1, FlowTableSize: 63}, "flow_table_size: 63 is out of range: must be 64..16777216"},
		{Reject{RejectRate: 1, RejectBurst: -1}, "reject_burst: -1 is out of range"},
	} {
		if err := Check(tt.s); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check(%+v) = %v, want %q", tt.s, err, tt.want)
		}
	}
	for rate, burst := range map[int]int{20000: 2000, 5: 1, 0: 1} {
		if got := BurstFor(rate); got != burst {
			t.Errorf("BurstFor(%d) = %d, want %d", rate, got, burst)
		}
	}
}
