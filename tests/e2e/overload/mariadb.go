package overload

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/olcd/olcd/internal/debpkg"
	"github.com/olcd/olcd/internal/testutil"
)

// The db backend: Debian's MariaDB, a private instance of mariadbd on its
// own data directory, socket and port in the run's directory (never the
// system service), in the backend's cgroup. Its clients are
// connection-per-query (ClientsClosedPool with a mysql:// target): each
// connects (the server speaks first, its greeting; then the login
// exchange), runs one query, and closes with COM_QUIT, a last message the
// server never answers, before its FIN. The query spends DBQueryWork of the
// server's CPU, so the cgroup's quota is the bottleneck.
const (
	// DBQueryWork is the CPU time the query's BENCHMARK() loop is sized
	// to on this machine when the server starts: with the connection's
	// own cost (thread, login, about 0.3 ms) a 1-CPU quota answers about
	// 250 connections a second, the order of the database the issue
	// tried.
	DBQueryWork = 3500 * time.Microsecond
	// dbUser and dbPassword are the login the clients use, created at
	// start (--init-file) with no privileges beyond connecting.
	dbUser, dbPassword = "load", "load"
	// dbProbeRounds sizes the BENCHMARK() the query is scaled from.
	dbProbeRounds = 20000
)

// dbQueryOf is the query of a run: rounds SHA2 digests of a random number
// (RAND() keeps the expression from being folded into a constant).
func dbQueryOf(rounds int) string {
	return fmt.Sprintf("SELECT BENCHMARK(%d, SHA2(RAND(), 256))", rounds)
}

// mariadbCommands returns mariadbd and mariadb-install-db, installing
// Debian's mariadb-server when missing and root (debpkg).
func mariadbCommands() (server, install string, err error) {
	if server, err = debpkg.Find("mariadbd", "mariadb-server"); err != nil {
		return "", "", fmt.Errorf("the db backend: %w", err)
	}
	if install, err = debpkg.Find("mariadb-install-db", "mariadb-server"); err != nil {
		return "", "", fmt.Errorf("the db backend: %w", err)
	}
	return server, install, nil
}

// startMariaDB creates the data directory in the run's directory once per
// harness, starts mariadbd in the backend's cgroup on the work port and
// waits until the clients' login works; at the first start it sizes the
// query (h.dbQuery) and measures the server's CPU per connection
// (h.dbCycleCPU).
func (h *Harness) startMariaDB() error {
	server, install, err := mariadbCommands()
	if err != nil {
		return err
	}
	dir := filepath.Join(h.opt.OutDir, "mariadb")
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Small InnoDB files: the query touches no table, and the default
	// 96 MiB redo log would be written at every data directory's creation.
	engine := []string{"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M", "--skip-log-bin"}
	if _, err := os.Stat(filepath.Join(data, "mysql")); err != nil {
		_ = os.RemoveAll(data)
		args := append([]string{"--no-defaults", "--datadir=" + data, "--user=root", "--skip-test-db",
			"--auth-root-authentication-method=socket"}, engine...)
		if out, err := exec.Command(install, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
		}
	}
	initSQL := filepath.Join(dir, "init.sql")
	if err := os.WriteFile(initSQL, []byte(fmt.Sprintf(
		"CREATE USER IF NOT EXISTS '%[1]s'@'%%' IDENTIFIED BY '%[2]s';\n", dbUser, dbPassword)), 0o644); err != nil {
		return err
	}
	sock := filepath.Join(dir, "mariadb.sock")
	_ = os.Remove(sock)
	// --no-defaults: nothing of /etc/mysql; the rest are the server's
	// defaults (thread per connection, max_connections 151).
	args := append([]string{server, "--no-defaults", "--user=root", "--datadir=" + data, "--socket=" + sock,
		"--pid-file=" + filepath.Join(dir, "mariadb.pid"), "--log-error=" + filepath.Join(dir, "mariadb.err"),
		"--bind-address=" + h.net.HostIP.String(), "--port=" + strconv.Itoa(WorkPort),
		"--skip-name-resolve", "--init-file=" + initSQL}, engine...)
	p, _, err := h.startInCgroup("mariadb", false, args...)
	if err != nil {
		return err
	}
	h.backends = append(h.backends, p)
	addr := net.JoinHostPort(h.net.HostIP.String(), strconv.Itoa(WorkPort))
	probe := dbQueryOf(1)
	if err := testutil.WaitFor(30*time.Second, 200*time.Millisecond, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := dbQuery(ctx, addr, probe, nil)
		return err == nil, err
	}); err != nil {
		return fmt.Errorf("mariadbd does not answer on %s: %w (see %s)", addr, err, filepath.Join(dir, "mariadb.err"))
	}
	if h.dbQuery == "" {
		if err := h.sizeDBQuery(addr); err != nil {
			return err
		}
	}
	return nil
}

