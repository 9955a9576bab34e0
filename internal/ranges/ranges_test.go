package ranges

import (
	"math"
	"reflect"
	"testing"
	"time"
)

type sample struct {
	Gain   float64       `yaml:"gain" range:"(0, 2]"`
	Share  float64       `yaml:"share" range:"[0, 1]" suggest:"percent"`
	Ticks  int           `yaml:"ticks" range:"[1, 10]" hint:"2 is the default"`
	Every  time.Duration `yaml:"every" range:"[1s, ∞)"`
	Onset  time.Duration `yaml:"onset" range:"[10ms, 1s]" off:"0"`
	Plain  float64       `yaml:"plain"`
	NoYAML float64       `range:"[0, 1]"`
}

func valid() sample {
	return sample{Gain: 1, Share: 0.3, Ticks: 2, Every: 10 * time.Second, Onset: 50 * time.Millisecond, NoYAML: 0.5}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name      string
		set       func(*sample)
		key       string
		msg, hint string
	}{
		{"valid", func(*sample) {}, "", "", ""},
		{"open lower bound", func(s *sample) { s.Gain = 0 }, "gain", "0 is outside (0, 2]", ""},
		{"closed upper bound", func(s *sample) { s.Gain = 2 }, "", "", ""},
		{"above", func(s *sample) { s.Gain = 2.01 }, "gain", "2.01 is outside (0, 2]", ""},
		{"NaN", func(s *sample) { s.Gain = math.NaN() }, "gain", "NaN is outside (0, 2]", ""},
		{"+Inf", func(s *sample) { s.Share = math.Inf(1) }, "share", "+Inf is outside [0, 1]", ""},
		{"percent", func(s *sample) { s.Share = 30 }, "share", "30 is outside [0, 1]", "looks like percent; did you mean 0.3?"},
		{"not percent", func(s *sample) { s.Share = 300 }, "share", "300 is outside [0, 1]", ""},
		{"integer", func(s *sample) { s.Ticks = 11 }, "ticks", "11 is out of range: must be 1..10", "2 is the default"},
		{"duration floor", func(s *sample) { s.Every = 100 * time.Millisecond }, "every", "100ms is below 1s", ""},
		{"no ceiling", func(s *sample) { s.Every = 1000 * time.Hour }, "", "", ""},
		{"duration", func(s *sample) { s.Onset = 5 * time.Millisecond }, "onset", "5ms is outside [10ms, 1s]", ""},
		{"off value", func(s *sample) { s.Onset = 0 }, "", "", ""},
		{"untagged key", func(s *sample) { s.NoYAML = 2 }, "NoYAML", "2 is outside [0, 1]", ""},
		{"no range", func(s *sample) { s.Plain = -1e9 }, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := valid()
			tt.set(&s)
			got := Check(&s)
			if tt.key == "" {
				if len(got) != 0 {
					t.Fatalf("Check = %v, want nothing", got)
				}
				return
			}
			want := []Problem{{Key: tt.key, Msg: tt.msg, Hint: tt.hint}}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Check = %+v, want %+v", got, want)
			}
		})
	}
}

func TestMalformedTagPanics(t *testing.T) {
	for _, tag := range []string{`range:"0, 1"`, `range:"[0; 1]"`, `range:"[a, 1]"`, `range:"[1x, 2s]"`} {
		f := reflect.StructField{Name: "F", Type: reflect.TypeFor[time.Duration](), Tag: reflect.StructTag(tag)}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tag)
				}
			}()
			Of(f)
		}()
	}
}
