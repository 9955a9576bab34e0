//go:build !linux

package lb

import (
	"fmt"
	"os"
)

// clientMain needs Linux's TCP_INFO and SO_TIMESTAMPNS; the measurement
// that starts it runs only there.
func clientMain(string) int {
	fmt.Fprintln(os.Stderr, "the 1000-connection clients run on Linux only")
	return 2
}
