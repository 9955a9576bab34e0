package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/cli"
	"github.com/olcd/olcd/internal/daemon"
	"github.com/olcd/olcd/internal/rules"
)

const configUsage = `Usage: olcd config show [--file | --config FILE] [--socket PATH]

Prints the effective config, one key a line, with its value and where it
comes from: default, the config file's line, or a live override (olcd set).
A comment line (# …) first says which config it is.

Without flags it shows the config in force in the running daemon: its file
as the daemon loaded it (at the start or the last successful reload) with
its live overrides, and a NOTICE when the file on disk differs from it (a
refused reload, an edit not reloaded yet). --file shows the daemon's file as
it is on disk instead; --config FILE shows FILE alone, without a daemon.
`

// cmdConfig runs `olcd config show`.
func cmdConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stderr, configUsage) // as every command's -h: the usage, exit 0
		return nil
	}
	if len(args) == 0 || args[0] != "show" {
		fmt.Fprint(stderr, configUsage)
		return cli.ErrUsage
	}
	fs := cli.NewFlagSet("config show", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, configUsage) }
	path := fs.String("config", "", "show this config `file` alone, without a daemon")
	onDisk := fs.Bool("file", false, "show the running daemon's config file as it is on disk, not the config in force")
	socket := socketFlag(fs)
	if err := cli.ParseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := cli.NoArgs(fs, stderr); err != nil {
		return err
	}
	if *onDisk && *path != "" {
		fmt.Fprintln(stderr, "olcd config show: --file shows the daemon's file, --config FILE another one: give one of them")
		return cli.ErrUsage
	}
	var cfg *rules.Config
	var header []string
	var err error
	if *path != "" {
		header = []string{fmt.Sprintf("# the file %s as it is on disk (--config), not asked of a running olcd", *path)}
		cfg, _, err = rules.Load(*path)
	} else {
		cfg, header, err = daemonConfig(*socket, *onDisk)
	}
	if err != nil {
		return err
	}
	for _, h := range header {
		fmt.Fprintln(stdout, h)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tORIGIN")
	for _, s := range cfg.Settings() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, s.Value, s.Origin)
	}
	return tw.Flush()
}

// daemonConfig returns the running daemon's config, and the comment lines
// that say which it is: the config in force (its file as loaded, with the
// live overrides applied in order, each named "live mode" or "live patch"
// in the origins), or with onDisk its file as it is on disk now. Either
// way a NOTICE line says when the file on disk is not the one in force,
// and why as far as the daemon knows.
func daemonConfig(socket string, onDisk bool) (*rules.Config, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	c := api.NewClient(socket, clientTimeout)
	st, err := c.Status(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("ask the daemon for its config (or show a file with --config FILE): %w", err)
	}
	rc, err := c.Config(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("ask the daemon for its config (or show a file with --config FILE): %w", err)
	}
	embedded := rc.File == "" && rc.Source == daemon.EmbeddedSource
	var disk *rules.Config
	var diskErr error
	if !embedded {
		disk, _, diskErr = rules.Load(rc.Source)
	}
	notices := diskNotices(rc, st, disk, diskErr)
	if onDisk {
		if embedded {
			return nil, nil, errors.New("the daemon runs the embedded default, not a file: run olcd config show without --file")
		}
		if diskErr != nil {
			return nil, nil, diskErr
		}
		return disk, append([]string{fmt.Sprintf("# the file %s as it is on disk (--file), not the config in force in the olcd on %s", rc.Source, socket)}, notices...), nil
	}
	cfg := rules.Default()
	if !embedded {
		if cfg, _, err = rules.Parse([]byte(rc.File), rc.Source); err != nil {
			return nil, nil, fmt.Errorf("read the daemon's file as loaded: %w", err)
		}
	}
	for _, o := range rc.Overrides {
		if cfg, _, err = cfg.Patch([]byte(o.Doc), "live "+o.Kind); err != nil {
			return nil, nil, fmt.Errorf("apply live override %q: %w", o.Doc, err)
		}
	}
	what := "the embedded default"
	if !embedded {
		what = rc.Source + " as loaded at the start or the last successful reload"
	}
	header := []string{fmt.Sprintf("# the config in force in the olcd on %s: %s, with %d live override(s) (olcd set)", socket, what, len(rc.Overrides))}
	if rc.Digest != "" && cfg.Digest() != rc.Digest {
		header = append(header, "# NOTICE: this olcd renders the config otherwise than the daemon runs it (another version?): olcd status shows what runs")
	}
	return cfg, append(header, notices...), nil
}

// diskNotices says, as comment lines, how the file on disk (disk, or the
// error reading it) stands to the one the daemon loaded, and which settings
// as shown wait for a start.
func diskNotices(rc *api.RunningConfig, st *api.Status, disk *rules.Config, diskErr error) []string {
	var out []string
	refused := ""
	if rf := st.ReloadRefused; rf != nil {
		refused = fmt.Sprintf(": its reload was refused at %s (%s: %s)", rf.At.Local().Format("15:04:05"), rf.Trigger, rf.Error)
	}
	switch {
	case rc.File == "" && rc.Source == daemon.EmbeddedSource:
	case diskErr != nil:
		var ve *rules.ValidationError
		if errors.As(diskErr, &ve) {
			out = append(out, fmt.Sprintf("# NOTICE: %s on disk is not the config in force: it has %d problem(s), so a reload is refused%s; olcd check-config %s lists them",
				rc.Source, len(ve.Problems), refused, rc.Source))
		} else {
			out = append(out, fmt.Sprintf("# NOTICE: %s on disk cannot be read (%v): the daemon runs the file as it loaded it", rc.Source, diskErr))
		}
	case disk.Digest() != rc.FileDigest && refused != "":
		out = append(out, fmt.Sprintf("# NOTICE: %s on disk differs from the file in force%s", rc.Source, refused))
	case disk.Digest() != rc.FileDigest:
		out = append(out, fmt.Sprintf("# NOTICE: %s on disk differs from the file in force: edited since it was loaded; olcd reload applies it (and drops the live overrides)", rc.Source))
	}
	if len(st.RestartPending) > 0 {
		out = append(out, fmt.Sprintf("# NOTICE: %s as shown take effect at the next start; the daemon runs them as it started", strings.Join(st.RestartPending, ", ")))
	}
	return out
}
