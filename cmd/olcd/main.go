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
//	olcd detach                      remove the datapath a stopped olcd left pinned
//	olcd check-config FILE           validate a config; exit 1 listing every problem
//	olcd config show [--file | --config FILE]  the config in force, each value with its origin
//	olcd record --out FILE.csv [--duration 5m]   record the node's signals as a trace
//	olcd version
//
// Replaying traces (olcd simulate, with plots and the plant model) is
// cmd/olcd-sim's job, so this binary links no plotting library.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/olcd/olcd/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `olcd protects this node from overload by shedding new connections at XDP/TC.

Usage:
  olcd run [--config FILE]            run the daemon (embedded default: observe mode, ports: auto)
  olcd status [--json]                show signals, overload state, ports and attachments
  olcd set mode off|observe|enforce   change the mode live (off is the kill switch)
  olcd set threshold SIGNAL VALUE     override one signal threshold live
  olcd set patch FILE|-               apply a partial config document live
  olcd reload                         re-read the config file (like SIGHUP)
  olcd detach                         remove the datapath a stopped olcd left attached and pinned
  olcd check-config FILE              validate a config; exit 1 listing every problem
  olcd config show [--file|--config FILE]  print the config in force, each value with its origin
  olcd record --out FILE.csv [--duration 5m]   record this node's signals as a trace
  olcd version                        print the version, commit and Go version

Run 'olcd COMMAND -h' for the flags of a command. Replaying a trace or a plant
model against a config (with plots) is olcd-sim's: run 'olcd-sim -h'.
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
	case "detach":
		err = cmdDetach(rest, stdout, stderr)
	case "check-config":
		err = cmdCheckConfig(rest, stdout, stderr)
	case "config":
		err = cmdConfig(rest, stdout, stderr)
	case "simulate":
		// The replay and its plots are olcd-sim's, so that this root daemon
		// links no plotting library (docs/internals.md).
		fmt.Fprintf(stderr, "olcd simulate is now a command of its own binary: run 'olcd-sim simulate %s'\n(make build builds bin/olcd-sim; make install installs it beside olcd)\n", strings.Join(rest, " "))
		return 2
	case "record":
		err = cmdRecord(rest, stdout, stderr)
	case "version", "--version", "-version":
		if len(rest) == 1 && (rest[0] == "-h" || rest[0] == "--help") {
			fmt.Fprintln(stdout, "Usage: olcd version\n\nPrints olcd's version, its commit and the Go version it was built with.")
			return 0
		}
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
	return cli.ExitStatus("olcd", err, stderr)
}

// newFlagSet returns the flag set of `olcd name`.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlagSet("olcd "+name, stderr)
}
