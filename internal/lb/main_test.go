package lb

import (
	"os"
	"testing"
)

// clientsEnv makes the test binary a client process of the 1000-connection
// measurement (thousand_linux_test.go): it runs clientMain with the
// clientSpec in the variable and exits.
const clientsEnv = "OLCD_LB_THOUSAND_CLIENTS"

func TestMain(m *testing.M) {
	if spec := os.Getenv(clientsEnv); spec != "" {
		os.Exit(clientMain(spec))
	}
	os.Exit(m.Run())
}

// clientSpec is one burst: N clients connect to Addr at once from Source,
// each sends Req ("" sends nothing) and reads the answer, which must be
// one of Want.
type clientSpec struct {
	Addr, Source string
	N            int
	Req          string
	Want         []string
	// DelayedACK connects as HAProxy's agent check does (TCP_QUICKACK off
	// before connect): the handshake's last ACK waits for the first data,
	// so a line travels with it.
	DelayedACK bool
}

// clientResult is what a client process reports.
type clientResult struct {
	// LatencyNs holds each answered client's time, in ns, from its
	// request being complete (its connect() completed and, when it sends
	// a line, the line written) to the answer's last byte (its newline)
	// reaching its socket: both ends are kernel times where the client's
	// own scheduling would otherwise count (clientMain).
	LatencyNs []int64
	// DialNs holds each answered client's time from calling connect() to
	// the answer's last byte reaching its socket: the handshake, with the
	// server kernel's SYN backlog in a burst, included.
	DialNs []int64
	// Failed counts clients that got no connection or no right answer;
	// Errors holds the first few reasons.
	Failed int
	Errors []string
}
