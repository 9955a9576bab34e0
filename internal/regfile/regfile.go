// Package regfile reads a small file that must be a regular one: a config
// file, which a daemon re-reads on every change and must never block on.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Read returns the content of the file at path (symlinks followed); what
// names it in errors ("config": "read config …"). It never blocks (a FIFO
// waits for a writer for ever, a device may never end): anything but a
// regular file is
// refused, checked before the open and again on the file opened with
// O_NONBLOCK, in case a FIFO took its place in between. Errors: the path
// cannot be read, is not a regular file (wrapping ErrNotRegular), or is
// larger than maxBytes.
func Read(path, what string, maxBytes int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if err := regularFile(path, what, fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if err := regularFile(path, what, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("read %s %s: larger than %d bytes: not a %s file", what, path, maxBytes, what)
	}
	return data, nil
}

// ErrNotRegular is wrapped by ReadFile's error for a path that is not a
// regular file.
var ErrNotRegular = errors.New("not a regular file")

// regularFile refuses what is not a regular file, naming what it is.
func regularFile(path, what string, fi os.FileInfo) error {
	m := fi.Mode()
	if m.IsRegular() {
		return nil
	}
	kind := "a special file"
	for _, k := range []struct {
		is   bool
		what string
	}{{m.IsDir(), "a directory"}, {m&os.ModeNamedPipe != 0, "a FIFO (named pipe)"}, {m&os.ModeSocket != 0, "a socket"},
		{m&os.ModeCharDevice != 0, "a character device"}, {m&os.ModeDevice != 0, "a block device"}} {
		if k.is {
			kind = k.what
			break
		}
	}
	return fmt.Errorf("read %s %s: %s, %w: not a %s file", what, path, kind, ErrNotRegular, what)
}
