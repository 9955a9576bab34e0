package main

import (
	"fmt"
	"io"

	"github.com/olcd/olcd/internal/cli"
	"github.com/olcd/olcd/internal/daemon"
)

// cmdDetach removes the datapath a stopped olcd left attached and pinned
// (SIGTERM keeps it for the next olcd): the full stop and the uninstall.
func cmdDetach(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("detach", stderr)
	pinDir := fs.String("pin-dir", "", "bpffs `directory` the datapath is pinned in (default "+daemon.PinRoot+"/<netns inode>, as olcd run's)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: olcd detach [--pin-dir DIR]\n\nRemoves the datapath a stopped olcd left attached and pinned in this network namespace:\n"+
			"its links, its clsact filters and its maps. Refused while an olcd runs here (stop it first).\n\n")
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := cli.NoArgs(fs, stderr); err != nil {
		return err
	}
	done, err := daemon.Detach(*pinDir, nil)
	for _, line := range done {
		fmt.Fprintln(stdout, line)
	}
	if err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	if len(done) == 0 {
		fmt.Fprintln(stdout, "ok: nothing of olcd is attached or pinned here")
		return nil
	}
	fmt.Fprintln(stdout, "ok: detached")
	return nil
}
