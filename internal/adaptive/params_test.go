package adaptive

import (
	"reflect"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/ranges"
)

// TestEveryParamDeclared: each parameter declares its config key and its
// range on its field, the one declaration Validate and internal/rules read;
// a parameter without one would be accepted at any value.
func TestEveryParamDeclared(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Params]()) {
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || seen[key] {
			t.Errorf("%s: yaml key %q missing or not unique", f.Name, key)
		}
		seen[key] = true
		if _, ok := ranges.Of(f); !ok {
			t.Errorf("%s: no range tag", f.Name)
		}
	}
}

// TestValidateReportsEveryParam: Validate names every parameter outside
// its range, by its config key.
func TestValidateReportsEveryParam(t *testing.T) {
	var p Params // zero: ki, smoothing, ... are outside their ranges
	err := p.Validate()
	if err == nil {
		t.Fatal("zero Params accepted")
	}
	for _, want := range []string{"ki: 0 is outside (0, 2]", "activation_ticks: 0 is out of range: must be 1..10",
		"capacity_window: 0s is outside [1s, 60s]", "continue_every: 0s is below 1s", "initial_target: 0s is outside [1ms, 30s]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	for _, valid := range []string{"kp", "hysteresis", "min_pass_rate", "onset_interval"} {
		if strings.Contains(err.Error(), valid+":") {
			t.Errorf("error %q names %s, whose 0 is valid", err, valid)
		}
	}
}

// TestParamBudget holds the law's size to what a reader takes in one
// sitting: at most 12 keys.
func TestParamBudget(t *testing.T) {
	if n := reflect.TypeFor[Params]().NumField(); n > 12 {
		t.Errorf("%d controller keys, want ≤ 12", n)
	}
}
