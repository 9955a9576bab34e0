package sampler

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// busyChildEnv makes the test binary, re-executed by the live cgroup test, a
// CPU-bound child instead of running tests: it spins for the number of
// seconds in the variable and exits, so it is bounded even if the parent dies
// without killing it.
const busyChildEnv = "OLCD_SAMPLER_BUSY_CHILD_S"

func TestMain(m *testing.M) {
	if v := os.Getenv(busyChildEnv); v != "" {
		secs, err := strconv.Atoi(v)
		if err != nil || secs <= 0 || secs > 60 {
			os.Exit(2)
		}
		spin(time.Now().Add(time.Duration(secs) * time.Second))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var sink uint64

func spin(until time.Time) {
	x := uint64(1)
	for i := 0; ; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		if i%(1<<20) == 0 && time.Now().After(until) {
			break
		}
	}
	sink = x
}
