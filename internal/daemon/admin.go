package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/olcd/olcd/internal/api"
)

// maxPatchBytes bounds the body of PATCH /v1/config; a config document is a
// few KiB, so anything larger is a mistake (and each live override is kept
// in memory and in the status until a reload).
const maxPatchBytes = 64 << 10

// adminBackend is what the admin API acts on. The daemon implements it; each
// write is applied by the tick loop between two ticks, so it takes effect
// within one tick and is never half-applied.
type adminBackend interface {
	// Status returns the JSON document of GET /v1/status.
	Status() *api.Status
	// SetMode switches the global mode ("off", "observe", "enforce").
	SetMode(ctx context.Context, mode string) error
	// Reload re-reads the config file.
	Reload(ctx context.Context) error
	// Patch applies a partial config document as a live override.
	Patch(ctx context.Context, doc []byte) error
	// RunningConfig returns the document of GET /v1/config.
	RunningConfig(ctx context.Context) (*api.RunningConfig, error)
}

// problemLister is implemented by errors that carry a list of config
// problems (rules.ValidationError).
type problemLister interface {
	ProblemLines() []string
}

func newAdminHandler(b adminBackend, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.Status())
	})
	mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, r *http.Request) {
		rc, err := b.RunningConfig(r.Context())
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err)
			return
		}
		writeJSON(w, http.StatusOK, rc)
	})
	mux.HandleFunc("POST /v1/mode", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Mode string `json:"mode"`
		}
		if err := decodeStrict(io.LimitReader(r.Body, 4096), &req); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("decode mode request: %w", err))
			return
		}
		if err := b.SetMode(r.Context(), req.Mode); err != nil {
			writeError(w, http.StatusUnprocessableEntity, err)
			return
		}
		log.Info("mode changed through admin API", "mode", req.Mode)
		writeJSON(w, http.StatusOK, b.Status())
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		if err := b.Reload(r.Context()); err != nil {
			writeError(w, http.StatusUnprocessableEntity, err)
			return
		}
		writeJSON(w, http.StatusOK, b.Status())
	})
	mux.HandleFunc("PATCH /v1/config", func(w http.ResponseWriter, r *http.Request) {
		doc, err := io.ReadAll(io.LimitReader(r.Body, maxPatchBytes+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("read patch: %w", err))
			return
		}
		if len(doc) > maxPatchBytes {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("patch larger than %d bytes", maxPatchBytes))
			return
		}
		if err := b.Patch(r.Context(), doc); err != nil {
			writeError(w, http.StatusUnprocessableEntity, err)
			return
		}
		writeJSON(w, http.StatusOK, b.Status())
	})
	return mux
}

// decodeStrict decodes exactly one JSON object into v: an unknown field
// (`"force": true`, which nothing would honour) or anything after the object
// is an error, as the config's decoding is strict.
func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	body := api.Error{Error: err.Error()}
	var pl problemLister
	if errors.As(err, &pl) {
		body.Problems = pl.ProblemLines()
		body.Error = fmt.Sprintf("%d config problem(s)", len(body.Problems))
	}
	writeJSON(w, code, body)
}

// listenAdmin opens the admin unix socket at path with mode 0600 in a
// directory of mode 0700. A socket file left by a dead daemon is replaced;
// a live one (another olcd answering) is a refusal, because two daemons would
// fight over the same interfaces.
func listenAdmin(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create admin socket directory: %w", err)
	}
	if err := checkSocketDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	found, mode, err := removeStaleSocket(path)
	switch {
	case err != nil:
		return nil, err
	case found == socketOther:
		return nil, fmt.Errorf("admin socket %s exists and is not a socket (%s): not removed; choose another admin.socket", path, fileKind(mode))
	case found == socketLive:
		return nil, fmt.Errorf("admin socket %s: another olcd is running", path)
	}
	// The umask makes the socket 0600 from its creation: a chmod after
	// bind would leave a window in which any local user could connect.
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on admin socket %s: %w", path, err)
	}
	// Removed by adminListener.Close, and only while it is this socket.
	ln.SetUnlinkOnClose(false)
	made, _ := os.Lstat(path) // nil (removed already): never removed
	return &adminListener{UnixListener: ln, path: path, made: made}, nil
}

// adminListener is the admin socket's listener. Closing it removes the
// socket file only while the path still names the socket it made (same
// device and inode): a successor olcd started by hand while this one stops
// (`kill; olcd run`: its pin lock waits for this one) may have made its own
// there already, and removing that left its admin API, the kill switch,
// unreachable until it noticed (adminCheckEvery). Closing it twice (the
// admin server, then the stop) is harmless.
type adminListener struct {
	*net.UnixListener
	path string
	made os.FileInfo // the socket file as made; nil if it was gone at once
}

