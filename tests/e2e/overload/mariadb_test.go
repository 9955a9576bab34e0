package overload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// TestDBOutcome: the db clients' errors land in the outcomes the analysis
// counts (timeouts and refusals as for HTTP, a server error by its code).
func TestDBOutcome(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"answered", nil, outcomeOK},
		{"too many connections", &mysql.MySQLError{Number: 1040, Message: "Too many connections"}, "mysql1040"},
		{"wrapped server error", fmt.Errorf("query: %w", &mysql.MySQLError{Number: 1205}), "mysql1205"},
		{"deadline", context.DeadlineExceeded, outcomeTimeout},
		{"dial timeout", &net.OpError{Op: "dial", Err: timeoutErr{}}, outcomeTimeout},
		{"refused (a rejected SYN)", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, outcomeRefused},
		{"connection lost", mysql.ErrInvalidConn, outcomeError},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, outcomeError},
		{"other", errors.New("unexpected EOF"), outcomeError},
	} {
		if got := dbOutcome(tc.err); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestDBTarget: the closed pool tells a db target by its scheme and reads
// the server's address from it.
func TestDBTarget(t *testing.T) {
	u, err := url.Parse(dbTarget("10.0.0.1:18080"))
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "mysql" || u.Host != "10.0.0.1:18080" || u.User.Username() != dbUser {
		t.Errorf("target %s: scheme %q host %q user %q", u, u.Scheme, u.Host, u.User.Username())
	}
}
