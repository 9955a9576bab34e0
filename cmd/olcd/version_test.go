package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionLine: the commit comes from -ldflags when set, else from the
// VCS stamp (shortened, -dirty for a modified tree), else "unknown"; the
// Go version is always there.
func TestVersionLine(t *testing.T) {
	stamp := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, c := range []struct {
		name, ldCommit string
		info           *debug.BuildInfo
		ok             bool
		want           string
	}{
		{"ldflags win", "abc1234", stamp("ffffffffffffffffffff", "true"), true, "commit abc1234,"},
		{"vcs stamp", "", stamp("0123456789abcdef0123", "false"), true, "commit 0123456789ab,"},
		{"vcs dirty", "", stamp("0123456789abcdef0123", "true"), true, "commit 0123456789ab-dirty,"},
		{"no stamp", "", &debug.BuildInfo{}, true, "commit unknown,"},
		{"no build info", "", nil, false, "commit unknown,"},
	} {
		t.Run(c.name, func(t *testing.T) {
			old := commit
			commit = c.ldCommit
			defer func() { commit = old }()
			got := versionLine(c.info, c.ok)
			if !strings.Contains(got, c.want) || !strings.Contains(got, runtime.Version()) || !strings.HasPrefix(got, "olcd "+version+" ") {
				t.Errorf("versionLine = %q; want it to start with %q and hold %q and %q", got, "olcd "+version, c.want, runtime.Version())
			}
		})
	}
}
