package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/cli"
	"github.com/olcd/olcd/internal/rules"
)

const configUsage = `Usage: olcd config show [--config FILE] [--socket PATH]

Prints the effective config, one key a line, with its value and where it
comes from: default, the config file's line, or a live override (olcd set).
Without --config it asks the running daemon for its file and overrides.
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
	socket := socketFlag(fs)
	if err := cli.ParseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := cli.NoArgs(fs, stderr); err != nil {
		return err
	}
	cfg, err := effectiveConfig(*path, *socket, stderr)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tORIGIN")
	for _, s := range cfg.Settings() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, s.Value, s.Origin)
	}
	return tw.Flush()
}

// effectiveConfig returns the config at path, or the running daemon's: its
// file (or the embedded default) with its live overrides applied in order,
// each named "live mode" or "live patch" in the origins.
func effectiveConfig(path, socket string, stderr io.Writer) (*rules.Config, error) {
	if path != "" {
		cfg, _, err := rules.Load(path)
		return cfg, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	st, err := api.NewClient(socket, clientTimeout).Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("ask the daemon for its config (or show a file with --config FILE): %w", err)
	}
	cfg := rules.Default()
	if st.ConfigSource != "embedded default" {
		if cfg, _, err = rules.Load(st.ConfigSource); err != nil {
			return nil, err
		}
	}
	if st.ReloadRefused != nil {
		fmt.Fprintf(stderr, "warning: the daemon refused to reload %s: it runs an earlier version than the file shown\n", st.ConfigSource)
	}
	if len(st.RestartPending) > 0 {
		fmt.Fprintf(stderr, "warning: %s as shown take effect at the next start; the daemon runs them as it started\n", strings.Join(st.RestartPending, ", "))
	}
	for _, o := range st.Overrides {
		doc := o.Value
		if o.Kind == "mode" {
			doc = "mode: " + o.Value
		}
		if cfg, _, err = cfg.Patch([]byte(doc), "live "+o.Kind); err != nil {
			return nil, fmt.Errorf("apply live override %q: %w", doc, err)
		}
	}
	return cfg, nil
}
