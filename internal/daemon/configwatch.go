package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// The config file watch: one goroutine per daemon, started by Run, that
// hands the file, read and decoded, to the tick loop after each complete
// write (reconfigure.go applies it).

// The config file watch's timing. settleAfter coalesces a burst of events
// (an editor's write, rename and chmod). quietPeriod is how long a file
// written in place must keep the same content before it is read as
// complete: a writer that truncates first and writes later (`(sleep 0.6;
// cat new.yaml) > olcd.yaml`, a slow config management run) leaves it
// empty or partial in between, and its next write ends the wait.
const (
	settleAfter = 200 * time.Millisecond
	quietPeriod = time.Second
)

// fileChange is the trigger of a reload by the config file watch.
const fileChange = "file change"

// rewatchEvery is how often the watch looks for the config file's
// directory to return after it was removed or renamed away (the inotify
// watch goes with the directory, or follows it to its new name).
const rewatchEvery = time.Second

// fileWatch is the config file watch's settings: the file, where it logs,
// how it reads the file (readConfigFile) and how often it looks for a
// removed directory to return (rewatchEvery; tests make it shorter).
type fileWatch struct {
	path         string
	log          *slog.Logger
	read         func(path string) ([]byte, error)
	rewatchEvery time.Duration
}

// newFileWatch is the watch of the config file at path.
func newFileWatch(path string, log *slog.Logger) fileWatch {
	return fileWatch{path: path, log: log, read: readConfigFile, rewatchEvery: rewatchEvery}
}

// start sends the config file, read and decoded, to out after each
// complete write, until ctx is done. The directory is watched, not the
// file, because editors and config management replace files by rename,
// which a watch on the file would miss. A file renamed (or linked) into
// place is complete: it is read settleAfter after the last event. A file
// written in place, or one that appears empty, is read when its content
// has not changed for quietPeriod after settling. Removing the file, or
// renaming it away, is not acted on (there is nothing to load; SIGHUP
// reports it). The directory removed or renamed away is watched again once
// it is back (`rm -rf /etc/olcd; mkdir /etc/olcd; …`), and a file it then
// holds is read as one written in place.
func (fw fileWatch) start(ctx context.Context, out chan<- configLoad) {
	if fw.path == "" {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		fw.log.Warn("config file watch unavailable; reload with SIGHUP", "err", err)
		return
	}
	dir := filepath.Dir(fw.path)
	if err := w.Add(dir); err != nil {
		fw.log.Warn("config file watch unavailable; reload with SIGHUP", "dir", dir, "err", err)
		w.Close()
		return
	}
	go fw.run(ctx, w, out)
}

