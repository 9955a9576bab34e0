package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// commit is set at build time with -ldflags "-X main.commit=..." (the
// Makefile and tools/release do); without it the VCS stamp Go records in
// a build from a git checkout is used.
var commit = ""

// versionLine is what `olcd version` prints: the release version, the
// commit it was built from (with "-dirty" when the tree had changes) and
// the Go toolchain, so a bug report names the exact build.
func versionLine(info *debug.BuildInfo, ok bool) string {
	rev := commit
	if rev == "" && ok {
		var modified bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" && modified {
			rev += "-dirty"
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	return fmt.Sprintf("olcd %s (commit %s, %s, %s/%s)", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
