package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRun: the command line's exit statuses and where each text goes.
func TestRun(t *testing.T) {
	for _, tt := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{nil, 2, "", "Usage:"},
		{[]string{"version"}, 0, "olcd-sim dev", ""},
		{[]string{"version", "x"}, 2, "", `unexpected argument "x"`},
		{[]string{"help"}, 0, "olcd-sim simulate --config FILE --plant", ""},
		{[]string{"run"}, 2, "", `olcd-sim: unknown command "run"`},
		{[]string{"simulate"}, 2, "", "--config and one of --trace or --plant are required"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) ||
			(tt.stdout == "" && stdout.Len() > 0) {
			t.Errorf("olcd-sim %q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
	}
}
