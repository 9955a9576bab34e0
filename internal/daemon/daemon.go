// Package daemon runs olcd: every tick it samples the node, steps the
// controller, writes drop probabilities and the heartbeat into the datapath's
// maps and publishes what it saw. It owns the admin API (unix socket), the
// Prometheus endpoint, the decision log, config reload (SIGHUP, file change)
// and the discovery of listening ports under `ports: auto`.
//
// Three owners: the shell (Daemon: signals, listeners, servers, the tick
// loop), the engine (engine.go: everything the tick and the onset check
// touch, and the only writer of the maps) and reconfiguration
// (reconfigure.go: one plan, one application, one rollback). One
// goroutine, the tick loop, drives the engine; admin requests and reloads
// are handed to it as commands and run between two ticks, so a change is
// never half-applied and takes effect at the next tick. The loop never reads the config file: a
// reload reads and decodes it on another goroutine and hands the loop the
// decoded config, so a slow or blocking read cannot delay the heartbeat.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
)

// DiscoverEvery is how often listening ports are rediscovered under
// `ports: auto`: often enough that a new service is protected within
// seconds, rare enough that the sock_diag dump costs nothing.
const DiscoverEvery = 10 * time.Second

// EmbeddedSource is the ConfigSource shown when olcd runs without a file.
const EmbeddedSource = "embedded default"

// Options are the daemon's start-up settings that do not come from the
// config file.
type Options struct {
	// ConfigPath is the config file; "" runs on the embedded default
	// (rules.Default: observe mode, every non-loopback interface as
	// selectInterfaces narrows it, ports: auto).
	ConfigPath string
	// Version is reported in status and the olcd_build_info metric.
	Version string
	// Logger receives the operational log; nil logs nothing.
	Logger *slog.Logger
	// AdminSocket, MetricsAddress and DecisionLog override the config's
	// values when non-empty (MetricsAddress "off" disables metrics). They
	// exist so tests and the demo can run beside an installed olcd.
	AdminSocket    string
	MetricsAddress string
	DecisionLog    string
	// Ready, when non-nil, is closed once the datapath is attached and the
	// admin API listens (tests use it; systemd gets READY=1 at the same
	// point).
	Ready chan<- struct{}
	// PinDir is the bpffs directory the datapath is pinned in, so that a
	// restart takes it over ("" or Off pins nothing: SIGTERM then
	// detaches it; olcd run passes DefaultPinDir). docs/datapath.md,
	// "Restarts".
	PinDir string
	// StateDir is the directory of the state file ("" or Off writes
	// none; olcd run passes StateDir).
	StateDir string
}

// Daemon is one running olcd: the shell around its engine. Create it with
// New and start it with Run. The shell owns the process's edges (signals,
// directories, listeners, the admin API, the metrics and health endpoints,
// the load-balancer agent, the decision log's file) and the tick loop that
// drives the engine; reconfiguration (reconfigure.go) changes what the
// engine runs with; the config file watch (configwatch.go) feeds it.
type Daemon struct {
	opts    Options
	log     *slog.Logger
	started time.Time
	metrics *metrics

	eng   *engine     // what the tick and the onset check touch (engine.go)
	conf  configState // where the config in force came from (reconfigure.go)
	links linkState   // the interfaces followed while running (links.go)
	lb    lbState     // what load balancers are told (lb.go)
	flows flowScan    // the flow table's last scan, for the status (response.go)
	board statusBoard // the status published for other goroutines (status.go)

	// savedAt is when the state file was last written; stateWarned that
	// its last write failed and was logged.
	savedAt     time.Time
	stateWarned bool
	// restartSignal says SIGTERM ended Run: the datapath is released
	// (left attached and pinned for the next olcd), not detached.
	restartSignal atomic.Bool

	cmds   chan command    // work handed to the tick loop
	runCtx context.Context // Run's context: done once the tick loop stops
}

// checkPrivileges refuses a start without the capabilities the datapath
// needs; tests that replace openDatapath replace it too.
var checkPrivileges = loader.CheckPrivileges

// checkStartInterfaces refuses a start whose interface list names one that
// does not exist; tests that load the datapath without attaching it
// (openDatapath = loader.Load) replace it too.
var checkStartInterfaces = checkListed

