package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEmptyOrSpecialConfigRefused: `olcd check-config` and `olcd run
// --config` refuse an empty, white-space or comment-only file (not taken as
// the embedded default: observe, ports: auto, every interface), and a FIFO
// or directory at once (a FIFO must not block them for ever).
// Both exit 1 naming the file and what is wrong, and run attaches nothing:
// it fails while loading the config, before any datapath work.
func TestEmptyOrSpecialConfigRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{write("empty.yaml", ""), "the file is empty"},
		{write("space.yaml", "\n  \n"), "only white space"},
		{write("comments.yaml", "# mode: enforce\n"), "holds no setting"},
		{write("cut.yaml", "mode: enforce\ninterfaces: [eth0\n"), "yaml syntax"},
		{fifo, "a FIFO (named pipe), not a regular file"},
		{dir, "a directory, not a regular file"},
	}
	for _, tt := range tests {
		for _, args := range [][]string{{"check-config", tt.path}, {"run", "--config", tt.path, "--admin-socket", filepath.Join(dir, "s.sock")}} {
			var stdout, stderr bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- run(args, &stdout, &stderr) }()
			select {
			case code := <-done:
				if code != 1 || !strings.Contains(stderr.String(), tt.want) || !strings.Contains(stderr.String(), tt.path) {
					t.Errorf("olcd %s: exit %d, stderr %q; want 1 and %q naming the file", strings.Join(args, " "), code, stderr.String(), tt.want)
				}
				if strings.Contains(stdout.String(), "ok") {
					t.Errorf("olcd %s printed %q", strings.Join(args, " "), stdout.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("olcd %s blocked", strings.Join(args, " "))
			}
		}
	}
}

// TestStrayArgumentsRefused: commands that take only flags refuse a
// positional argument with exit 2 instead of ignoring it. `olcd reload
// new.yaml` used to re-read the running file and answer "ok", and the
// refusal comes before any request: the socket here answers nothing, so an
// ignored argument would show as a dial error (exit 1).
func TestStrayArgumentsRefused(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{
		{"reload", "new.yaml", "--socket", sock},
		{"reload", "--socket", sock, "new.yaml"},
		{"status", "tcp/8080", "--socket", sock},
		{"status", "--json", "--socket", sock, "extra"},
		{"version", "extra"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "unexpected argument") {
			t.Errorf("olcd %s: exit %d, stderr %q; want 2 naming the unexpected argument", strings.Join(args, " "), code, stderr.String())
		}
		if stdout.Len() > 0 {
			t.Errorf("olcd %s printed %q", strings.Join(args, " "), stdout.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"status", "--socket", sock}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "is olcd running?") {
		t.Errorf("olcd status without arguments: exit %d, stderr %q; want the dial error", code, stderr.String())
	}
}

// TestHelpExitsZero: every command's -h prints its usage and exits 0
// (`version -h` was an unexpected argument, `config -h` a usage error).
func TestHelpExitsZero(t *testing.T) {
	for _, cmd := range []string{"run", "status", "set", "reload", "check-config", "record", "version", "config", "detach"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{cmd, "-h"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String()+stderr.String(), "sage") {
			t.Errorf("olcd %s -h: exit %d, output %q; want 0 and its usage", cmd, code, stdout.String()+stderr.String())
		}
	}
}

// TestCheckConfigStdin: `olcd check-config -` validates the document on
// stdin (a rendered ConfigMap piped in), naming it "stdin" in its
// problems, with the rules of a file: empty is refused. It used to stat a
// file named "-".
func TestCheckConfigStdin(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		err      bool
	}{
		{"mode: enforce\n", "stdin: ok", false},
		{"mode: enforc\n", `stdin:1: mode: unknown value "enforc"`, true},
		{"", "stdin: the file is empty", true},
		// kubectl get configmap olcd -o yaml | olcd check-config -
		{"apiVersion: v1\nkind: ConfigMap\ndata:\n  olcd.yaml: |\n    mode: enforc\n", `stdin:5: mode: unknown value "enforc"`, true},
		{"apiVersion: v1\nkind: ConfigMap\ndata:\n  olcd.yaml: |\n    mode: enforce\n", "stdin: ok (the ConfigMap's data.olcd.yaml)\n", false},
		// The "ok" names where the config was: binaryData (base64) too.
		{"apiVersion: v1\nkind: ConfigMap\nbinaryData:\n  olcd.yaml: bW9kZTogZW5mb3JjZQo=\n", "stdin: ok (the ConfigMap's binaryData.olcd.yaml)\n", false},
	} {
		var stdout, stderr bytes.Buffer
		err := checkConfigs([]string{"-"}, strings.NewReader(tt.in), &stdout, &stderr)
		if (err != nil) != tt.err || !strings.Contains(stdout.String()+stderr.String(), tt.want) {
			t.Errorf("check-config - < %q: %v, output %q; want %q", tt.in, err, stdout.String()+stderr.String(), tt.want)
		}
	}
}

// TestCheckConfigConfigMap: check-config takes the Kubernetes ConfigMap
// the README recommends starting from, checking the config in its data
// (it refused the ConfigMap's own keys: "apiVersion: unknown key").
func TestCheckConfigConfigMap(t *testing.T) {
	for _, path := range []string{"../../deploy/kubernetes/configmap.yaml", "../../deploy/kubernetes/configmap-enforce.yaml"} {
		var stdout, stderr bytes.Buffer
		if err := checkConfigs([]string{path}, strings.NewReader(""), &stdout, &stderr); err != nil {
			t.Errorf("check-config %s: %v\n%s", path, err, stderr.String())
		}
		if want := path + ": ok (the ConfigMap's data.olcd.yaml)\n"; stdout.String() != want {
			t.Errorf("check-config %s: %q, want %q", path, stdout.String(), want)
		}
	}
}
