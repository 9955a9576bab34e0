package sampler

import (
	"bytes"
	"fmt"
)

// parseListenOverflows finds TcpExt ListenOverflows in /proc/net/netstat,
// which the kernel prints as pairs of lines, a header and its values:
//
//	TcpExt: SyncookiesSent SyncookiesRecv ... ListenOverflows ListenDrops ...
//	TcpExt: 0 0 ... 12 12 ...
//
// found is false (and err nil) when no TcpExt section or no ListenOverflows
// column exists. A header without a value line, a value line with fewer
// columns than the header's position of ListenOverflows, or a value that is
// not an unsigned integer is an error naming the line.
//
// Hand parser: procfs reads netstat only per process (/proc/self/net/netstat), which fixture roots lack.
func parseListenOverflows(data []byte) (v uint64, found bool, err error) {
	lineNo := 0
	next := func() ([]byte, bool) {
		if len(data) == 0 {
			return nil, false
		}
		var line []byte
		line, data, _ = bytes.Cut(data, newline)
		lineNo++
		return line, true
	}
	for {
		header, ok := next()
		if !ok {
			return 0, false, nil
		}
		proto, cols := cutField(header)
		if string(proto) != "TcpExt:" {
			continue
		}
		idx := -1
		for i := 0; ; i++ {
			var name []byte
			name, cols = cutField(cols)
			if len(name) == 0 {
				break
			}
			if string(name) == "ListenOverflows" {
				idx = i
				break
			}
		}
		headerLine := lineNo
		values, ok := next()
		if !ok {
			return 0, false, fmt.Errorf("net/netstat line %d: TcpExt header without a value line", headerLine)
		}
		vproto, vals := cutField(values)
		if string(vproto) != "TcpExt:" {
			return 0, false, fmt.Errorf("net/netstat line %d: want TcpExt values after the header, got %q", lineNo, clip(vproto))
		}
		if idx < 0 {
			continue
		}
		var tok []byte
		for i := 0; i <= idx; i++ {
			tok, vals = cutField(vals)
		}
		if len(tok) == 0 {
			return 0, false, fmt.Errorf("net/netstat line %d: no value for ListenOverflows (column %d)", lineNo, idx+1)
		}
		n, ok := parseUintBytes(tok)
		if !ok {
			return 0, false, fmt.Errorf("net/netstat line %d: ListenOverflows %q: not an unsigned integer", lineNo, clip(tok))
		}
		return n, true, nil
	}
}