// sizeDBQuery scales the query's rounds so that it takes DBQueryWork (the
// fastest of several timed runs on one connection, the one least disturbed
// by other tasks), then measures the server's CPU per connection-per-query
// cycle from the cgroup: the step load's unit (nominalRPS).
func (h *Harness) sizeDBQuery(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := dbConnect(ctx, addr, nil)
	if err != nil {
		return fmt.Errorf("size the db query: %w", err)
	}
	best := time.Duration(1 << 62)
	for range 7 {
		t0 := time.Now()
		if err := dbRun(ctx, conn, dbQueryOf(dbProbeRounds)); err != nil {
			conn.Close()
			return fmt.Errorf("size the db query: %w", err)
		}
		best = min(best, time.Since(t0))
	}
	conn.Close()
	rounds := max(1, int(float64(dbProbeRounds)*float64(DBQueryWork)/float64(best)))
	query := dbQueryOf(rounds)
	const cycles = 50
	u0, err := h.cg.Usage()
	if err != nil {
		return err
	}
	for range cycles {
		if _, err := dbQuery(ctx, addr, query, nil); err != nil {
			return fmt.Errorf("measure the db query: %w", err)
		}
	}
	u1, err := h.cg.Usage()
	if err != nil {
		return err
	}
	h.dbQuery, h.dbCycleCPU = query, (u1-u0)/cycles
	fmt.Fprintf(h.opt.Progress, "db backend: %s takes %s of the server's CPU per connection (connect, query, COM_QUIT)\n", query, h.dbCycleCPU.Round(10*time.Microsecond))
	return nil
}

// dbTarget is the closed pool's target URL for the db backend at addr.
func dbTarget(addr string) string {
	return (&url.URL{Scheme: "mysql", User: url.UserPassword(dbUser, dbPassword), Host: addr}).String()
}

// dbConnect opens one connection to the server at addr as the clients'
// user; dial, when set, replaces the driver's dialer (the closed pool times
// its connects).
func dbConnect(ctx context.Context, addr string, dial func(context.Context, string, string) (net.Conn, error)) (driver.Conn, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = dbUser, dbPassword, "tcp", addr
	cfg.DialFunc = dial
	cfg.Logger = mysql.Logger(nopLogger{})
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return conn.Connect(ctx)
}

// nopLogger silences the driver's log of connection errors: the closed
// pool records every outcome itself.
type nopLogger struct{}

func (nopLogger) Print(...any) {}

// dbRun runs query on conn and reads its rows.
func dbRun(ctx context.Context, conn driver.Conn, query string) error {
	q, ok := conn.(driver.QueryerContext)
	if !ok {
		return errors.New("mysql driver without QueryerContext")
	}
	rows, err := q.QueryContext(ctx, query, nil)
	if err != nil {
		return err
	}
	dest := make([]driver.Value, len(rows.Columns()))
	for {
		if err := rows.Next(dest); err != nil {
			rows.Close()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// dbQuery is one connection-per-query exchange: connect, run query, close
// with COM_QUIT. It returns the time until the result was read.
func dbQuery(ctx context.Context, addr, query string, dial func(context.Context, string, string) (net.Conn, error)) (time.Duration, error) {
	t0 := time.Now()
	conn, err := dbConnect(ctx, addr, dial)
	if err != nil {
		return time.Since(t0), err
	}
	err = dbRun(ctx, conn, query)
	el := time.Since(t0)
	conn.Close() // COM_QUIT, then the close
	return el, err
}

// dbOutcome classifies the error of dbQuery: nil is ok, a server error is
// "mysql<code>" (1040: too many connections), else as classifyErr.
func dbOutcome(err error) string {
	var me *mysql.MySQLError
	switch {
	case err == nil:
		return outcomeOK
	case errors.As(err, &me):
		return fmt.Sprintf("mysql%d", me.Number)
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn):
		return outcomeError
	}
	if o := classifyErr(err); o != outcomeError {
		return o
	}
	if isTimeoutText(err.Error()) {
		return outcomeTimeout
	}
	if strings.Contains(err.Error(), "connection refused") {
		return outcomeRefused
	}
	return outcomeError
}
