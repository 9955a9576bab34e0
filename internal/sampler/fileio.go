package sampler

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxFileSize bounds how much of one pseudo-file is read into memory. The
// largest file read whole is /proc/net/netstat (a few KiB); /proc/stat is
// streamed and never held whole.
const maxFileSize = 1 << 20

// readFileFunc reads the file at path into buf (reusing and growing it) and
// returns the filled slice. Errors are *fs.PathError wrapping the errno, so
// errors.Is works with fs.ErrNotExist and syscall.EOPNOTSUPP.
type readFileFunc func(path string, buf []byte) ([]byte, error)

// openFunc opens path for streaming. Tests replace it to simulate errors the
// kernel returns only on special configurations (EOPNOTSUPP with psi=0).
type openFunc func(path string) (io.ReadCloser, error)

// readFileInto is the production readFileFunc. It uses raw syscalls instead of
// os.ReadFile so a tick allocates nothing on the success path: the buffer is
// the caller's and no *os.File is created.
func readFileInto(path string, buf []byte) ([]byte, error) {
	fd, err := openRaw(path)
	if err != nil {
		return buf[:0], err
	}
	defer unix.Close(fd)
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
			nb := make([]byte, 2*len(buf))
			copy(nb, buf[:n])
			buf = nb
		}
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return buf[:0], &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
}

func openRaw(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// rawFile is an io.ReadCloser over a file descriptor without the *os.File
// bookkeeping; it is reused across ticks.
type rawFile struct {
	fd   int
	path string
}

func (f *rawFile) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(f.fd, p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, &fs.PathError{Op: "read", Path: f.path, Err: err}
		}
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f *rawFile) Close() error {
	if f.fd < 0 {
		return nil
	}
	err := unix.Close(f.fd)
	f.fd = -1
	return err
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
