// Package cli holds what olcd's commands (cmd/olcd, cmd/olcd-sim) share on
// the command line: flag sets that report instead of exiting, flags allowed
// after positional arguments, and the mapping of an error onto the exit
// status (0 ok or -h, 1 failure, 2 usage). It imports only the standard
// library.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrUsage marks a command-line mistake: the usage text was printed and the
// exit status is 2.
var ErrUsage = errors.New("usage")

// ErrProblems marks a failure whose details were already printed (e.g. the
// problem list of check-config): exit status 1 without a second message.
var ErrProblems = errors.New("problems reported")

// NewFlagSet returns a flag set named name (e.g. "olcd status") that reports
// errors on stderr instead of exiting, so the caller chooses the exit status.
func NewFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// NoArgs refuses positional arguments left after ParseFlags, for commands
// that take none: a stray word (`olcd reload new.yaml`, `olcd status
// tcp/80`) must not be ignored while the command does something else.
func NoArgs(fs *flag.FlagSet, stderr io.Writer) error {
	if fs.NArg() == 0 {
		return nil
	}
	fmt.Fprintf(stderr, "%s: unexpected argument %q (it takes only flags; see -h)\n", fs.Name(), fs.Arg(0))
	return ErrUsage
}

// ParseFlags parses args, allowing flags after positional arguments
// ("olcd set mode off --socket X"), and maps a flag mistake onto ErrUsage.
// The positional arguments are left in fs.Args(); "--" ends flag parsing.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		// A negative number is a value (`olcd set threshold X -1`, -Inf,
		// -1e309, for the validator to refuse), not an unknown flag.
		if len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' && fs.Lookup(strings.TrimLeft(args[0], "-")) == nil {
			if _, err := strconv.ParseFloat(args[0], 64); err == nil || errors.Is(err, strconv.ErrRange) {
				positional = append(positional, args[0])
				args = args[1:]
				continue
			}
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return ErrUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Reparse the positional arguments alone so fs.Args() returns them.
	return fs.Parse(append([]string{"--"}, positional...))
}

// ExitStatus maps a command's error onto the process exit status, printing
// "prog: err" for a failure not yet reported: 0 for nil and -h, 2 for
// ErrUsage, 1 otherwise.
func ExitStatus(prog string, err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	case errors.Is(err, ErrProblems):
		return 1
	default:
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
}
