package loader

import (
	"testing"
	"time"

	"github.com/olcd/olcd/internal/olc"
)

// Real protocols' exchanges through the pairing (resp.h), as the wire
// carries them: several exchanges per connection, a last client message
// that gets no answer (MySQL COM_QUIT, PostgreSQL Terminate) before the
// close, servers that speak first (MySQL, SMTP), pipelining. Each case
// checks the requests in flight after every step (what the controller's
// queue reads), and at the end the histogram, the counters and the flows
// left. Sequence numbers count from the first byte after the handshake
// (cseq0, sseq0); the handshake's segments carry no payload and never
// reach the pairing.

// protoStep is one segment and the requests in flight after it.
type protoStep struct {
	step
	flight uint64
}

// protoCase is one protocol exchange and what it must leave.
type protoCase struct {
	name  string
	steps []protoStep
	// want are the response times the histogram must hold.
	want      []time.Duration
	requests  uint64
	abandoned uint64
	flows     int
}

func cin(at time.Duration, seq, ack uint32, flags uint8, n int, flight uint64) protoStep {
	return protoStep{in(at, c(seq, ack, flags, n)), flight}
}

func sout(at time.Duration, seq, ack uint32, flags uint8, n int, flight uint64) protoStep {
	return protoStep{out(at, s(seq, ack, flags, n)), flight}
}

// The MySQL exchange of a connect-per-query client (go-sql-driver/mysql):
// the server's greeting (78 bytes), the client's login (60), the server's
// OK (11), COM_QUERY (45), its result set (120), COM_QUIT (5, never
// answered), then the close.
const (
	myGreet, myLogin, myOK, myQuery, myResult, myQuit = 78, 60, 11, 45, 120, 5
	// Where each side's stream stands after the exchange before the
	// close.
	myC = cseq0 + myLogin + myQuery + myQuit
	myS = sseq0 + myGreet + myOK + myResult
)

// mysqlUntilQuit is the MySQL exchange up to and including COM_QUIT:
// the login timed 1 ms, the query 4 ms.
func mysqlUntilQuit() []protoStep {
	return []protoStep{
		sout(0, sseq0, cseq0, psh, myGreet, 0), // server first: answers nothing
		cin(1*ms, cseq0, sseq0+myGreet, psh, myLogin, 1),
		sout(2*ms, sseq0+myGreet, cseq0+myLogin, psh, myOK, 0),
		cin(3*ms, cseq0+myLogin, sseq0+myGreet+myOK, psh, myQuery, 1),
		sout(7*ms, sseq0+myGreet+myOK, cseq0+myLogin+myQuery, psh, myResult, 0),
		cin(8*ms, cseq0+myLogin+myQuery, myS, psh, myQuit, 1),
	}
}

