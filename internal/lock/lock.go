// Package lock holds exclusive flock(2) locks on files, the way
// cloudflare/tubular's internal/lock guards its state: the kernel drops a
// lock when its holder exits, however it exits, so a lock left by a killed
// process never blocks the next one.
package lock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLocked is returned by TryExclusive when another open file description
// (another process, or another TryExclusive in this one) holds the lock.
var ErrLocked = errors.New("held by another process")

// File is a held exclusive lock on a lock file.
type File struct {
	f    *os.File
	path string
}

// TryExclusive takes an exclusive lock on the file at path without waiting,
// creating the file (mode 0644) and its directory (0755) if needed (again
// if the directory is removed meanwhile, as `olcd detach` removes an empty
// one). Errors:
// ErrLocked (wrapped, with the path) when the lock is held elsewhere; the
// directory or file cannot be created or opened.
//
// The holder writes its process ID into the file (Holder reads it), so that
// a refusal can say which process to stop. The holder unlinks the file
// when it releases the lock. A process that
// opened the file just before that unlink would lock a name nobody else
// sees, so after locking TryExclusive checks that path still names the file
// it locked and starts again when it does not.
func TryExclusive(path string) (*File, error) {
	for tries := 0; ; tries++ {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if errors.Is(err, os.ErrNotExist) && tries < 3 {
			// The directory went between MkdirAll and the open: `olcd
			// detach` removes it when the last lock is gone.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("lock %s: %w", path, ErrLocked)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		held, err1 := f.Stat()
		named, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			// Best effort: a lock without its PID still locks.
			if f.Truncate(0) == nil {
				_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			}
			return &File{f: f, path: path}, nil
		}
		f.Close()
		if err2 != nil && !errors.Is(err2, os.ErrNotExist) {
			return nil, fmt.Errorf("lock %s: %w", path, err2)
		}
		if err1 != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err1)
		}
	}
}

// Holder returns the process ID the holder of the lock at path wrote into
// it (as its own PID namespace numbers it), 0 when the file is gone, empty
// (a holder between its lock and its write) or unreadable.
func Holder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Path returns the lock file's path.
func (l *File) Path() string { return l.path }

// Release removes the lock file and drops the lock. It is safe to call more
// than once and on a nil *File.
func (l *File) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	// Unlink while still holding the lock, so that no one locks this file
	// after it left the directory; leave a file that replaced it (removed
	// under us by hand) to its own holder.
	var err error
	held, err1 := l.f.Stat()
	named, err2 := os.Stat(l.path)
	if err1 == nil && err2 == nil && os.SameFile(held, named) {
		err = os.Remove(l.path)
	}
	err = errors.Join(err, l.f.Close())
	l.f = nil
	if err != nil {
		return fmt.Errorf("release lock %s: %w", l.path, err)
	}
	return nil
}

func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.Flock(int(fd), how)
			if !errors.Is(ferr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}
