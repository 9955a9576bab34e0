package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// TestParseFlags: flags may follow positional arguments, a negative number
// is a value, "--" ends the flags, and a mistake is ErrUsage.
func TestParseFlags(t *testing.T) {
	for _, tt := range []struct {
		args     []string
		socket   string
		pos      []string
		err      error
		errNoArg bool
	}{
		{args: []string{"mode", "off", "--socket", "x"}, socket: "x", pos: []string{"mode", "off"}},
		{args: []string{"--socket", "x", "mode"}, socket: "x", pos: []string{"mode"}},
		{args: []string{"threshold", "cpu_busy", "-1"}, pos: []string{"threshold", "cpu_busy", "-1"}},
		{args: []string{"threshold", "cpu_busy", "-Inf"}, pos: []string{"threshold", "cpu_busy", "-Inf"}},
		{args: []string{"threshold", "cpu_busy", "-1e309"}, pos: []string{"threshold", "cpu_busy", "-1e309"}},
		{args: []string{"a", "--", "--socket", "y"}, pos: []string{"a", "--socket", "y"}},
		{args: []string{"--sockt", "x"}, err: ErrUsage},
		{args: []string{"-h"}, err: flag.ErrHelp},
	} {
		fs := NewFlagSet("olcd test", io.Discard)
		socket := fs.String("socket", "", "")
		err := ParseFlags(fs, tt.args)
		if !errors.Is(err, tt.err) || (err == nil && (*socket != tt.socket || !slices.Equal(fs.Args(), tt.pos))) {
			t.Errorf("ParseFlags(%q) = %v, socket %q, args %q; want %v, %q, %q", tt.args, err, *socket, fs.Args(), tt.err, tt.socket, tt.pos)
		}
	}
}

// TestNoArgs names the first stray argument and the command.
func TestNoArgs(t *testing.T) {
	var stderr bytes.Buffer
	fs := NewFlagSet("olcd reload", &stderr)
	if err := ParseFlags(fs, []string{"new.yaml"}); err != nil {
		t.Fatal(err)
	}
	if err := NoArgs(fs, &stderr); !errors.Is(err, ErrUsage) || !strings.Contains(stderr.String(), `olcd reload: unexpected argument "new.yaml"`) {
		t.Errorf("NoArgs = %v, stderr %q", err, stderr.String())
	}
}

// TestExitStatus maps each kind of error onto its status, printing only
// the failures not yet reported.
func TestExitStatus(t *testing.T) {
	for _, tt := range []struct {
		err    error
		code   int
		stderr string
	}{
		{nil, 0, ""},
		{flag.ErrHelp, 0, ""},
		{fmt.Errorf("set: %w", ErrUsage), 2, ""},
		{ErrProblems, 1, ""},
		{errors.New("dial admin socket: refused"), 1, "olcd: dial admin socket: refused\n"},
	} {
		var stderr bytes.Buffer
		if code := ExitStatus("olcd", tt.err, &stderr); code != tt.code || stderr.String() != tt.stderr {
			t.Errorf("ExitStatus(%v) = %d, stderr %q; want %d, %q", tt.err, code, stderr.String(), tt.code, tt.stderr)
		}
	}
}
