package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// DefaultDecisionLog is the decision log path when the config names none.
const DefaultDecisionLog = "/var/log/olcd/decisions.jsonl"

// decisionLog writes the decision log: one JSON object per line (log/slog's
// JSON handler), in a file of its own so that an operator can read why olcd
// shed without the operational noise of stdout/journald. Reopen supports
// logrotate's create mode (called on SIGHUP).
type decisionLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	log  *slog.Logger
}

// openDecisionLog opens (appending) or creates the log at path with mode
// 0640, creating its directory with mode 0750. An empty path or "-" writes
// nothing: w may then be nil, or a writer to use instead (tests).
func openDecisionLog(path string, w io.Writer) (*decisionLog, error) {
	d := &decisionLog{path: path}
	if path == "" || path == "-" {
		if w == nil {
			w = io.Discard
		}
		d.log = slog.New(slog.NewJSONHandler(w, nil))
		return d, nil
	}
	if err := d.open(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *decisionLog) open() error {
	if err := os.MkdirAll(filepath.Dir(d.path), 0o750); err != nil {
		return fmt.Errorf("create decision log directory: %w", err)
	}
	f, err := os.OpenFile(d.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("open decision log: %w", err)
	}
	d.f = f
	d.log = slog.New(slog.NewJSONHandler(f, nil))
	return nil
}

// Reopen closes and reopens the file, so a rotated log is followed.
func (d *decisionLog) Reopen() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return nil
	}
	old := d.f
	if err := d.open(); err != nil {
		return err
	}
	return old.Close()
}

// Record writes one decision record: msg is the event kind, args are
// slog key-value pairs with stable keys.
func (d *decisionLog) Record(msg string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log.Info(msg, args...)
}

// Close closes the file.
func (d *decisionLog) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return nil
	}
	err := d.f.Close()
	d.f = nil
	return err
}
