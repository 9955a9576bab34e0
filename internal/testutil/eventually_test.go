package testutil

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWaitFor(t *testing.T) {
	n := 0
	if err := WaitFor(time.Second, time.Millisecond, func() (bool, error) { n++; return n >= 3, nil }); err != nil {
		t.Fatalf("WaitFor: %v", err)
	}
	if n != 3 {
		t.Fatalf("cond ran %d times, want 3", n)
	}
	errLast := errors.New("port 8080 not answering")
	err := WaitFor(20*time.Millisecond, 5*time.Millisecond, func() (bool, error) { return false, errLast })
	if !errors.Is(err, errLast) || !strings.Contains(err.Error(), "20ms") {
		t.Fatalf("WaitFor timeout error = %v, want it to wrap the last error and name the timeout", err)
	}
}