// command is work handed to the tick loop; done receives its result.
type command struct {
	run  func() error
	done chan error
}

// New checks the options and loads the config; nothing is attached yet.
// Errors: an unreadable or invalid config file (a *rules.ValidationError
// listing every problem; an empty file is one), or a path that is not a
// regular file.
func New(opts Options) (*Daemon, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{opts: opts, log: log, cmds: make(chan command)}
	l := d.readConfig("start")
	if l.err != nil {
		return nil, l.err
	}
	d.logWarnings(l.warns)
	d.conf.fileData, d.conf.fileDigest, d.conf.file = l.data, l.cfg.Digest(), l.cfg
	d.metrics = newMetrics(opts.Version)
	d.eng = &engine{log: log, metrics: d.metrics, cfg: l.cfg}
	d.links.log, d.links.changes = log, d.metrics.interfaceChanges
	if err := d.lb.init(l.cfg, log); err != nil {
		return nil, err
	}
	d.metrics.reg.MustRegister(&stateCollector{fresh: d.freshPublished, dp: func() datapath { return d.eng.dp }},
		&boundsCollector{fresh: d.freshStatus}, &lbCollector{l: &d.lb})
	return d, nil
}

func (d *Daemon) logWarnings(warns []rules.Warning) {
	for _, w := range warns {
		d.log.Warn("config warning", "warning", w.String())
	}
}

func (d *Daemon) configSource() string {
	if d.opts.ConfigPath == "" {
		return EmbeddedSource
	}
	return d.opts.ConfigPath
}

func (d *Daemon) adminSocket() string {
	if d.opts.AdminSocket != "" {
		return d.opts.AdminSocket
	}
	if d.eng.cfg.AdminSocket != "" {
		return d.eng.cfg.AdminSocket
	}
	return api.DefaultSocket
}

func (d *Daemon) metricsAddress() string {
	switch a := d.opts.MetricsAddress; a {
	case "off":
		return ""
	case "":
		return d.eng.cfg.MetricsAddress
	default:
		return a
	}
}

// atSetting places a start failure at the setting it comes from: the flag
// that overrides it (--name), or the config's file:line and field, as the
// validator places its problems.
func (d *Daemon) atSetting(field, flag string, fromFlag bool, err error) error {
	if fromFlag {
		return fmt.Errorf("--%s: %w", flag, err)
	}
	p := d.eng.cfg.Locate(field, "", "")
	where := p.File
	if p.Line > 0 {
		where += fmt.Sprintf(":%d", p.Line)
	}
	return fmt.Errorf("%s: %s: %w", where, field, err)
}

func (d *Daemon) decisionLogPath() string {
	if d.opts.DecisionLog != "" {
		return d.opts.DecisionLog
	}
	return d.eng.cfg.DecisionLog
}

