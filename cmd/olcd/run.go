package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/cli"
	"github.com/olcd/olcd/internal/daemon"
	"github.com/olcd/olcd/internal/rules"
)

// cmdRun runs the daemon in the foreground until SIGTERM/SIGINT.
func cmdRun(args []string, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	config := fs.String("config", "", "config `file`; without it olcd runs on the embedded default (observe mode, ports: auto)")
	level := fs.String("log-level", "info", "operational log level: debug, info, warn or error")
	format := fs.String("log-format", "text", "operational log format: text or json")
	socket := fs.String("admin-socket", "", "admin API unix socket `path`, overriding the config (default "+api.DefaultSocket+")")
	metricsAddr := fs.String("metrics-address", "", "Prometheus listen `address`, overriding the config; \"off\" disables it")
	decisions := fs.String("decision-log", "", "decision log `path`, overriding the config; \"-\" disables it")
	pinDir := fs.String("pin-dir", daemon.DefaultPinDir(), "bpffs `directory` the datapath is pinned in, so that a restart (SIGTERM, then run again) takes it over without a gap ("+daemon.PinRoot+"/<netns inode>); \"off\" pins nothing and SIGTERM detaches")
	stateDir := fs.String("state-dir", daemon.StateDir, "`directory` of the state file a restart reads (what the controller learnt, the live overrides); \"off\" writes none")
	cpuProfile := fs.String("cpu-profile", "", "write a pprof CPU profile of the daemon to `file` until it stops (for performance reports; the sampling adds some CPU of its own)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: olcd run [flags]\n\nRuns the daemon until SIGTERM/SIGINT; SIGHUP reloads the config, SIGUSR1 reopens the decision log.\n"+
			"SIGTERM leaves the datapath attached and pinned for the next olcd (it fails open after stale_after without one);\n"+
			"SIGINT detaches it; 'olcd detach' removes a pinned datapath no olcd runs.\n\n")
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "olcd run: unexpected argument %q\n", fs.Arg(0))
		return cli.ErrUsage
	}
	// SIGHUP means "reload" to olcd, never "exit" (Go's default): until Run
	// listens for it, one sent early (logrotate, an eager reload) is dropped.
	// SIGUSR1 (reopen the decision log) likewise.
	signal.Ignore(syscall.SIGHUP, syscall.SIGUSR1)
	log, err := newLogger(stderr, *level, *format)
	if err != nil {
		fmt.Fprintf(stderr, "olcd run: %v\n", err)
		return cli.ErrUsage
	}
	d, err := daemon.New(daemon.Options{
		ConfigPath:     *config,
		Version:        version,
		Logger:         log,
		AdminSocket:    *socket,
		MetricsAddress: *metricsAddr,
		DecisionLog:    *decisions,
		PinDir:         *pinDir,
		StateDir:       *stateDir,
	})
	if err != nil {
		return describeConfigError(err, stderr)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	return d.Run(context.Background())
}

// newLogger builds the operational logger (stderr, which journald collects).
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// describeConfigError prints a config's problem list one per line and
// returns cli.ErrProblems; other errors are returned as they are.
func describeConfigError(err error, w io.Writer) error {
	if ve := (*rules.ValidationError)(nil); errors.As(err, &ve) {
		fmt.Fprintf(w, "olcd: invalid config: %d problem(s):\n", len(ve.Problems))
		for _, line := range ve.ProblemLines() {
			fmt.Fprintf(w, "  %s\n", line)
		}
		return cli.ErrProblems
	}
	return err
}

// cmdCheckConfig validates config files; every problem of every file is
// listed, and the exit status is 1 when any file is invalid.
func cmdCheckConfig(args []string, stdout, stderr io.Writer) error {
	return checkConfigs(args, os.Stdin, stdout, stderr)
}

// checkConfigs is cmdCheckConfig reading "-" from stdin.
func checkConfigs(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("check-config", stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: olcd check-config FILE...\n\nValidates config files and lists every problem with file:line; - reads one from stdin.\n"+
			"A Kubernetes ConfigMap (deploy/kubernetes/configmap.yaml, or kubectl get configmap olcd -n kube-system -o yaml)\n"+
			"is checked for the config in its data's %s, at the ConfigMap's own lines.\n", rules.ConfigMapKey)
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	failed := false
	for _, path := range fs.Args() {
		var warns []rules.Warning
		var what string
		var err error
		if path == "-" {
			path = "stdin"
			what, warns, err = checkStdin(stdin)
		} else {
			var data []byte
			if data, err = rules.ReadFile(path); err == nil {
				what, warns, err = checkDocument(data, path)
			}
		}
		if err != nil {
			failed = true
			if ve := (*rules.ValidationError)(nil); errors.As(err, &ve) {
				fmt.Fprintf(stderr, "%s: invalid: %d problem(s):\n", path, len(ve.Problems))
				for _, line := range ve.ProblemLines() {
					fmt.Fprintf(stderr, "  %s\n", line)
				}
			} else {
				fmt.Fprintf(stderr, "%s: %v\n", path, err)
			}
			continue
		}
		for _, w := range warns {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
		fmt.Fprintf(stdout, "%s: ok%s\n", path, what)
	}
	if failed {
		return cli.ErrProblems
	}
	return nil
}

// checkStdin validates the config document (or ConfigMap) on stdin, named
// "stdin" in its problems, with the file's size bound.
func checkStdin(stdin io.Reader) (string, []rules.Warning, error) {
	data, err := io.ReadAll(io.LimitReader(stdin, rules.MaxConfigBytes+1))
	if err != nil {
		return "", nil, fmt.Errorf("read config from stdin: %w", err)
	}
	if len(data) > rules.MaxConfigBytes {
		return "", nil, fmt.Errorf("read config from stdin: larger than %d bytes: not a config file", rules.MaxConfigBytes)
	}
	return checkDocument(data, "stdin")
}

// checkDocument validates a config document, or the config inside a
// Kubernetes ConfigMap (rules.ParseConfigMap), which what then names for
// the "ok" line. check-config alone reads ConfigMaps: olcd run is given
// the file the ConfigMap becomes in the pod.
func checkDocument(data []byte, source string) (what string, warns []rules.Warning, err error) {
	if _, warns, key, err := rules.ParseConfigMap(data, source); key != "" {
		return " (the ConfigMap's " + key + ")", warns, err
	}
	_, warns, err = rules.Parse(data, source)
	return "", warns, err
}

// socketFlag adds the --socket flag shared by the client commands.
func socketFlag(fs interface {
	String(name, value, usage string) *string
}) *string {
	def := api.DefaultSocket
	if env := os.Getenv("OLCD_SOCKET"); env != "" {
		def = env
	}
	return fs.String("socket", def, "admin API unix socket `path` ($OLCD_SOCKET)")
}