// run is the watch's goroutine: it turns w's events into reads of the
// file and sends each complete one to out, until ctx is done.
func (fw fileWatch) run(ctx context.Context, w *fsnotify.Watcher, out chan<- configLoad) {
	defer w.Close()
	path := fw.path
	dir := filepath.Dir(path)
	sw := newConfigWatch(path)
	cw := completeWrite{read: fw.read, path: path}
	// A symlink to a file in another directory: that directory is watched
	// too, so that its file saved in place or by rename is seen.
	var targetDir string
	followTarget := func() {
		td := filepath.Dir(sw.target)
		if sw.target == "" || td == dir || td == targetDir {
			return
		}
		if targetDir != "" {
			_ = w.Remove(targetDir)
		}
		targetDir = ""
		if err := w.Add(td); err != nil {
			fw.log.Warn("config file's symlink target not watched; reload with SIGHUP after editing it", "dir", td, "err", err)
			return
		}
		targetDir = td
	}
	followTarget()
	// Armed by events only; Reset needs no drain since Go 1.23.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var rewatch *time.Ticker
	var rewatchC <-chan time.Time // nil while the directory is watched
	defer func() {
		if rewatch != nil {
			rewatch.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if sameFile(ev.Name, dir) && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 && rewatchC == nil {
				_ = w.Remove(dir) // a renamed directory is still watched under its new name
				fw.log.Warn("config file directory removed or renamed; watching for it to return (SIGHUP reloads meanwhile)", "dir", dir)
				rewatch = time.NewTicker(fw.rewatchEvery)
				rewatchC = rewatch.C
				continue
			}
			if sw.changed(ev) {
				cw.event(ev.Op.Has(fsnotify.Write))
				timer.Reset(settleAfter)
				followTarget()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			// Events may be lost (a full queue): read the file once it
			// is quiet, as if it was written in place.
			fw.log.Warn("config file watch error", "err", err)
			cw.event(true)
			timer.Reset(settleAfter)
		case <-rewatchC:
			if err := w.Add(dir); err != nil {
				continue // not back yet
			}
			rewatch.Stop()
			rewatch, rewatchC = nil, nil
			fw.log.Info("config file directory is back; watching it again", "dir", dir)
			// A file written before the watch was in place made no
			// event: read it as one written in place (complete once
			// quiet). Without one, its creation is an event.
			sw.target = resolveConfig(path)
			if _, err := os.Stat(path); err == nil {
				cw.event(true)
				timer.Reset(settleAfter)
			}
		case <-timer.C:
			data, done, err := cw.check()
			if !done {
				timer.Reset(quietPeriod)
				continue
			}
			l := configLoad{trigger: fileChange, err: err}
			if err == nil {
				l = parseConfig(fileChange, path, data)
			}
			select {
			case out <- l:
			case <-ctx.Done():
				return
			}
		}
	}
}

// completeWrite decides when a changed config file is completely written.
type completeWrite struct {
	read    func(path string) ([]byte, error)
	path    string
	inPlace bool // a write event since the last read was acted on
	// The last read, while waiting for the content to stay the same.
	have    bool
	data    []byte
	errText string
}

// event notes a change of the file; written tells a write in place from a
// rename into place (or a new link, directory, FIFO).
func (c *completeWrite) event(written bool) {
	c.inPlace = c.inPlace || written
	c.have = false
}

// check reads the file once the events settled. done reports that the
// write is complete and data (or err) is what to load: at once for a file
// renamed into place that is not blank, else when the content equals the
// previous check's (the caller checks again after quietPeriod).
func (c *completeWrite) check() (data []byte, done bool, err error) {
	data, err = c.read(c.path)
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	switch {
	case !c.inPlace && (err != nil || len(bytes.TrimSpace(data)) > 0):
		done = true
	case c.have && errText == c.errText && bytes.Equal(data, c.data):
		done = true
	}
	if done {
		c.inPlace, c.have, c.data, c.errText = false, false, nil, ""
		return data, true, err
	}
	c.have, c.data, c.errText = true, data, errText
	return nil, false, nil
}

func sameFile(a, b string) bool { return filepath.Clean(a) == filepath.Clean(b) }

// configWatch decides which events in the config file's directory change
// the config. Besides a write or create of the file itself (a rename into
// place is a create of its name), a
// change of what the path resolves to counts: a Kubernetes ConfigMap volume
// updates by creating a new timestamped directory and renaming a "..data"
// symlink onto it, so /etc/olcd/olcd.yaml (a symlink to ..data/olcd.yaml)
// gets no event of its own while the file it reads changes (the same
// check as spf13/viper's WatchConfig). A write or create of the target
// itself counts too: run watches its directory when it is another.
type configWatch struct {
	path   string
	target string // what path resolved to at the last change; "" if it did not
}

func newConfigWatch(path string) *configWatch {
	return &configWatch{path: path, target: resolveConfig(path)}
}

// changed reports whether ev changes the config.
func (c *configWatch) changed(ev fsnotify.Event) bool {
	if (sameFile(ev.Name, c.path) || (c.target != "" && sameFile(ev.Name, c.target))) && ev.Op&(fsnotify.Write|fsnotify.Create) != 0 {
		c.target = resolveConfig(c.path)
		return true
	}
	if t := resolveConfig(c.path); t != "" && t != c.target {
		c.target = t
		return true
	}
	return false
}

// resolveConfig is path with every symlink followed; "" when it cannot be
// resolved (mid-swap, or deleted).
func resolveConfig(path string) string {
	t, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	return t
}