// Run attaches the datapath, serves the admin API and metrics, and runs the
// tick loop until ctx is done or SIGTERM/SIGINT arrives; then it detaches
// everything. SIGHUP and a change of the config file reload the config;
// SIGUSR1 (and SIGHUP) reopen the decision log.
// Errors: no interface to attach to, a failed load or attach (naming the
// interface and mode), a busy admin socket or metrics address.
func (d *Daemon) Run(ctx context.Context) (err error) {
	d.started = time.Now()
	// SIGTERM is a restart's stop (systemd, a package upgrade, a
	// rollout): the pinned datapath stays. SIGINT (Ctrl-C) detaches it.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(term)
	go func() {
		select {
		case s := <-term:
			d.restartSignal.Store(s == syscall.SIGTERM)
			stop()
		case <-ctx.Done():
		}
	}()
	d.runCtx = ctx
	// Before anything slow: a SIGHUP that arrives while olcd attaches
	// (logrotate, a reload sent too early) would otherwise kill it, Go's
	// default for SIGHUP, and leave clsact filters behind.
	sig := signals{hup: make(chan os.Signal, 1), usr1: make(chan os.Signal, 1)}
	signal.Notify(sig.hup, syscall.SIGHUP)
	defer signal.Stop(sig.hup)
	// SIGUSR1 reopens the decision log only (logrotate's postrotate):
	// unlike SIGHUP it leaves the config and the live overrides alone.
	signal.Notify(sig.usr1, syscall.SIGUSR1)
	defer signal.Stop(sig.usr1)
	nofile, err := raiseFileLimit()
	if err != nil {
		d.log.Warn("file descriptor limit", "err", err)
	}

	// Without the capabilities nothing can work: say so before anything
	// is created.
	if err := checkPrivileges(); err != nil {
		return err
	}
	// A typo in the list fails the start before anything is created,
	// at its line, as a reload that adds it is refused.
	if err := checkStartInterfaces(d.eng.cfg, d.eng.cfg.Interfaces); err != nil {
		return err
	}
	ls, err := d.listen()
	if err != nil {
		return err
	}
	started := false
	defer func() { ls.close(d, started) }()
	d.eng.pinDir = d.pinDir()
	if err := d.eng.start(); err != nil {
		return err
	}
	started = true
	defer func() {
		if d.restartSignal.Load() && d.eng.pinDir != "" {
			d.saveState(true)
			if cerr := d.eng.dp.Release(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("release datapath: %w", cerr))
			}
			d.log.Info("datapath left attached and pinned for the next olcd; it fails open after stale_after without one",
				"pin_dir", d.eng.pinDir, "stale_after", d.eng.staleAfter())
			return
		}
		d.saveState(true)
		if cerr := d.eng.dp.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("detach datapath: %w", cerr))
		}
		d.log.Info("datapath detached")
	}()
	overrides, restored := d.restoreState(d.eng.adopted)
	defer d.serve(ctx, ls, nofile)()

	sig.reload = make(chan struct{}, 1)
	sig.loaded = d.readReloads(ctx, sig.reload)
	sig.links = d.links.watch(ctx)
	d.links.following = true

	d.reapplyOverrides(overrides)
	d.firstTick(restored)
	if err := sdNotify("READY=1"); err != nil {
		d.log.Warn("systemd notification failed", "err", err)
	}
	if d.opts.Ready != nil {
		close(d.opts.Ready)
	}
	d.log.Info("olcd running", "mode", d.eng.cfg.Mode.String(), "config", d.configSource(),
		"interval", d.eng.cfg.Interval, "admin_socket", d.adminSocket(), "ports", portNames(d.eng.ports))
	d.loop(ctx, sig)
	return nil
}

// listeners is what Run opens before the datapath attaches: every address
// is taken and every directory made first, so that a busy one fails the
// start without touching an interface.
type listeners struct {
	made     leftovers    // what this start created on disk, removed if it fails
	sockDirs leftovers    // the admin socket's directories, removed at a stop too
	admin    net.Listener // the admin socket
	metrics  net.Listener // nil when metrics are off
	stopLB   func()       // closes the load-balancer agent's listener
}

// listen makes the admin socket's and the decision log's directories,
// listens on the admin socket and the metrics address, opens the decision
// log and starts the load-balancer agent's listener. Errors name the
// setting (flag or file:line) they come from; what was made is removed.
func (d *Daemon) listen() (_ *listeners, err error) {
	ls := &listeners{}
	defer func() {
		if err != nil {
			ls.close(d, false)
		}
	}()
	if err := ls.made.mkdirAll(filepath.Dir(d.adminSocket()), 0o700); err != nil {
		return nil, d.atSetting("admin.socket", "admin-socket", d.opts.AdminSocket != "", fmt.Errorf("create admin socket directory: %w", err))
	}
	ls.sockDirs = ls.made
	if ls.admin, err = listenAdmin(d.adminSocket()); err != nil {
		return nil, d.atSetting("admin.socket", "admin-socket", d.opts.AdminSocket != "", err)
	}
	if p := d.decisionLogPath(); p != "" && p != "-" {
		if err := ls.made.mkdirAll(filepath.Dir(p), 0o750); err != nil {
			return nil, d.atSetting("decision_log", "decision-log", d.opts.DecisionLog != "", fmt.Errorf("create decision log directory: %w", err))
		}
		ls.made.file(p)
	}
	dlog, err := openDecisionLog(d.decisionLogPath(), nil)
	if err != nil {
		return nil, d.atSetting("decision_log", "decision-log", d.opts.DecisionLog != "", err)
	}
	dlog.onFold = func(kind string) { d.metrics.decisionsFolded.WithLabelValues(kind).Inc() }
	d.eng.dlog = dlog
	if addr := d.metricsAddress(); addr != "" {
		if ls.metrics, err = net.Listen("tcp", addr); err != nil {
			return nil, d.atSetting("metrics.address", "metrics-address", d.opts.MetricsAddress != "",
				fmt.Errorf("listen for metrics on %s: %w", addr, err))
		}
	}
	if ls.stopLB, err = d.lb.start(d.eng.cfg.LB.Agent.Address); err != nil {
		return nil, err
	}
	return ls, nil
}

