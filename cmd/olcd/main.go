// Command olcd protects a Linux node from overload: it samples the node's real
// pressure (CPU, load, PSI, cgroup throttling, accept queues), turns it into
// drop probabilities with a feedback controller, and sheds new connections at
// XDP/TC for every process on the host.
//
//	olcd run [--config FILE]         run the daemon (embedded default without --config)
//	olcd status [--json]             what the running daemon sees and does
//	olcd set mode off|observe|enforce
//	olcd set threshold SIGNAL VALUE  live override of one threshold
//	olcd set patch FILE|-            live override with a partial config document
//	olcd reload                      re-read the config file
//	olcd check-config FILE           validate a config; exit 1 listing every problem
//	olcd simulate --config FILE --trace FILE.csv [--out FILE.csv] [--plot FILE.png]
//	olcd record --out FILE.csv [--duration 5m]   record the node's signals as a trace
//	olcd version
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// errUsage marks a command-line mistake: the usage text was printed and the
// exit status is 2.
var errUsage = errors.New("usage")

// errProblems marks a failure whose details were already printed (e.g. the
// problem list of check-config): exit status 1 without a second message.
var errProblems = errors.New("problems reported")

const usage = `olcd protects this node from overload by shedding new connections at XDP/TC.

Usage:
  olcd run [--config FILE]            run the daemon (embedded default: observe mode, ports: auto)
  olcd status [--json]                show signals, overload state, ports and attachments
  olcd set mode off|observe|enforce   change the mode live (off is the kill switch)
  olcd set threshold SIGNAL VALUE     override one signal threshold live
  olcd set patch FILE|-               apply a partial config document live
  olcd reload                         re-read the config file (like SIGHUP)
  olcd check-config FILE              validate a config; exit 1 listing every problem
  olcd simulate --config FILE --trace FILE.csv [--out FILE.csv] [--plot FILE.png]
  olcd record --out FILE.csv [--duration 5m]   record this node's signals as a trace
  olcd version                        print the version, commit and Go version

Run 'olcd COMMAND -h' for the flags of a command.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the process exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		err = cmdRun(rest, stderr)
	case "status":
		err = cmdStatus(rest, stdout, stderr)
	case "set":
		err = cmdSet(rest, stdout, stderr)
	case "reload":
		err = cmdReload(rest, stdout, stderr)
	case "check-config":
		err = cmdCheckConfig(rest, stdout, stderr)
	case "simulate":
		err = cmdSimulate(rest, stdout, stderr)
	case "record":
		err = cmdRecord(rest, stdout, stderr)
	case "version", "--version", "-version":
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "olcd %s: unexpected argument %q (it takes none)\n", cmd, rest[0])
			return 2
		}
		fmt.Fprintln(stdout, versionLine(debug.ReadBuildInfo()))
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "olcd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, errProblems):
		return 1
	default:
		fmt.Fprintf(stderr, "olcd: %v\n", err)
		return 1
	}
}

// newFlagSet returns a flag set that reports errors instead of exiting, so
// run can choose the exit status.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("olcd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// noArgs refuses positional arguments left after parseFlags, for commands
// that take none: a stray word (`olcd reload new.yaml`, `olcd status
// tcp/80`) must not be ignored while the command does something else.
func noArgs(fs *flag.FlagSet, stderr io.Writer) error {
	if fs.NArg() == 0 {
		return nil
	}
	fmt.Fprintf(stderr, "%s: unexpected argument %q (it takes only flags; see -h)\n", fs.Name(), fs.Arg(0))
	return errUsage
}

// parseFlags parses args, allowing flags after positional arguments
// ("olcd set mode off --socket X"), and maps a flag mistake onto errUsage.
// The positional arguments are left in fs.Args(); "--" ends flag parsing.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		// A negative number is a value (`olcd set threshold X -1`, for the
		// validator to refuse), not an unknown flag.
		if len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' && fs.Lookup(strings.TrimLeft(args[0], "-")) == nil {
			if _, err := strconv.ParseFloat(args[0], 64); err == nil {
				positional = append(positional, args[0])
				args = args[1:]
				continue
			}
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return errUsage
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
