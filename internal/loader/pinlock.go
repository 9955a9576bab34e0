package loader

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/olcd/olcd/internal/lock"
)

// pinLockWait is how long Load waits for the pin directory's lock when
// another process holds it: a restarting olcd's predecessor holds it from
// its SIGTERM until Release, the milliseconds it takes to write its state
// file and stop its servers (systemd and the e2e restarts start the new one
// only once it exited; an operator's `kill; olcd run` need not). 5 s is the
// default stale_after, the lease a restart has anyway, and half systemd's
// TimeoutStopSec, after which a stopping olcd is killed and its lock goes.
// A second olcd beside a running one is refused after it. Tests shorten it.
var pinLockWait = 5 * time.Second

// pinLockPoll is how often Load tries the held lock again while it waits.
const pinLockPoll = 50 * time.Millisecond

// PinsHeldError says that another process holds the pin directory's lock:
// an olcd runs (or starts) on this pinned datapath. Nothing was opened or
// written in the directory.
type PinsHeldError struct {
	Dir  string        // the pin directory
	Lock string        // the lock file
	PID  int           // the holder's PID as it wrote it, 0 when unknown
	Wait time.Duration // how long the start waited for it
}

func (e *PinsHeldError) Error() string {
	who := "another process"
	if e.PID != 0 {
		who = fmt.Sprintf("another olcd (pid %d)", e.PID)
	}
	return fmt.Sprintf("pinned datapath in %s is in use: %s holds %s (waited %s for it to exit); "+
		"two would write the same maps: stop it first", e.Dir, who, e.Lock, e.Wait)
}

// pinLockPath is the lock file of the pin directory dir in lockDir:
// pins-<FNV-64a of dir's absolute path>.lock (pin directories are anywhere
// on bpffs; the lock lives with the attach locks, on a filesystem that
// holds regular files).
func pinLockPath(lockDir, dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = filepath.Clean(dir)
	}
	h := fnv.New64a()
	h.Write([]byte(abs))
	return filepath.Join(lockDir, fmt.Sprintf("pins-%016x.lock", h.Sum64()))
}

// lockPins takes the exclusive lock of the pin directory dir before
// anything in it is opened: one process at a time owns a pinned datapath,
// from its Load to its Close or Release, so that a second olcd started
// beside a running one is refused before it writes the running one's maps
// (the attach locks come later, after the maps are written). A holder is
// waited for up to wait, polling. Errors: *PinsHeldError, or the lock
// file cannot be made.
func lockPins(lockDir, dir string, wait time.Duration, log *slog.Logger) (*lock.File, error) {
	path := pinLockPath(lockDir, dir)
	start := time.Now()
	for logged := false; ; logged = true {
		lk, err := lock.TryExclusive(path)
		if !errors.Is(err, lock.ErrLocked) {
			if err != nil {
				return nil, fmt.Errorf("lock pin directory %s: %w", dir, err)
			}
			return lk, nil
		}
		if time.Since(start) >= wait {
			return nil, &PinsHeldError{Dir: dir, Lock: path, PID: lock.Holder(path), Wait: wait}
		}
		if !logged {
			log.Info("another olcd holds the pinned datapath: waiting for it to exit",
				"pin_dir", dir, "lock", path, "pid", lock.Holder(path), "wait", wait)
		}
		time.Sleep(pinLockPoll)
	}
}