// close undoes listen, in reverse; started tells a stop (the socket's
// directories go, the decision log's stay) from a failed start (everything
// made goes).
func (ls *listeners) close(d *Daemon, started bool) {
	if ls.stopLB != nil {
		ls.stopLB()
	}
	if ls.metrics != nil {
		ls.metrics.Close()
	}
	if d.eng.dlog != nil {
		d.eng.dlog.Close()
	}
	if ls.admin != nil {
		ls.admin.Close() // removes the socket file, unless a successor's replaced it
		ls.sockDirs.remove()
	}
	if !started {
		ls.made.remove()
	}
}

// serve starts the admin API and the metrics endpoint on their listeners;
// the returned function stops both servers.
func (d *Daemon) serve(ctx context.Context, ls *listeners, nofile uint64) (stop func()) {
	// The admin API has a server and listener of its own: nothing done to
	// the metrics listener can delay `olcd set mode off`.
	admin := newHTTPServer(d.withLB(newAdminHandler(d, d.log)))
	go serveHTTP(admin, ls.admin, func(err error) { d.log.Error("admin API stopped", "err", err) })
	go keepAdminSocket(ctx, admin, d.adminSocket(), adminCheckEvery, d.log)
	if ls.metrics == nil {
		return func() { admin.Close() }
	}
	limit := metricsConnCap(nofile)
	msrv := newHTTPServer(d.withLB(d.withHealth(d.metrics.handler())))
	go serveHTTP(msrv, newCapListener(ls.metrics, limit, d.metrics.metricsRefused.Inc),
		func(err error) { d.log.Error("metrics endpoint stopped", "err", err) })
	d.log.Info("metrics endpoint listening", "address", ls.metrics.Addr().String(),
		"max_connections", limit, "fd_limit", nofile)
	return func() {
		msrv.Close()
		admin.Close()
	}
}

// readReloads reads the config file off the loop for every request on
// reload (SIGHUP; a storm of them is coalesced into one read queued behind
// the running one) and watches the file; both send the decoded config on
// the returned channel, until ctx is done.
func (d *Daemon) readReloads(ctx context.Context, reload <-chan struct{}) <-chan configLoad {
	loaded := make(chan configLoad)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-reload:
			}
			l := d.readConfig("SIGHUP")
			select {
			case loaded <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	newFileWatch(d.opts.ConfigPath, d.log).start(ctx, loaded)
	return loaded
}

// signals are the tick loop's inputs besides its timers and commands.
type signals struct {
	hup, usr1 chan os.Signal
	reload    chan struct{}     // a SIGHUP's read, for readReloads
	loaded    <-chan configLoad // configs read off the loop
	links     <-chan struct{}   // the links changed (linkState.watch)
}

// loop is the tick loop: it owns the engine, and runs the ticks, the onset
// checks, rediscoveries, link changes, commands and reloads one at a time
// until ctx is done.
func (d *Daemon) loop(ctx context.Context, sig signals) {
	e := d.eng
	e.ticker = time.NewTicker(e.cfg.Interval)
	defer e.ticker.Stop()
	discover := time.NewTicker(DiscoverEvery)
	defer discover.Stop()
	e.resetOnset()
	defer func() {
		if e.onset.ticker != nil {
			e.onset.ticker.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			_ = sdNotify("STOPPING=1")
			d.log.Info("stopping", "reason", context.Cause(ctx))
			return
		case <-e.ticker.C:
			d.tick()
		case <-e.onsetC():
			d.onsetCheck()
		case <-discover.C:
			if e.cfg.PortsAuto {
				d.rediscover()
			}
			// Link events can be lost (a full socket buffer): check anyway.
			d.syncInterfaces(true)
		case <-sig.links:
			d.syncInterfaces(false)
			d.publish()
		case c := <-d.cmds:
			cerr := c.run()
			d.publish() // before the answer: a status read after it shows the change
			c.done <- cerr
		case <-sig.hup:
			_ = sdNotify("RELOADING=1")
			select {
			case sig.reload <- struct{}{}:
			default: // a read is queued already; it sees this file too
			}
			if err := e.dlog.Reopen(); err != nil {
				d.log.Error("reopen decision log", "err", err)
			}
		case l := <-sig.loaded:
			_ = d.applyLoad(l) // a refusal is logged and shown in the status
			// Like an admin command, a reload shows in the status at once
			// (mode, overrides dropped), not only after the next tick.
			d.publish()
			if l.trigger == "SIGHUP" {
				_ = sdNotify("READY=1")
			}
		case <-sig.usr1:
			if err := e.dlog.Reopen(); err != nil {
				d.log.Error("reopen decision log", "err", err)
			}
		}
	}
}

