package daemon

import (
	"fmt"
	"net"
	"os"
)

// sdNotify sends state (e.g. "READY=1", "RELOADING=1", "STOPPING=1") to the
// service manager over $NOTIFY_SOCKET, as described in sd_notify(3). Outside
// systemd (NOTIFY_SOCKET unset) it does nothing and returns nil. The protocol
// is one datagram on a unix socket, so no library is needed; an abstract
// socket is named with a leading '@'.
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	addr := &net.UnixAddr{Name: path, Net: "unixgram"}
	if path[0] == '@' {
		addr.Name = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return fmt.Errorf("sd_notify: dial %s: %w", path, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify: write %q: %w", state, err)
	}
	return nil
}
