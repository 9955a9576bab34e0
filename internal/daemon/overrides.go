package daemon

import (
	"fmt"
	"slices"
	"time"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/rules"
)

// maxOverrides bounds the live overrides. One is kept per field path (a
// later override of the same fields replaces the earlier one), so the list
// is already bounded by the config schema; the cap stops a script that sets
// many fields one at a time from growing status and memory without limit.
const maxOverrides = 64

// maxLoggedValue bounds an override's value as the decision log records it.
const maxLoggedValue = 1024

// liveOverride is an Override with the field paths it sets.
type liveOverride struct {
	api.Override
	paths []string
	doc   []byte // the document applied, kept by the state file
	// resetsOnly marks a patch of nulls (rules.PatchResetsOnly).
	resetsOnly bool
}

// withOverride returns list with o appended and every earlier override whose
// fields o all sets again removed: last write wins, one override per field.
// Errors: the result would hold more than maxOverrides.
func withOverride(list []liveOverride, o liveOverride) ([]liveOverride, error) {
	out := make([]liveOverride, 0, len(list)+1)
	for _, old := range list {
		if !coveredBy(old.paths, o.paths) {
			out = append(out, old)
		}
	}
	if len(out) >= maxOverrides {
		return nil, fmt.Errorf("%d live overrides are in force, the most olcd keeps: write these settings into the config file and reload (a reload drops the overrides)", len(out))
	}
	return append(out, o), nil
}

// withoutSpentReset drops o, the last of list, when it only puts keys back
// (a patch of nulls, rules.PatchResetsOnly) and the file's config with the
// other overrides of list replayed is exactly running, the config o made:
// then nothing of o is live, and an override that changes nothing would be
// listed, kept and replayed for nothing. Any other reset stays: one under a
// wider override that still sets other keys, and one that is not a reset of
// the running config at all, such as `{signals: {accept_queue_fill: null}}`
// on a file without a signals section, which deletes a default signal (the
// file, beneath, lists none): dropped, the status would list no override,
// and a restart would turn the signal back on.
func withoutSpentReset(list []liveOverride, o liveOverride, file, running *rules.Config) []liveOverride {
	if !o.resetsOnly || file == nil || running == nil {
		return list
	}
	rest := list[:len(list)-1]
	if cfg, err := replay(file, rest); err != nil || cfg.Digest() != running.Digest() {
		return list
	}
	return rest
}

// replay returns file, the config file's config, with the overrides of list
// applied oldest first, as a restart applies them again (reapplyOverrides)
// and `olcd config show` renders them.
func replay(file *rules.Config, list []liveOverride) (*rules.Config, error) {
	cfg := file
	for _, o := range list {
		var err error
		if cfg, _, err = cfg.Patch(o.doc, "admin "+o.Kind); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// coveredBy reports whether every path of old is set again by one of paths.
func coveredBy(old, paths []string) bool {
	for _, p := range old {
		if !slices.ContainsFunc(paths, func(q string) bool { return rules.Covers(q, p) }) {
			return false
		}
	}
	return true
}

// overrideList is the status's view of the live overrides, oldest first.
func overrideList(list []liveOverride) []api.Override {
	out := make([]api.Override, len(list))
	for i, o := range list {
		out[i] = o.Override
	}
	return out
}

// newOverride describes the override doc of kind, as sent (value).
// Errors: a document PatchPaths cannot read.
func newOverride(kind, value string, doc []byte) (liveOverride, error) {
	paths, err := rules.PatchPaths(doc)
	if err != nil {
		return liveOverride{}, err
	}
	return liveOverride{Override: api.Override{At: time.Now(), Kind: kind, Value: value}, paths: paths, doc: doc,
		resetsOnly: rules.PatchResetsOnly(doc)}, nil
}

// loggedValue shortens v for the decision log.
func loggedValue(v string) string {
	if len(v) <= maxLoggedValue {
		return v
	}
	return fmt.Sprintf("%s… (%d bytes)", v[:maxLoggedValue], len(v))
}