// tick runs one tick of the engine, then tells load balancers and marks
// the status for rebuilding.
func (d *Daemon) tick() {
	d.eng.tick()
	d.saveState(false)
	d.lb.update(d.eng.cfg, d.eng.ports, d.eng.last)
	if d.runCtx == nil {
		d.publish() // not running (tests): nobody would build it
	} else {
		d.board.stale.Store(true)
	}
}

// onsetCheck runs the engine's onset check and publishes what it decided.
func (d *Daemon) onsetCheck() {
	if d.eng.onsetCheck() {
		d.publish()
	}
}

// do hands fn to the tick loop and waits for its result.
func (d *Daemon) do(ctx context.Context, fn func() error) error {
	c := command{run: fn, done: make(chan error, 1)}
	select {
	case d.cmds <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetMode switches the global mode as a live override. "off" is the kill
// switch: the datapath stops shedding at once and every drop probability is
// written as 0 before the call returns.
func (d *Daemon) SetMode(ctx context.Context, mode string) error {
	m, err := olc.ParseMode(mode)
	if err != nil {
		return err
	}
	fn := func() error { return d.override("mode", mode, []byte("mode: "+mode+"\n")) }
	if m != olc.ModeOff || d.eng.dp == nil || d.runCtx == nil {
		return d.do(ctx, fn)
	}
	// The kill switch does not wait for the tick loop, whatever holds it:
	// the datapath's global mode is written from here (engine.forceOff),
	// and the override that makes it stick is handed to the tick loop with
	// a context of its own, so it is applied even when this request gives
	// up waiting.
	if err := d.eng.forceOff(); err != nil {
		return fmt.Errorf("kill switch: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- d.do(d.runCtx, fn) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("the datapath sheds nothing now, but the tick loop has not taken the override yet: %w", ctx.Err())
	}
}

// Patch applies a partial config document as a live override, validated
// exactly like the file. Errors: a *rules.ValidationError.
func (d *Daemon) Patch(ctx context.Context, doc []byte) error {
	return d.do(ctx, func() error {
		return d.override("patch", string(doc), doc)
	})
}

// RunningConfig returns what the config in force is made of: the file as
// loaded at the start or the last successful reload, and the live
// overrides, read on the tick loop that owns them.
func (d *Daemon) RunningConfig(ctx context.Context) (*api.RunningConfig, error) {
	var rc *api.RunningConfig
	err := d.do(ctx, func() error { rc = d.runningConfig(); return nil })
	return rc, err
}

// runningConfig builds the document of GET /v1/config; the tick loop's.
func (d *Daemon) runningConfig() *api.RunningConfig {
	rc := &api.RunningConfig{Source: d.configSource(), File: string(d.conf.fileData), FileDigest: d.conf.fileDigest,
		Overrides: make([]api.ConfigOverride, len(d.conf.overrides)), Digest: d.eng.cfg.Digest()}
	for i, o := range d.conf.overrides {
		rc.Overrides[i] = api.ConfigOverride{Override: o.Override, Doc: string(o.doc)}
	}
	return rc
}

// Reload re-reads the config file (on the caller's goroutine) and applies
// it; live overrides are dropped. Errors: the file is unreadable, not a
// regular file, empty or invalid (the running config stays).
func (d *Daemon) Reload(ctx context.Context) error {
	l := d.readConfig("admin API")
	return d.do(ctx, func() error { return d.applyLoad(l) })
}
