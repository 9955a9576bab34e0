// Command olcd-sim replays what olcd's controller would do, off the node and
// without root: a recorded trace (`olcd record`, the field cases) or a plant
// model of a harness scenario, against a config, with a CSV per tick and a
// PNG of signals, pressure and drop probabilities.
//
//	olcd-sim simulate --config FILE --trace FILE.csv [--out FILE.csv] [--plot FILE.png]
//	olcd-sim simulate --config FILE --plant SCENARIO [--seed N] [--out FILE.csv]
//	olcd-sim version
//
// It is a binary of its own so that the daemon (cmd/olcd), which runs with
// CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN, links no plotting library; it
// imports only the pure packages, so it builds and runs on any OS.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/olcd/olcd/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `olcd-sim replays olcd's controller against a trace or a plant model, off the node.

Usage:
  olcd-sim simulate --config FILE --trace FILE.csv [--out FILE.csv] [--plot FILE.png]
  olcd-sim simulate --config FILE --plant SCENARIO [--seed N] [--out FILE.csv]
  olcd-sim version                     print the version

Record a trace on the node with 'olcd record'. Run 'olcd-sim simulate -h' for
the flags and the CSV's columns.
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
	case "simulate":
		err = cmdSimulate(rest, stdout, stderr)
	case "version", "--version", "-version":
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "olcd-sim %s: unexpected argument %q (it takes none)\n", cmd, rest[0])
			return 2
		}
		fmt.Fprintf(stdout, "olcd-sim %s\n", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "olcd-sim: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	return cli.ExitStatus("olcd-sim", err, stderr)
}

// newFlagSet returns the flag set of `olcd-sim name`.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlagSet("olcd-sim "+name, stderr)
}
