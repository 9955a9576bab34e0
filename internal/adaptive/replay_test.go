package adaptive

import (
	"math"
	"time"

	"github.com/olcd/olcd/internal/trace"
)

// TraceOrigin is where the tests' ticks start: the instant a trace's t_s = 0
// is replayed at, so hand-made ticks and replayed traces share one clock.
var TraceOrigin = trace.Origin

// seconds converts seconds to a Duration, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
