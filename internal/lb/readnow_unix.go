//go:build unix

package lb

import (
	"net"
	"syscall"
)

// readNow returns what c has already received, up to len(buf), without
// waiting (MSG_DONTWAIT); 0 when nothing has arrived or c is not a
// syscall.Conn.
func readNow(c net.Conn, buf []byte) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Read(func(fd uintptr) bool {
		m, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
		if err == nil && m > 0 {
			n = m
		}
		return true // never wait: this is the overflow path
	})
	return n
}