func concat(parts ...[]protoStep) []protoStep {
	var out []protoStep
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var protoCases = []protoCase{
	{name: "mysql connect-per-query: COM_QUIT, client FIN first", steps: concat(mysqlUntilQuit(), []protoStep{
		cin(8*ms, myC, myS, tcpFIN|tcpACK, 0, 0),
		sout(9*ms, myS, myC+1, tcpFIN|tcpACK, 0, 0),
	}), want: []time.Duration{1 * ms, 4 * ms}, requests: 3, abandoned: 1, flows: 0},
	{name: "mysql connect-per-query: COM_QUIT, server FIN first", steps: concat(mysqlUntilQuit(), []protoStep{
		sout(9*ms, myS, myC, tcpFIN|tcpACK, 0, 0),
		cin(9*ms, myC, myS+1, tcpFIN|tcpACK, 0, 0),
	}), want: []time.Duration{1 * ms, 4 * ms}, requests: 3, abandoned: 1, flows: 0},
	{name: "mysql: COM_QUIT with the FIN in one segment", steps: concat(mysqlUntilQuit()[:5], []protoStep{
		cin(8*ms, cseq0+myLogin+myQuery, myS, psh|tcpFIN, myQuit, 1),
		sout(9*ms, myS, myC+1, tcpFIN|tcpACK, 0, 0),
		cin(9*ms, myC+1, myS+1, tcpACK, 0, 0),
	}), want: []time.Duration{1 * ms, 4 * ms}, requests: 3, abandoned: 1, flows: 0},
	{name: "mysql: COM_QUIT, then a reset (SO_LINGER 0)", steps: concat(mysqlUntilQuit(), []protoStep{
		cin(8*ms, myC, myS, tcpRST|tcpACK, 0, 0),
	}), want: []time.Duration{1 * ms, 4 * ms}, requests: 3, abandoned: 1, flows: 0},
	{name: "mysql: server's greeting, then the server resets (too many connections)", steps: []protoStep{
		sout(0, sseq0, cseq0, psh, 40, 0), // ER_CON_COUNT_ERROR instead of a greeting
		sout(0, sseq0+40, cseq0, tcpFIN|tcpACK, 0, 0),
		cin(1*ms, cseq0, sseq0+41, tcpFIN|tcpACK, 0, 0),
	}, flows: 0},
	{name: "mysql pooled connection: many queries, one flow", steps: []protoStep{
		sout(0, sseq0, cseq0, psh, myGreet, 0),
		cin(1*ms, cseq0, sseq0+myGreet, psh, myLogin, 1),
		sout(2*ms, sseq0+myGreet, cseq0+myLogin, psh, myOK, 0),
		cin(10*ms, cseq0+myLogin, sseq0+myGreet+myOK, psh, myQuery, 1),
		sout(13*ms, sseq0+myGreet+myOK, cseq0+myLogin+myQuery, psh, myResult, 0),
		cin(20*ms, cseq0+myLogin+myQuery, myS, psh, myQuery, 1),
		sout(25*ms, myS, cseq0+myLogin+2*myQuery, psh, myResult, 0),
	}, want: []time.Duration{1 * ms, 3 * ms, 5 * ms}, requests: 3, flows: 1},
	// PostgreSQL: the client speaks first (StartupMessage), the server
	// asks for the password, answers the login in two segments
	// (AuthenticationOk, ParameterStatus…, then ReadyForQuery), the query,
	// and Terminate ('X', 5 bytes, never answered) before the close.
	{name: "postgresql: startup, password, query, Terminate, FIN", steps: []protoStep{
		cin(0, cseq0, sseq0, psh, 80, 1),              // StartupMessage
		sout(1*ms, sseq0, cseq0+80, psh, 24, 0),       // AuthenticationSASL / MD5
		cin(2*ms, cseq0+80, sseq0+24, psh, 41, 1),     // PasswordMessage
		sout(4*ms, sseq0+24, cseq0+121, psh, 300, 0),  // AuthenticationOk, ParameterStatus…
		sout(4*ms, sseq0+324, cseq0+121, psh, 6, 0),   // ReadyForQuery: no request waiting
		cin(5*ms, cseq0+121, sseq0+330, psh, 30, 1),   // Query
		sout(11*ms, sseq0+330, cseq0+151, psh, 90, 0), // RowDescription, DataRow, CommandComplete, ReadyForQuery
		cin(12*ms, cseq0+151, sseq0+420, psh, 5, 1),   // Terminate
		cin(12*ms, cseq0+156, sseq0+420, tcpFIN|tcpACK, 0, 0),
		sout(13*ms, sseq0+420, cseq0+157, tcpFIN|tcpACK, 0, 0),
	}, want: []time.Duration{1 * ms, 2 * ms, 6 * ms}, requests: 4, abandoned: 1, flows: 0},
	// SMTP: the server's 220 first, then every command answered, QUIT
	// too (221), and the server closes.
	{name: "smtp: greeting, commands, QUIT answered, server closes", steps: []protoStep{
		sout(0, sseq0, cseq0, psh, 30, 0),           // 220 ESMTP
		cin(1*ms, cseq0, sseq0+30, psh, 20, 1),      // EHLO
		sout(2*ms, sseq0+30, cseq0+20, psh, 90, 0),  // 250-…
		cin(3*ms, cseq0+20, sseq0+120, psh, 30, 1),  // MAIL FROM
		sout(4*ms, sseq0+120, cseq0+50, psh, 10, 0), // 250
		cin(5*ms, cseq0+50, sseq0+130, psh, 6, 1),   // QUIT
		sout(6*ms, sseq0+130, cseq0+56, psh, 10, 0), // 221
		sout(6*ms, sseq0+140, cseq0+56, tcpFIN|tcpACK, 0, 0),
		cin(7*ms, cseq0+56, sseq0+141, tcpFIN|tcpACK, 0, 0),
	}, want: []time.Duration{1 * ms, 1 * ms, 1 * ms}, requests: 3, flows: 0},
	// HTTP/1.1 pipelining: three requests in a burst, their answers in
	// order, then the client closes. The oldest is timed; the later two
	// were in the server before it answered (its ACK covers them).
	{name: "http pipelining: three requests, three answers, close", steps: []protoStep{
		cin(0, cseq0, sseq0, psh, 100, 1),
		cin(0, cseq0+100, sseq0, psh, 100, 1),
		cin(0, cseq0+200, sseq0, psh, 100, 1),
		sout(5*ms, sseq0, cseq0+300, psh, 200, 0),
		sout(6*ms, sseq0+200, cseq0+300, psh, 200, 0),
		sout(7*ms, sseq0+400, cseq0+300, psh, 200, 0),
		cin(8*ms, cseq0+300, sseq0+600, tcpFIN|tcpACK, 0, 0),
		sout(8*ms, sseq0+600, cseq0+301, tcpFIN|tcpACK, 0, 0),
	}, want: []time.Duration{5 * ms}, requests: 1, flows: 0},
	// Redis-style pipelining between exchanges: a request answered, two
	// pipelined, answered in one segment, one more: each burst is one
	// request timed.
	{name: "redis pipelining between single requests", steps: []protoStep{
		cin(0, cseq0, sseq0, psh, 20, 1),
		sout(1*ms, sseq0, cseq0+20, psh, 5, 0),
		cin(2*ms, cseq0+20, sseq0+5, psh, 20, 1),
		cin(2*ms, cseq0+40, sseq0+5, psh, 20, 1),
		sout(4*ms, sseq0+5, cseq0+60, psh, 10, 0),
		cin(5*ms, cseq0+60, sseq0+15, psh, 20, 1),
		sout(8*ms, sseq0+15, cseq0+80, psh, 5, 0),
	}, want: []time.Duration{1 * ms, 2 * ms, 3 * ms}, requests: 3, flows: 1},
	// A pipelined answer that the server sends in two segments, the
	// second after the client's next request: that request waits for
	// an answer past the bytes the server had acknowledged.
	{name: "pipelining: next request while the previous answer streams", steps: []protoStep{
		cin(0, cseq0, sseq0, psh, 100, 1),
		sout(2*ms, sseq0, cseq0+100, tcpACK, 1448, 0),
		cin(3*ms, cseq0+100, sseq0+1448, psh, 100, 1),
		sout(3*ms, sseq0+1448, cseq0+100, psh, 500, 1), // the rest of the first answer
		sout(9*ms, sseq0+1948, cseq0+200, psh, 200, 0),
	}, want: []time.Duration{2 * ms, 6 * ms}, requests: 2, flows: 1},
}

// TestProtocolExchanges runs every protocol case through XDP + TC egress
// and TC ingress + TC egress.
func TestProtocolExchanges(t *testing.T) {
	for _, ingress := range hooks {
		for _, tc := range protoCases {
			t.Run(string(ingress)+"/"+tc.name, func(t *testing.T) {
				d := loadTimed(t, 1)
				counts := map[olc.PortKey]RespCount{}
				for i, st := range tc.steps {
					runSteps(t, d, ingress, []step{st.step})
					must(t, d.ResponseCounts(counts))
					if got := counts[tcp8080].Inflight(); got != st.flight {
						t.Errorf("step %d: in flight %d, want %d (%+v)", i, got, st.flight, counts[tcp8080])
					}
				}
				r := stats(t, d).Response[tcp8080]
				var got []int
				for b, n := range r.Buckets {
					for range n {
						got = append(got, b)
					}
				}
				want := sortedBuckets(tc.want)
				if len(got) != len(want) || r.Responses != uint64(len(want)) {
					t.Fatalf("responses: %d in buckets %v (counter %d), want buckets %v", len(got), got, r.Responses, want)
				}
				for i := range got {
					if got[i] != want[i] {
						t.Errorf("response %d in bucket %d, want %d", i, got[i], want[i])
					}
				}
				if r.Requests != tc.requests || r.Abandoned != tc.abandoned {
					t.Errorf("requests %d abandoned %d, want %d %d", r.Requests, r.Abandoned, tc.requests, tc.abandoned)
				}
				ft, err := d.FlowTableOccupancy()
				must(t, err)
				if ft.Used != tc.flows {
					t.Errorf("flows in the table: %d, want %d", ft.Used, tc.flows)
				}
			})
		}
	}
}
