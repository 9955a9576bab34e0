package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// DefaultDecisionLog is the decision log path when the config names none.
const DefaultDecisionLog = "/var/log/olcd/decisions.jsonl"

// The decision log's rate limits. observe mode is what users run for weeks,
// and an overload that moves p every tick at 100 ports must not write
// gigabytes: per-port changes are aggregated into one record per tick
// (tick.go), and two token buckets bound the records. With records of
// ≈ 1 KiB the sustained worst case is 2 records per 5 s: ≈ 35 MB/day; a
// typical overload (one change record per 5 s, overload_continue every 10 s)
// writes ≈ 15 MB/day (docs/internals.md has the measurement).
const (
	// changeBurst and changeEvery bound probability_change records: the
	// first changeBurst of a quiet log go out as they happen (an overload's
	// onset is logged tick by tick), then one per changeEvery, each
	// carrying the changes folded since the last one.
	changeBurst = 20
	changeEvery = 5 * time.Second
	// eventBurst and eventEvery bound every other record (overload_start,
	// overload_continue, overload_end, config_*, ports_changed). Beyond
	// them records are folded: counted by kind, and the count written with
	// the next record that goes out.
	eventBurst = 30
	eventEvery = 5 * time.Second
)

// tokenBucket is a token bucket of burst tokens refilled by one every
// `every`. Not safe for concurrent use.
type tokenBucket struct {
	burst  float64
	every  time.Duration
	tokens float64
	at     time.Time
}

func newTokenBucket(burst int, every time.Duration) tokenBucket {
	return tokenBucket{burst: float64(burst), every: every, tokens: float64(burst)}
}

// take spends one token at now; false when there is none.
func (b *tokenBucket) take(now time.Time) bool {
	if !b.at.IsZero() && now.After(b.at) {
		b.tokens = min(b.burst, b.tokens+float64(now.Sub(b.at))/float64(b.every))
	}
	if b.at.IsZero() || now.After(b.at) {
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// decisionLog writes the decision log: one JSON object per line (log/slog's
// JSON handler), in a file of its own so that an operator can read why olcd
// shed without the operational noise of stdout/journald. Reopen follows a
// rotated file (logrotate's create mode; SIGUSR1 or SIGHUP). Its methods are
// safe for concurrent use.
type decisionLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	log  *slog.Logger

	now     func() time.Time
	events  tokenBucket
	changes tokenBucket
	folded  map[string]uint64 // records folded by kind since the last written one
	// onFold is called for every folded record with its kind (metrics).
	onFold func(kind string)
}

// openDecisionLog opens (appending) or creates the log at path with mode
// 0640, creating its directory with mode 0750. An empty path or "-" writes
// nothing: w may then be nil, or a writer to use instead (tests).
func openDecisionLog(path string, w io.Writer) (*decisionLog, error) {
	d := &decisionLog{path: path, now: time.Now, folded: map[string]uint64{},
		events: newTokenBucket(eventBurst, eventEvery), changes: newTokenBucket(changeBurst, changeEvery)}
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
	f, err := openLogFile(d.path)
	if err != nil {
		return err
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

// openLogFile opens (appending) or creates the log file at path with mode
// 0640, creating its directory with mode 0750; nil for "" or "-" (nowhere).
func openLogFile(path string) (*os.File, error) {
	if path == "" || path == "-" {
		return nil, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("create decision log directory: %w", err)
	}
	// O_NONBLOCK: a FIFO at the path would block the open until a reader
	// comes, and a reload opens the log on the tick loop.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NONBLOCK, 0o640)
	if err != nil {
		if fi, serr := os.Stat(path); serr == nil && !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("open decision log %s: %s, not a regular file", path, fileKind(fi.Mode()))
		}
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() && fi.Mode()&os.ModeCharDevice == 0 {
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("open decision log: %w", err)
		}
		return nil, fmt.Errorf("open decision log %s: %s, not a regular file", path, fileKind(fi.Mode()))
	}
	return f, nil
}

// Switch writes to path from now on ("" or "-": nowhere), keeping the rate
// limits' state. Errors: the new file cannot be opened; the old one stays.
func (d *decisionLog) Switch(path string) error {
	f, err := openLogFile(path)
	if err != nil {
		return err
	}
	return d.adopt(path, f)
}

// adopt writes to f, opened at path by openLogFile, from now on and closes
// the previous file. Opening and adopting are two steps so that a reload
// can refuse a path it cannot open before anything else changes.
func (d *decisionLog) adopt(path string, f *os.File) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.f
	d.path, d.f = path, f
	if f == nil {
		d.log = slog.New(slog.DiscardHandler)
	} else {
		d.log = slog.New(slog.NewJSONHandler(f, nil))
	}
	if old != nil {
		return old.Close()
	}
	return nil
}

// Record writes one decision record unless the rate limit folds it: msg is
// the event kind, args are slog key-value pairs with stable keys. A record
// written after folded ones carries "folded": {kind: count}.
func (d *decisionLog) Record(msg string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.events.take(d.now()) {
		d.fold(msg)
		return
	}
	d.write(msg, args)
}

// RecordChange writes a probability_change record if its rate limit allows
// and reports whether it did; when it did not, the caller keeps the changes
// and offers them again, merged with the next ones (tick.go).
func (d *decisionLog) RecordChange(args ...any) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.changes.take(d.now()) {
		return false
	}
	d.write("probability_change", args)
	return true
}

// Flush writes a records_folded record when records were folded and none
// went out since, and the rate limit allows one; the tick calls it, so a
// count is never held back for long.
func (d *decisionLog) Flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.folded) == 0 || !d.events.take(d.now()) {
		return
	}
	d.write("records_folded", nil)
}

// write writes msg with args and the folded counts; d.mu is held.
func (d *decisionLog) write(msg string, args []any) {
	if len(d.folded) > 0 {
		args = append(args, "folded", maps.Clone(d.folded))
		clear(d.folded)
	}
	d.log.Info(msg, args...) //nolint:sloglint // a record's kind is its message: the decision log's format
}

// fold counts a record the rate limit dropped; d.mu is held.
func (d *decisionLog) fold(kind string) {
	d.folded[kind]++
	if d.onFold != nil {
		d.onFold(kind)
	}
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
