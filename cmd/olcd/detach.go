package main

import (
	"fmt"
	"io"

	"github.com/olcd/olcd/internal/cli"
	"github.com/olcd/olcd/internal/daemon"
	"github.com/olcd/olcd/internal/rules"
)

// cmdDetach removes the datapath a stopped olcd left attached and pinned
// (SIGTERM keeps it for the next olcd): the full stop and the uninstall.
func cmdDetach(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("detach", stderr)
	pinDir := fs.String("pin-dir", "", "bpffs `directory` the datapath is pinned in (default "+daemon.PinRoot+"/<netns inode>, as olcd run's)")
	socket := fs.String("socket", rules.DefaultAdminSocket, "the stopped olcd's admin socket `path`: removed when no olcd listens on it (a killed olcd's)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: olcd detach [--pin-dir DIR] [--socket PATH]\n\nRemoves the datapath a stopped olcd left attached and pinned in this network namespace:\n"+
			"its links, its clsact filters and its maps; a stale admin socket; its attach locks, and\n"+
			"the directories they leave empty (/run/olcd, "+daemon.PinRoot+"). Refused while an olcd\n"+
			"runs here (stop it first). Another namespace's olcd keeps its locks and pins.\n\n")
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := cli.NoArgs(fs, stderr); err != nil {
		return err
	}
	done, err := daemon.Detach(*pinDir, *socket, nil)
	for _, line := range done {
		fmt.Fprintln(stdout, line)
	}
	if err != nil {
		return err // named "detach: …" where it arose
	}
	if len(done) == 0 {
		fmt.Fprintln(stdout, "ok: nothing of olcd is attached or pinned here")
		return nil
	}
	fmt.Fprintln(stdout, "ok: detached")
	return nil
}
