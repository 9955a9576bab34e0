//go:build !unix

package lb

import (
	"net"
	"time"
)

// readNow reads nothing where MSG_DONTWAIT is unavailable: a connection
// waits for its line or is answered for the node.
func readNow(net.Conn, []byte) int { return 0 }

// writeNow writes b with a short deadline where a non-blocking write is
// unavailable.
func writeNow(c net.Conn, b []byte) {
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	_, _ = c.Write(b)
}
