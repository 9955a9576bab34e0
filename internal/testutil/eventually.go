package testutil

import (
	"fmt"
	"testing"
	"time"
)

// Eventually polls cond every tick until it returns true, and fails the test
// with the formatted message (and cond's last error, if it returned one) when
// timeout passes first. It replaces hand-written deadline loops and sleeps
// used as synchronisation: a test waits on the state it needs, for at most
// timeout. cond runs on the test's goroutine; tick of 0 means 10 ms.
func Eventually(t testing.TB, timeout, tick time.Duration, cond func() (bool, error), format string, args ...any) {
	t.Helper()
	if err := WaitFor(timeout, tick, cond); err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}

// WaitFor is Eventually without a test: it polls cond every tick (0 means
// 10 ms) and returns nil as soon as cond returns true, or an error naming the
// timeout and cond's last error once timeout has passed. Helpers that are not
// tests (harnesses, fixtures in goroutines) use it.
func WaitFor(timeout, tick time.Duration, cond func() (bool, error)) error {
	if tick <= 0 {
		tick = 10 * time.Millisecond
	}
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if !time.Now().Before(deadline) {
			if err != nil {
				return fmt.Errorf("not true within %v: %w", timeout, err)
			}
			return fmt.Errorf("not true within %v", timeout)
		}
		time.Sleep(min(tick, time.Until(deadline)+time.Millisecond))
	}
}
