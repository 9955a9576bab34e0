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
		return true // never wait
	})
	return n
}

// writeNow writes b to c without waiting: on a fresh socket the send
// buffer takes a line whole. A peer that advertised no window, or a
// socket that fails, gets nothing (the close follows).
func writeNow(c net.Conn, b []byte) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Write(func(fd uintptr) bool {
		_, _ = syscall.Write(int(fd), b)
		return true // never wait
	})
}
