package daemon

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// leftovers records what a start created on the filesystem (directories,
// files), so that a start that fails removes them again: a refused start
// leaves the node as it found it.
type leftovers struct {
	paths []string // in creation order
}

// mkdirAll is os.MkdirAll that records every directory it creates.
func (l *leftovers) mkdirAll(dir string, perm fs.FileMode) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	err := os.MkdirAll(dir, perm)
	for i := len(missing) - 1; i >= 0; i-- {
		if fi, serr := os.Lstat(missing[i]); serr == nil && fi.IsDir() {
			l.paths = append(l.paths, missing[i])
		}
	}
	return err
}

// file records path if it does not exist yet (the caller is about to
// create it).
func (l *leftovers) file(path string) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		l.paths = append(l.paths, path)
	}
}

// remove deletes what was recorded, newest first. Only empty directories
// and files olcd created are removed: os.Remove refuses a directory that
// something else has put a file in since.
func (l *leftovers) remove() {
	for i := len(l.paths) - 1; i >= 0; i-- {
		_ = os.Remove(l.paths[i])
	}
	l.paths = nil
}
