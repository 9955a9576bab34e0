package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"
)

// Client talks to a running daemon over its admin unix socket. It is what
// `olcd status` and `olcd set` use.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the admin socket at path. Requests time out
// after timeout (a write waits for the next tick, so allow at least two
// intervals).
func NewClient(path string, timeout time.Duration) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}
	return &Client{socket: path, hc: &http.Client{Transport: tr, Timeout: timeout}}
}

// ProblemsError is returned when the daemon refused a request because of
// config problems; Problems has one line per problem.
type ProblemsError struct {
	Msg      string
	Problems []string
}

// Error returns the message followed by every problem on its own line; one
// problem is on the message's line.
func (e *ProblemsError) Error() string {
	switch len(e.Problems) {
	case 0:
		return e.Msg
	case 1:
		return e.Msg + ": " + e.Problems[0]
	}
	return e.Msg + ":\n  " + strings.Join(e.Problems, "\n  ")
}

// ProblemLines returns the problems one per line.
func (e *ProblemsError) ProblemLines() []string { return e.Problems }

// Status fetches GET /v1/status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st Status
	if err := c.do(ctx, http.MethodGet, "/v1/status", "", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Config fetches GET /v1/config: the config in force, as loaded and
// overridden.
func (c *Client) Config(ctx context.Context) (*RunningConfig, error) {
	var rc RunningConfig
	if err := c.do(ctx, http.MethodGet, "/v1/config", "", nil, &rc); err != nil {
		return nil, err
	}
	return &rc, nil
}

// SetMode posts the global mode ("off", "observe" or "enforce").
func (c *Client) SetMode(ctx context.Context, mode string) error {
	body, _ := json.Marshal(map[string]string{"mode": mode})
	return c.do(ctx, http.MethodPost, "/v1/mode", "application/json", body, nil)
}

// Reload asks the daemon to re-read its config file.
func (c *Client) Reload(ctx context.Context) (*Status, error) {
	var st Status
	if err := c.do(ctx, http.MethodPost, "/v1/reload", "", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Patch sends a partial config document (YAML or JSON) as a live override.
func (c *Client) Patch(ctx context.Context, doc []byte) error {
	return c.do(ctx, http.MethodPatch, "/v1/config", "application/yaml", doc, nil)
}

func (c *Client) do(ctx context.Context, method, path, ctype string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://olcd"+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build %s %s: %w", method, path, err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			// Connected (the socket is there) but no answer: a stopped or
			// hung process. A write may still take effect when it resumes,
			// so "failed" alone would mislead.
			what := "no answer"
			if method != http.MethodGet {
				what = "no answer; the request may still take effect if olcd resumes"
			}
			return fmt.Errorf("%s %s on %s: %s (olcd stopped or hung? its datapath fails open after heartbeat.stale_after): %w",
				method, path, c.socket, what, err)
		}
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("%s %s on %s: permission denied: the admin socket is root's (run as root): %w", method, path, c.socket, err)
		}
		return fmt.Errorf("%s %s on %s (is olcd running?): %w", method, path, c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var ae Error
		if json.Unmarshal(data, &ae) != nil || ae.Error == "" {
			return fmt.Errorf("%s %s: %s", method, path, resp.Status)
		}
		return &ProblemsError{Msg: ae.Error, Problems: ae.Problems}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode answer to %s %s: %w", method, path, err)
	}
	return nil
}
