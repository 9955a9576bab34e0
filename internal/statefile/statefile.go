// Package statefile keeps what olcd's controller learnt across a restart of
// the daemon: a small versioned JSON file (state.json) under a state
// directory (/var/lib/olcd by default), written atomically (a temporary file
// in the same directory, fsync, rename) every few seconds by the daemon and
// read once at its start. A file that is too old, of another version, of
// another node or of another config is ignored, and Read says why.
package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
)

// Version is the file's format version; a file of another is foreign.
const Version = 1

// DefaultDir is the state directory of an installed olcd (systemd's
// StateDirectory=olcd).
const DefaultDir = "/var/lib/olcd"

// Name is the file's name in the state directory.
const Name = "state.json"

// MaxAge bounds how old a file may be and still be used: what it holds
// describes the backends as they were (their capacity, their no-load
// latency). A restart, a package upgrade or a DaemonSet rollout keeps the
// daemon down for seconds to a minute; a daemon down for more than ten
// minutes was stopped for maintenance (a reboot, a redeploy of the node's
// services), after which the capacity and latency learnt are not the
// backends' any more, and it relearns instead (docs/datapath.md,
// "Restarts"). The drop probabilities have a shorter bound, the
// heartbeat's stale_after, which the daemon applies.
const MaxAge = 10 * time.Minute

// Override is a live override in force, as the admin API applied it.
type Override struct {
	At    time.Time `json:"at"`    // when it was applied (its origin's time)
	Kind  string    `json:"kind"`  // "mode" or "patch"
	Value string    `json:"value"` // the mode or patch as sent
	Doc   []byte    `json:"doc"`   // the patch document applied
}

// File is the state file's content.
type File struct {
	Version int `json:"version"`
	// Node is the host name of the node that wrote it.
	Node string `json:"node"`
	// ConfigHash identifies the config file the state was learnt under.
	ConfigHash string `json:"config_hash"`
	// WrittenAt is the wall-clock time of the write.
	WrittenAt time.Time `json:"written_at"`
	// Controller is the controller's state.
	Controller adaptive.State `json:"controller"`
	// Overrides are the live overrides in force, oldest first.
	Overrides []Override `json:"overrides,omitempty"`
}

// Write writes f to dir/Name atomically: readers see the old file or the
// new one whole. Errors: the directory or the write failing.
func Write(dir string, f File) error {
	f.Version = Version
	data, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+Name+".*")
	if err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("state file: write %s: %w", tmp.Name(), err)
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("state file: write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, Name)); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return nil
}

// Ignored is the error of Read for a file that exists but is not used:
// Reason says why (stale, foreign version, node or config).
type Ignored struct {
	Path   string
	Reason string
}

func (e *Ignored) Error() string { return fmt.Sprintf("state file %s ignored: %s", e.Path, e.Reason) }

// Read reads dir/Name and checks that it is of this Version, of node, of
// the config with configHash, and no older than MaxAge at now. Errors:
// fs.ErrNotExist (no file: a first start), *Ignored, or a read or decode
// failure (naming the file).
func Read(dir, node, configHash string, now time.Time) (File, error) {
	path := filepath.Join(dir, Name)
	var f File
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
		return f, fmt.Errorf("state file: %w", err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return f, &Ignored{Path: path, Reason: fmt.Sprintf("not a state file (%v)", err)}
	}
	switch age := now.Sub(f.WrittenAt); {
	case f.Version != Version:
		return f, &Ignored{Path: path, Reason: fmt.Sprintf("version %d, this olcd writes %d", f.Version, Version)}
	case f.Node != node:
		return f, &Ignored{Path: path, Reason: fmt.Sprintf("written by node %q, this is %q", f.Node, node)}
	case f.ConfigHash != configHash:
		return f, &Ignored{Path: path, Reason: fmt.Sprintf("written under config %s, this one is %s", f.ConfigHash, configHash)}
	case age > MaxAge:
		return f, &Ignored{Path: path, Reason: fmt.Sprintf("written %s ago, more than %s", age.Round(time.Second), MaxAge)}
	case age < -time.Minute:
		return f, &Ignored{Path: path, Reason: fmt.Sprintf("written %s in the future (the clock moved back)", (-age).Round(time.Second))}
	}
	return f, nil
}
