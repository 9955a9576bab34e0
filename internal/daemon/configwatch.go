package daemon

import (
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// configWatch decides which events in the config file's directory change
// the config. Besides a write or create of the file itself (a rename into
// place is a create of its name), a
// change of what the path resolves to counts: a Kubernetes ConfigMap volume
// updates by creating a new timestamped directory and renaming a "..data"
// symlink onto it, so /etc/olcd/olcd.yaml (a symlink to ..data/olcd.yaml)
// gets no event of its own while the file it reads changes (the same
// check as spf13/viper's WatchConfig). A target in another directory that
// is rewritten in place makes no event here: SIGHUP reloads it.
type configWatch struct {
	path   string
	target string // what path resolved to at the last change; "" if it did not
}

func newConfigWatch(path string) *configWatch {
	return &configWatch{path: path, target: resolveConfig(path)}
}

// changed reports whether ev changes the config.
func (c *configWatch) changed(ev fsnotify.Event) bool {
	if sameFile(ev.Name, c.path) && ev.Op&(fsnotify.Write|fsnotify.Create) != 0 {
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