// Close stops listening and removes the socket file if it is still this
// listener's.
func (l *adminListener) Close() error {
	err := l.UnixListener.Close()
	removeIfSame(l.path, l.made)
	return err
}

// removeIfSame removes the file at path when it is still made (os.SameFile:
// device and inode), and leaves whatever replaced it.
func removeIfSame(path string, made os.FileInfo) {
	if made == nil {
		return
	}
	if cur, err := os.Lstat(path); err == nil && os.SameFile(made, cur) {
		_ = os.Remove(path)
	}
}

// socketFound is what removeStaleSocket found at an admin socket's path.
type socketFound int

const (
	socketNone    socketFound = iota // no file, or it went while probed
	socketStale                      // a socket no one listens on (a dead olcd's): removed
	socketLive                       // a socket someone answers on: left
	socketOther                      // not a socket: left
	socketUnknown                    // a socket the probe could not tell: left
)

// removeStaleSocket removes the unix socket at path when no one listens on
// it (connect answers ECONNREFUSED: a dead olcd's), and says what it found,
// with the file's mode when there was one. Only a socket is probed: connect
// answers ECONNREFUSED for a regular file too, and a file or directory the
// path names by mistake (admin.socket set to the config file) must never be
// taken for a dead daemon's and deleted. Errors: the probe failed otherwise
// (socketUnknown), or the removal (socketStale).
func removeStaleSocket(path string) (socketFound, os.FileMode, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return socketNone, 0, nil
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return socketOther, fi.Mode(), nil
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	switch {
	case err == nil:
		c.Close()
		return socketLive, fi.Mode(), nil
	case errors.Is(err, syscall.ENOENT):
		return socketNone, fi.Mode(), nil
	case !errors.Is(err, syscall.ECONNREFUSED):
		return socketUnknown, fi.Mode(), fmt.Errorf("probe admin socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return socketStale, fi.Mode(), fmt.Errorf("remove stale admin socket %s: %w", path, err)
	}
	return socketStale, fi.Mode(), nil
}

// fileKind names what a path is, for errors.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symlink"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// checkSocketDir refuses a socket directory that someone other than root or
// olcd's own user could write to: they could replace the socket with theirs
// after olcd starts and answer `olcd status` and `olcd set` in its place.
// A world-writable directory with the sticky bit (/tmp) is accepted: there
// nobody can remove or rename olcd's socket.
func checkSocketDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("admin socket directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mode := fi.Mode()
	switch {
	case !fi.IsDir():
		return fmt.Errorf("admin socket directory %s is not a directory", dir)
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("admin socket directory %s belongs to uid %d: that user could replace the socket (chown it to root, or choose another admin.socket)", dir, st.Uid)
	case mode&os.ModeSticky != 0:
		return nil
	case mode.Perm()&0o002 != 0, mode.Perm()&0o020 != 0 && st.Gid != 0:
		return fmt.Errorf("admin socket directory %s has mode %04o: others could replace the socket (chmod go-w %s, or choose another admin.socket)", dir, mode.Perm(), dir)
	}
	return nil
}

// adminCheckEvery is how often the admin socket's path is checked: a
// socket file removed while olcd runs (rm -rf /run/olcd, a tmpfiles
// clean-up) leaves the kill switch, status and reload unreachable until a
// restart unless it is made again.
const adminCheckEvery = 2 * time.Second

// keepAdminSocket listens again at path, serving srv, whenever the socket
// file olcd made there is gone (checked every period), until ctx is done. A path taken by another
// file is left alone (and reported once): olcd replaces only what is
// missing.
func keepAdminSocket(ctx context.Context, srv *http.Server, path string, every time.Duration, log *slog.Logger) {
	ino := inode(path)
	t := time.NewTicker(every)
	defer t.Stop()
	reported := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := inode(path)
		switch {
		case cur == ino && cur != 0:
			reported = false
			continue
		case cur != 0:
			if !reported {
				log.Warn("admin socket path taken by another file; the admin API is unreachable there until it is removed", "path", path)
				reported = true
			}
			continue
		}
		if ctx.Err() != nil {
			return // stopping: the socket was removed by the shutdown
		}
		ln, err := listenAdmin(path)
		if err != nil {
			if !reported {
				log.Error("admin socket removed; listening again failed", "path", path, "err", err)
				reported = true
			}
			continue
		}
		ino, reported = inode(path), false
		log.Warn("admin socket was removed while olcd ran; listening on it again", "path", path)
		go serveHTTP(srv, ln, func(err error) { log.Error("admin API stopped", "err", err) })
	}
}

// inode is the inode number of the file at path; 0 when there is none.
func inode(path string) uint64 {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
