package setup

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestLog: make test's steps run through scripts/test-log.sh keep
// their exit status (a failing step still stops make) and their output,
// and the summary lists the GOAL MISSED lines of every step, or none.
func TestTestLog(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	run := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bash, append([]string{"../../scripts/test-log.sh"}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		} else if err != nil {
			t.Fatalf("test-log.sh %v: %v", args, err)
		}
		return 0, out.String()
	}
	tests := []struct {
		name  string
		steps []string // shell commands, one step each
		code  int      // the last step's exit status
		want  []string // in the summary (when every step passed) or the output
		not   []string
	}{
		{"no goal missed", []string{"echo ok", "echo PASS"}, 0,
			[]string{"make test: every step passed", "GOAL MISSED: none"}, nil},
		{"goal missed in two steps", []string{
			"echo '    overload_test.go:160: GOAL MISSED: enforce at 3 C: 0.85, goal 0.9'",
			"echo ok; echo 'response_test.go:66: GOAL MISSED: work-0.5x' >&2"}, 0,
			[]string{"GOAL MISSED: 2 figure(s)", "\n  overload_test.go:160: GOAL MISSED: enforce at 3 C: 0.85, goal 0.9\n", "\n  response_test.go:66: GOAL MISSED: work-0.5x\n"},
			[]string{"none"}},
		{"a failing step keeps its status", []string{"echo before; exit 3"}, 3, []string{"before"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "make-test.log")
			if err := os.WriteFile(log, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var all strings.Builder
			var outs []string
			code := 0
			for _, s := range tt.steps {
				var out string
				code, out = run("run", log, "sh", "-c", s)
				all.WriteString(out)
				outs = append(outs, out)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d\n%s", code, tt.code, all.String())
			}
			if code == 0 {
				_, out := run("summary", log)
				all.WriteString(out)
			}
			for _, w := range tt.want {
				if !strings.Contains(all.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, all.String())
				}
			}
			for _, w := range tt.not {
				if strings.Contains(all.String(), w) {
					t.Errorf("output has %q:\n%s", w, all.String())
				}
			}
			logged, _ := os.ReadFile(log)
			for _, out := range outs {
				if !strings.Contains(string(logged), out) {
					t.Errorf("the log lacks a step's output %q:\n%s", out, logged)
				}
			}
		})
	}
}
