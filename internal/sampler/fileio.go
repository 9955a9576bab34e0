package sampler

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// maxFileSize bounds how much of one pseudo-file is read into memory. The
// largest file read whole is /proc/net/netstat (a few KiB); /proc/stat is
// streamed and never held whole.
const maxFileSize = 1 << 20

// readFileFunc reads the file at path into buf (reusing and growing it) and
// returns the filled slice. Errors are *fs.PathError wrapping the errno, so
// errors.Is works with fs.ErrNotExist and syscall.EOPNOTSUPP.
type readFileFunc func(path string, buf []byte) ([]byte, error)

// readFileInto is the production readFileFunc: it reads through os.File into
// the caller's buffer, which is reused across ticks.
func readFileInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf[:0], err
	}
	defer f.Close()
	buf = buf[:cap(buf)]
	if len(buf) == 0 {
		buf = make([]byte, 4096)
	}
	n := 0
	for {
		if n == len(buf) {
			if len(buf) >= maxFileSize {
				return buf[:0], fmt.Errorf("read %s: larger than %d bytes", path, maxFileSize)
			}
			buf = append(buf[:n], make([]byte, len(buf))...)
		}
		m, err := f.Read(buf[n:])
		n += m
		if err == io.EOF {
			return buf[:n], nil
		}
		if err != nil {
			return buf[:0], err
		}
	}
}

// isAbsent reports whether err means the source does not exist on this node
// (file or directory missing, or the kernel refusing it as unsupported, which
// is what pressure files return when PSI is disabled with psi=0) rather than a
// failure to read something that is there.
func isAbsent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) ||
		errors.Is(err, syscall.EOPNOTSUPP) ||
		errors.Is(err, syscall.ENOTDIR)
}

// dirExists reports whether path is a directory.
func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// fileExists reports whether path exists (any type).
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
