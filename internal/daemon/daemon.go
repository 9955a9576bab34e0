// Package daemon runs olcd: every tick it samples the node, steps the
// controller, writes drop probabilities and the heartbeat into the datapath's
// maps and publishes what it saw. It owns the admin API (unix socket), the
// Prometheus endpoint, the decision log, config reload (SIGHUP, file change)
// and the discovery of listening ports under `ports: auto`.
//
// One goroutine, the tick loop, owns the controller, the sampler and every
// write to the datapath. Admin requests and reloads are handed to it as
// commands and run between two ticks, so a change is never half-applied and
// takes effect at the next tick. The loop never reads the config file: a
// reload reads and decodes it on another goroutine and hands the loop the
// decoded config, so a slow or blocking read cannot delay the heartbeat.
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/netif"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/sampler"
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
}

// Daemon is one running olcd. Create it with New and start it with Run.
type Daemon struct {
	opts    Options
	log     *slog.Logger
	started time.Time

	// Owned by the tick loop goroutine.
	base      *rules.Config      // as loaded from the file (or the embedded default)
	cfg       *rules.Config      // base + live overrides: what is in force
	overrides []liveOverride     // one per field path, oldest first (overrides.go)
	refused   *api.ReloadFailure // the last refused reload of the file, until one succeeds
	// fileData is the content of the config file in force (nil for the
	// embedded default): a file change that writes it again changes
	// nothing, and must not drop the live overrides (the kill switch).
	fileData []byte
	smp      snapshotter
	ctrl     *adaptive.Controller
	dp       datapath
	ports    []portEntry
	prev     loader.Stats
	prevAt   time.Time
	last     tickResult
	// flowTable is the last scan of the response timer's flow table, at
	// flowScanAt (response.go).
	flowTable  loader.FlowTable
	flowScanAt time.Time
	ticks      uint64
	ticker     *time.Ticker
	// The onset check between ticks (onset.go).
	onsetTicker  *time.Ticker
	onsetEvery   time.Duration
	onsetPrev    map[olc.PortKey]loader.Counters // swapped with onsetCur, reused
	onsetCur     map[olc.PortKey]loader.Counters
	onsetStats   map[olc.PortKey]adaptive.PortStats // reused by every check
	onsetRCur    map[olc.PortKey]loader.RespCount   // response counts, swapped with onsetRPrev
	onsetRPrev   map[olc.PortKey]loader.RespCount
	onsetAt      time.Time
	onsetOK      bool // onsetPrev is a baseline
	onsetFailing bool // the last onset read of the statistics failed
	dlog         *decisionLog
	changes      pendingChanges // probability changes not yet in the decision log
	cmds         chan command
	runCtx       context.Context // Run's context: done once the tick loop stops

	limits      limits   // what the loaded datapath was sized and set up with
	autoLeftOut int      // discovered ports the last discovery had no room for
	listening   []uint16 // TCP ports listening on a non-loopback address, as last discovered
	// Following the interfaces (links.go): set by Run once attached.
	following  bool
	linkWarned map[string]string // interface → the last problem logged for it
	waiting    []string          // listed interfaces that do not exist

	status atomic.Pointer[published]
	// statusStale is set by a tick: the status is built when someone asks
	// (the admin API, a scrape), not twice a second for nobody.
	statusStale atomic.Bool
	metrics     *metrics
	lb          lbState // what load balancers are told (lb.go)
}

// snapshotter is what the daemon uses of the sampler (*sampler.Sampler);
// tests drive the daemon with fixed snapshots.
type snapshotter interface {
	Sample() olc.Snapshot
	SetTCPPorts(ports []uint16)
}

// datapath is what the daemon uses of the loaded datapath
// (*loader.Datapath); tests drive the daemon without a kernel through it.
type datapath interface {
	Attach(iface string, mode olc.AttachMode) error
	Detach(iface string) error
	Attachments() []loader.Attachment
	SetPolicies(policies []loader.PortPolicy) error
	SetDropProbabilities(m map[olc.PortKey]float64) error
	SetRetransmitShedding(m map[olc.PortKey]bool) error
	SetExceptions(ports []olc.PortKey, sources []netip.Prefix) error
	SetMode(m olc.Mode) error
	SetRejectLimit(rate, burst int) error
	Heartbeat() error
	Stats() (loader.Stats, error)
	// ReleaseStats hands back a Stats no longer read (see
	// loader.Datapath.ReleaseStats).
	ReleaseStats(s loader.Stats)
	PortCounters(into map[olc.PortKey]loader.Counters) error
	ResponseSample() uint32
	FlowTableOccupancy() (loader.FlowTable, error)
	Close() error
}

// portEntry is one protected port as the daemon tracks it.
type portEntry struct {
	key    olc.PortKey
	class  olc.Class
	mode   olc.Mode   // effective mode
	action olc.Action // effective action
	source string     // "config" or "auto"
}

// limits are the settings the datapath was loaded with. They change only
// with a restart, so a config that needs more than they allow is refused
// whole instead of being applied half (see fits).
type limits struct {
	maxPorts    int           // datapath.max_ports
	maxPrefixes int           // datapath.max_prefixes, per address family
	staleAfter  time.Duration // heartbeat.stale_after
	attach      olc.AttachMode
	// started is the config the daemon started with: what the settings
	// only a restart changes (restartOnly) are running with.
	started *rules.Config
}

func limitsOf(cfg *rules.Config) limits {
	return limits{maxPorts: cfg.Datapath.MaxPorts, maxPrefixes: cfg.Datapath.MaxPrefixes, staleAfter: cfg.StaleAfter, attach: cfg.Attach, started: cfg}
}

// openDatapath loads and attaches the datapath; tests replace it with a
// load-only function.
var openDatapath = loader.Open

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
	d.base, d.cfg, d.fileData = l.cfg, l.cfg, l.data
	d.metrics = newMetrics(d)
	d.metrics.reg.MustRegister(&boundsCollector{d: d})
	if err := d.initLB(); err != nil {
		return nil, err
	}
	return d, nil
}

// readConfigFile reads the config file; tests replace it to make a read
// slow.
var readConfigFile = rules.ReadFile

// configLoad is the config file read and decoded off the tick loop, to be
// applied by it (applyLoad).
type configLoad struct {
	trigger string
	cfg     *rules.Config
	warns   []rules.Warning
	err     error
	data    []byte // the file's content, when it was read
}

// readConfig reads and decodes the config file, or returns the embedded
// default. It must not run on the tick loop: a read can block (a hung
// network file system) while the loop owes the datapath its heartbeat.
func (d *Daemon) readConfig(trigger string) configLoad {
	if d.opts.ConfigPath == "" {
		return configLoad{trigger: trigger, cfg: rules.Default()}
	}
	data, err := readConfigFile(d.opts.ConfigPath)
	if err != nil {
		return configLoad{trigger: trigger, err: err}
	}
	return parseConfig(trigger, d.opts.ConfigPath, data)
}

// parseConfig decodes the content of the config file.
func parseConfig(trigger, path string, data []byte) configLoad {
	cfg, warns, err := rules.Parse(data, path)
	return configLoad{trigger: trigger, cfg: cfg, warns: warns, err: err, data: data}
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
	if d.cfg.AdminSocket != "" {
		return d.cfg.AdminSocket
	}
	return api.DefaultSocket
}

func (d *Daemon) metricsAddress() string {
	switch a := d.opts.MetricsAddress; a {
	case "off":
		return ""
	case "":
		return d.cfg.MetricsAddress
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
	p := d.cfg.Locate(field, "", "")
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
	return d.cfg.DecisionLog
}

// Run attaches the datapath, serves the admin API and metrics, and runs the
// tick loop until ctx is done or SIGTERM/SIGINT arrives; then it detaches
// everything. SIGHUP and a change of the config file reload the config;
// SIGUSR1 (and SIGHUP) reopen the decision log.
// Errors: no interface to attach to, a failed load or attach (naming the
// interface and mode), a busy admin socket or metrics address.
func (d *Daemon) Run(ctx context.Context) (err error) {
	d.started = time.Now()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d.runCtx = ctx
	// Before anything slow: a SIGHUP that arrives while olcd attaches
	// (logrotate, a reload sent too early) would otherwise kill it, Go's
	// default for SIGHUP, and leave clsact filters behind.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// SIGUSR1 reopens the decision log only (logrotate's postrotate):
	// unlike SIGHUP it leaves the config and the live overrides alone.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
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
	if err := checkStartInterfaces(d.cfg, d.cfg.Interfaces); err != nil {
		return err
	}
	// What this start creates on disk goes again if it fails; the socket
	// directory also at a clean stop.
	var made leftovers
	started := false
	defer func() {
		if !started {
			made.remove()
		}
	}()
	if err := made.mkdirAll(filepath.Dir(d.adminSocket()), 0o700); err != nil {
		return d.atSetting("admin.socket", "admin-socket", d.opts.AdminSocket != "", fmt.Errorf("create admin socket directory: %w", err))
	}
	sockDirs := made
	ln, err := listenAdmin(d.adminSocket())
	if err != nil {
		return d.atSetting("admin.socket", "admin-socket", d.opts.AdminSocket != "", err)
	}
	defer sockDirs.remove()
	defer os.Remove(d.adminSocket())
	defer ln.Close()

	if p := d.decisionLogPath(); p != "" && p != "-" {
		if err := made.mkdirAll(filepath.Dir(p), 0o750); err != nil {
			return d.atSetting("decision_log", "decision-log", d.opts.DecisionLog != "", fmt.Errorf("create decision log directory: %w", err))
		}
		made.file(p)
	}
	if d.dlog, err = openDecisionLog(d.decisionLogPath(), nil); err != nil {
		return d.atSetting("decision_log", "decision-log", d.opts.DecisionLog != "", err)
	}
	d.dlog.onFold = func(kind string) { d.metrics.decisionsFolded.WithLabelValues(kind).Inc() }
	defer d.dlog.Close()

	// Every address is taken before the datapath attaches, so a busy one
	// fails the start without touching an interface.
	var mln net.Listener
	if addr := d.metricsAddress(); addr != "" {
		if mln, err = net.Listen("tcp", addr); err != nil {
			return d.atSetting("metrics.address", "metrics-address", d.opts.MetricsAddress != "",
				fmt.Errorf("listen for metrics on %s: %w", addr, err))
		}
		defer mln.Close()
	}

	stopLB, err := d.startLB()
	if err != nil {
		return err
	}
	defer stopLB()

	if err := d.start(); err != nil {
		return err
	}
	started = true
	defer func() {
		if cerr := d.dp.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("detach datapath: %w", cerr))
		}
		d.log.Info("datapath detached")
	}()

	// The admin API has a server and listener of its own: nothing done to
	// the metrics listener can delay `olcd set mode off`.
	admin := newHTTPServer(d.withLB(newAdminHandler(d, d.log)))
	go serveHTTP(admin, ln, func(err error) { d.log.Error("admin API stopped", "err", err) })
	defer admin.Close()
	go keepAdminSocket(ctx, admin, d.adminSocket(), d.log)

	if mln != nil {
		limit := metricsConnCap(nofile)
		msrv := newHTTPServer(d.withLB(d.withHealth(d.metrics.handler())))
		go serveHTTP(msrv, newCapListener(mln, limit, d.metrics.metricsRefused.Inc),
			func(err error) { d.log.Error("metrics endpoint stopped", "err", err) })
		defer msrv.Close()
		d.log.Info("metrics endpoint listening", "address", mln.Addr().String(),
			"max_connections", limit, "fd_limit", nofile)
	}

	// Reloads are read off the loop and come back decoded on loaded:
	// SIGHUPs through the reader below (a storm of them coalesced into one
	// read queued behind the running one), file changes from the watch.
	loaded := make(chan configLoad)
	hupReload := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hupReload:
			}
			l := d.readConfig("SIGHUP")
			select {
			case loaded <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	d.watchConfig(ctx, loaded)
	linksChanged := d.watchLinks(ctx)
	d.following = true

	d.tick()
	if err := sdNotify("READY=1"); err != nil {
		d.log.Warn("systemd notification failed", "err", err)
	}
	if d.opts.Ready != nil {
		close(d.opts.Ready)
	}
	d.log.Info("olcd running", "mode", d.cfg.Mode.String(), "config", d.configSource(),
		"interval", d.cfg.Interval, "admin_socket", d.adminSocket(), "ports", portNames(d.ports))

	d.ticker = time.NewTicker(d.cfg.Interval)
	defer d.ticker.Stop()
	discover := time.NewTicker(DiscoverEvery)
	defer discover.Stop()
	d.resetOnset()
	defer func() {
		if d.onsetTicker != nil {
			d.onsetTicker.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			_ = sdNotify("STOPPING=1")
			d.log.Info("stopping", "reason", context.Cause(ctx))
			return nil
		case <-d.ticker.C:
			d.tick()
		case <-d.onsetC():
			d.onsetCheck()
		case <-discover.C:
			if d.cfg.PortsAuto {
				d.rediscover()
			}
			// Link events can be lost (a full socket buffer): check anyway.
			d.syncInterfaces(true)
		case <-linksChanged:
			d.syncInterfaces(false)
			d.publish()
		case c := <-d.cmds:
			cerr := c.run()
			d.publish() // before the answer: a status read after it shows the change
			c.done <- cerr
		case <-hup:
			_ = sdNotify("RELOADING=1")
			select {
			case hupReload <- struct{}{}:
			default: // a read is queued already; it sees this file too
			}
			if err := d.dlog.Reopen(); err != nil {
				d.log.Error("reopen decision log", "err", err)
			}
		case l := <-loaded:
			_ = d.applyLoad(l) // a refusal is logged and shown in the status
			// Like an admin command, a reload shows in the status at once
			// (mode, overrides dropped), not only after the next tick.
			d.publish()
			if l.trigger == "SIGHUP" {
				_ = sdNotify("READY=1")
			}
		case <-usr1:
			if err := d.dlog.Reopen(); err != nil {
				d.log.Error("reopen decision log", "err", err)
			}
		}
	}
}

// start resolves interfaces and ports, creates the sampler and controller,
// and loads and attaches the datapath. On error nothing stays attached.
func (d *Daemon) start() error {
	ifaces, err := d.resolveInterfaces(d.cfg.Interfaces)
	if err != nil {
		return err
	}
	d.limits = limitsOf(d.cfg)
	d.ports = d.resolvePorts(d.cfg)
	smp, err := sampler.New(samplerConfig(d.cfg, tcpPorts(d.ports)), d.log.With("component", "sampler"))
	if err != nil {
		return fmt.Errorf("start sampler: %w", err)
	}
	d.smp = smp
	if d.ctrl, err = adaptive.New(d.cfg.ControllerConfig(controllerPorts(d.ports))); err != nil {
		return fmt.Errorf("start controller: %w", err)
	}
	lcfg := loaderConfig(d.cfg, ifaces)
	dp, err := openDatapath(lcfg, d.log.With("component", "loader"))
	if err != nil {
		return err
	}
	d.dp = dp
	if err := d.program(); err != nil {
		d.dp.Close()
		return err
	}
	for _, a := range d.dp.Attachments() {
		d.log.Info("attached", "interface", a.Interface, "hook", a.Hook, "mode", a.Mode)
	}
	return nil
}

// samplerConfig is the sampler's config for cfg on the real root "/",
// watching the accept queues of the protected TCP ports.
func samplerConfig(cfg *rules.Config, tcpPorts []uint16) sampler.Config {
	return sampler.Config{Root: "/", Cgroup: cfg.Cgroup, TCPPorts: slices.Clone(tcpPorts)}
}

// resolveInterfaces returns the configured interfaces, or the interfaces
// the embedded default protects (see netif.Default). Errors: none found.
func (d *Daemon) resolveInterfaces(configured []string) ([]string, error) {
	if len(configured) > 0 {
		return configured, nil
	}
	links, err := listLinks()
	if err != nil {
		return nil, err
	}
	out, skipped := netif.Default(links)
	for name, why := range skipped {
		d.log.Info("interface not protected by the embedded default", "interface", name, "reason", why)
	}
	if len(out) == 0 {
		return nil, d.cfg.ProblemAt("interfaces", "[] finds no interface to attach to: no non-loopback Ethernet interface is up",
			"list the interfaces to protect")
	}
	return out, nil
}

// loaderConfig maps the config onto the datapath's own types.
func loaderConfig(cfg *rules.Config, ifaces []string) loader.Config {
	lc := loader.Config{
		Interfaces:   ifaces,
		Attach:       olc.AttachMode(cfg.Attach),
		MaxPorts:     cfg.Datapath.MaxPorts,
		SYNTableSize: cfg.Datapath.SYNTableSize,
		MaxPrefixes:  cfg.Datapath.MaxPrefixes,
		MarkFwmark:   cfg.Action.Fwmark,
		StaleAfter:   cfg.StaleAfter,
		RejectRate:   rejectRate(cfg),
		RejectBurst:  cfg.Action.RejectBurst,
		// 0 turns timing off, as the loader reads it.
		ResponseSample: uint32(cfg.Datapath.ResponseSample),
		ResponsePorts:  cfg.Datapath.ResponsePorts,
		FlowTableSize:  cfg.Datapath.FlowTableSize,
	}
	// Without a configured DSCP the mark action sets only the fwmark; the
	// packet's own DSCP must not be overwritten with 0.
	lc.MarkDSCP, lc.MarkKeepDSCP = cfg.Action.DSCP, !cfg.Action.SetDSCP
	if cfg.Datapath.Selection == "even" {
		lc.Selection = loader.SelectEven
	}
	return lc
}

// rejectRate is the loader's form of action.reject_rate: negative answers
// none (the loader's 0 is its default).
func rejectRate(cfg *rules.Config) int {
	if cfg.Action.RejectRate == 0 {
		return -1
	}
	return cfg.Action.RejectRate
}

// restartOnly lists the settings a reload cannot change while attached; a
// reload that changes them applies everything else and says so.
func restartOnly(old, cfg *rules.Config) []string {
	var out []string
	if old.Attach != cfg.Attach {
		out = append(out, "attach")
	}
	// response_min_samples is read at every tick, not by the loader: a
	// reload or patch applies it.
	oldDP, newDP := old.Datapath, cfg.Datapath
	oldDP.ResponseMinSamples, newDP.ResponseMinSamples = 0, 0
	if oldDP != newDP {
		out = append(out, "datapath")
	}
	if old.Action.DSCP != cfg.Action.DSCP || old.Action.SetDSCP != cfg.Action.SetDSCP || old.Action.Fwmark != cfg.Action.Fwmark {
		out = append(out, "action.dscp/fwmark")
	}
	if old.StaleAfter != cfg.StaleAfter {
		out = append(out, "heartbeat.stale_after")
	}
	if old.MetricsAddress != cfg.MetricsAddress {
		out = append(out, "metrics.address")
	}
	if old.AdminSocket != cfg.AdminSocket {
		out = append(out, "admin.socket")
	}
	return out
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

// Status returns the status published after the last tick or command.
func (d *Daemon) Status() *api.Status {
	if st := d.freshStatus(); st != nil {
		return st
	}
	return &api.Status{Version: d.opts.Version, ConfigSource: d.configSource(), StartedAt: d.started}
}

// statusWait bounds how long a status request waits for the tick loop to
// build the status of the last tick; past it the previous one is returned
// (its updated_at says how old it is), so a busy loop never holds up
// `olcd status`.
const statusWait = 200 * time.Millisecond

// published is the status of the last tick and, beside it, what the
// metrics need that the document carries as text: the ports' keys, in the
// order of st.Ports.
type published struct {
	st   *api.Status
	keys []olc.PortKey
}

// freshStatus returns the status of the last tick, built by the tick loop
// on demand, or the last one built when the loop does not answer within
// statusWait; nil before the first.
func (d *Daemon) freshStatus() *api.Status {
	if p := d.freshPublished(); p != nil {
		return p.st
	}
	return nil
}

// freshPublished is freshStatus with the ports' keys.
func (d *Daemon) freshPublished() *published {
	if d.statusStale.Load() && d.runCtx != nil {
		ctx, cancel := context.WithTimeout(d.runCtx, statusWait)
		_ = d.do(ctx, func() error {
			if d.statusStale.Load() {
				d.publish()
			}
			return nil
		})
		cancel()
	}
	return d.status.Load()
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
	if m != olc.ModeOff || d.dp == nil || d.runCtx == nil {
		return d.do(ctx, fn)
	}
	// The kill switch does not wait for the tick loop, whatever holds it:
	// the datapath's global mode is written from here (the loader is safe
	// for concurrent use), and the override that makes it stick is handed
	// to the tick loop with a context of its own, so it is applied even
	// when this request gives up waiting.
	if err := d.dp.SetMode(olc.ModeOff); err != nil {
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

// Reload re-reads the config file (on the caller's goroutine) and applies
// it; live overrides are dropped. Errors: the file is unreadable, not a
// regular file, empty or invalid (the running config stays).
func (d *Daemon) Reload(ctx context.Context) error {
	l := d.readConfig("admin API")
	return d.do(ctx, func() error { return d.applyLoad(l) })
}

func (d *Daemon) override(kind, value string, doc []byte) error {
	cfg, warns, err := d.cfg.Patch(doc, "admin "+kind)
	if err == nil {
		// A live override that could not take effect would show in status
		// as applied while the datapath runs on the old values.
		if fields := restartOnly(d.cfg, cfg); len(fields) > 0 {
			err = fmt.Errorf("%s: not changed by a live override; they take effect only after a restart (edit the file and restart olcd)",
				strings.Join(fields, ", "))
		}
	}
	var list []liveOverride
	if err == nil {
		var o liveOverride
		if o, err = newOverride(kind, value, doc); err == nil {
			list, err = withOverride(d.overrides, o)
		}
	}
	if err != nil {
		d.log.Warn("live override refused: the running config stays", "kind", kind, "value", loggedValue(value), "err", err)
		d.dlog.Record("config_override_refused", "kind", kind, "value", loggedValue(value), "err", err.Error())
		return err
	}
	for _, w := range warns {
		d.log.Warn("config warning", "warning", w.String())
	}
	if err := d.apply(cfg); err != nil {
		return err
	}
	replaced := len(d.overrides) + 1 - len(list)
	d.overrides = list
	d.log.Info("live override applied", "kind", kind, "value", value, "replaced", replaced)
	d.dlog.Record("config_override", "kind", kind, "value", loggedValue(value), "mode", cfg.Mode.String(), "replaced", replaced)
	return nil
}

// applyLoad applies a config file read off the loop (or refuses it: a read
// or decode error, or a config apply refuses), counts the outcome and
// records it in the status and the decision log. On success the live
// overrides are dropped.
func (d *Daemon) applyLoad(l configLoad) error {
	src := d.configSource()
	if l.err == nil && l.trigger == fileChange && d.fileData != nil && bytes.Equal(l.data, d.fileData) {
		// Written again as it is in force (config management, an editor's
		// save without a change, a refused edit undone): nothing to apply,
		// and a kill switch set with `olcd set mode off` stays. SIGHUP and
		// `olcd reload` still drop the overrides.
		d.metrics.reloads.Inc() // read and valid: a successful reload that changes nothing
		d.refused = nil
		d.log.Info("config file written without a change: nothing to apply, live overrides kept", "source", src, "overrides_kept", len(d.overrides))
		return nil
	}
	err := l.err
	if err == nil {
		d.logWarnings(l.warns)
		err = d.apply(l.cfg)
	}
	if err != nil {
		d.metrics.reloadFailures.Inc()
		d.refused = refusal(l.trigger, err)
		// Logged here, whatever the trigger: a refusal through the admin
		// API reaches the journal too, not only its caller. A warning: the
		// daemon runs on, and the file is the operator's to fix.
		d.log.Warn("reload refused: the running config stays", "trigger", l.trigger, "err", err)
		d.dlog.Record("config_reload_failed", "trigger", l.trigger, "source", src, "err", err.Error())
		return err
	}
	d.metrics.reloads.Inc()
	d.refused = nil
	d.base, d.fileData = l.cfg, l.data
	dropped := len(d.overrides)
	d.overrides = nil
	d.log.Info("config reloaded", "trigger", l.trigger, "source", src, "overrides_dropped", dropped)
	d.dlog.Record("config_reload", "trigger", l.trigger, "source", src, "overrides_dropped", dropped, "mode", l.cfg.Mode.String())
	return nil
}

// apply makes cfg the config in force: the controller, sampler and datapath
// take it before the next tick. Settings that need a restart are kept at
// their running values and named in the log. A config the running datapath
// cannot hold is refused before anything changes; if writing the datapath
// fails anyway, the previous config is restored and written again, so an
// error always means that the running config stays.
func (d *Daemon) apply(cfg *rules.Config) error {
	old, oldPorts, oldCtrl, oldSmp, oldLast := d.cfg, d.ports, d.ctrl, d.smp, d.last.decision.Ports
	if d.following {
		var added []string
		for _, n := range cfg.Interfaces {
			if !slices.Contains(old.Interfaces, n) {
				added = append(added, n)
			}
		}
		if err := checkListed(cfg, added); err != nil {
			return err
		}
	}
	ports := d.resolvePorts(cfg)
	if err := d.limits.fits(cfg, ports); err != nil {
		return err
	}
	// A decision log that cannot be opened refuses the config before
	// anything changes: kept running on the old file, a live override or
	// reload would show as in force while the log it names gets nothing.
	var newLog *os.File
	switchLog := old.DecisionLog != cfg.DecisionLog && d.opts.DecisionLog == ""
	if switchLog {
		f, err := openLogFile(cfg.DecisionLog)
		if err != nil {
			return cfg.ProblemAt("decision_log", err.Error(), "the running decision log stays")
		}
		newLog = f
		defer func() {
			if newLog != nil { // not adopted: the config was refused
				newLog.Close()
			}
		}()
	}
	// So is an agent address olcd cannot listen on (busy, not local): the
	// running listener stays and the reload says why, instead of reporting
	// success while the agent stays where it was.
	var agentLn net.Listener
	moveAgent := d.following && cfg.LB.Agent.Address != d.lb.addr
	if moveAgent {
		ln, err := openAgent(cfg.LB.Agent.Address)
		if err != nil {
			return cfg.ProblemAt("lb.agent.address", err.Error(), "the running agent listener stays")
		}
		agentLn = ln
		defer func() {
			if agentLn != nil { // not adopted: the config was refused
				agentLn.Close()
			}
		}()
	}
	if err := d.ctrl.Reconfigure(cfg.ControllerConfig(controllerPorts(ports))); err != nil {
		return fmt.Errorf("reconfigure controller: %w", err)
	}
	if old.Cgroup != cfg.Cgroup {
		smp, err := sampler.New(samplerConfig(cfg, tcpPorts(ports)), d.log.With("component", "sampler"))
		if err != nil {
			_ = d.ctrl.Reconfigure(old.ControllerConfig(controllerPorts(oldPorts)))
			return fmt.Errorf("restart sampler: %w", err)
		}
		d.smp = smp
	} else {
		d.smp.SetTCPPorts(tcpPorts(ports))
	}
	if old.Mode == olc.ModeOff && cfg.Mode != olc.ModeOff {
		// Leaving the kill switch starts from p = 0: while off, nothing was
		// shed, so what the controller learnt does not describe this node
		// under shedding.
		ctrl, err := adaptive.New(cfg.ControllerConfig(controllerPorts(ports)))
		if err != nil {
			d.smp = oldSmp
			d.smp.SetTCPPorts(tcpPorts(oldPorts))
			_ = d.ctrl.Reconfigure(old.ControllerConfig(controllerPorts(oldPorts)))
			return fmt.Errorf("restart controller: %w", err)
		}
		d.ctrl = ctrl
		// program() below carries the last decision's p over; that was
		// the old controller's, computed while off, and must not reach
		// the datapath.
		d.last.decision.Ports = nil
	}
	d.cfg = cfg
	d.ports = ports
	if err := d.program(); err != nil {
		d.cfg, d.ports, d.ctrl, d.smp, d.last.decision.Ports = old, oldPorts, oldCtrl, oldSmp, oldLast
		d.smp.SetTCPPorts(tcpPorts(oldPorts))
		rerr := d.ctrl.Reconfigure(old.ControllerConfig(controllerPorts(oldPorts)))
		if rerr == nil {
			rerr = d.program()
		}
		if rerr != nil {
			return errors.Join(err, fmt.Errorf("restore the running config: %w", rerr))
		}
		return err
	}
	if old.Interval != cfg.Interval && d.ticker != nil {
		d.ticker.Reset(cfg.Interval)
	}
	if d.ticker != nil && (old.Interval != cfg.Interval || old.Controller.OnsetInterval != cfg.Controller.OnsetInterval) {
		d.resetOnset()
	}
	if moveAgent {
		ln := agentLn
		agentLn = nil
		d.adoptAgent(cfg.LB.Agent.Address, ln)
	}
	if switchLog {
		f := newLog
		newLog = nil
		if err := d.dlog.adopt(cfg.DecisionLog, f); err != nil {
			d.log.Warn("close the previous decision log", "err", err)
		}
	}
	if d.following && !slices.Equal(old.Interfaces, cfg.Interfaces) {
		d.syncInterfaces(false)
	}
	// Against what runs, not the previous file: a value changed back to
	// the running one needs no restart, and one left changed still does.
	if d.limits.started != nil {
		if fields := restartOnly(d.limits.started, cfg); len(fields) > 0 {
			d.log.Warn("settings changed that take effect only after a restart", "fields", fields)
		}
	}
	return nil
}

// fits checks that the running datapath can carry cfg with these ports:
// map sizes and the heartbeat's stale-after are fixed at start, so a config
// that raises them in the same change as it uses them must wait for a
// restart. Errors name the setting and both values.
func (l limits) fits(cfg *rules.Config, ports []portEntry) error {
	var probs []rules.Problem
	if len(ports) > l.maxPorts {
		probs = append(probs, cfg.Locate("ports", fmt.Sprintf("%d ports exceed the running datapath.max_ports %d", len(ports), l.maxPorts),
			"a new max_ports takes effect only after a restart"))
	}
	var n4, n6 int
	for _, p := range cfg.Exceptions.Sources {
		if p.Addr().Is4() {
			n4++
		} else {
			n6++
		}
	}
	if n4 > l.maxPrefixes || n6 > l.maxPrefixes {
		probs = append(probs, cfg.Locate("exceptions.sources", fmt.Sprintf("%d IPv4 and %d IPv6 prefixes exceed the running datapath.max_prefixes %d per family",
			n4, n6, l.maxPrefixes), "a new max_prefixes takes effect only after a restart"))
	}
	if cfg.Interval >= l.staleAfter {
		probs = append(probs, cfg.Locate("interval", fmt.Sprintf("%v is not shorter than the running heartbeat.stale_after %v: the datapath would fail open between two ticks",
			cfg.Interval, l.staleAfter), "a new stale_after takes effect only after a restart"))
	}
	if len(probs) == 0 {
		return nil
	}
	return &rules.ValidationError{Problems: probs}
}

// program writes mode, exceptions and port policies into the datapath.
// Probabilities already in force are kept (they change at the next tick);
// in mode off they are written as 0.
func (d *Daemon) program() error {
	cfg := d.cfg
	if err := d.dp.SetExceptions(cfg.ExemptPorts(), cfg.Exceptions.Sources); err != nil {
		return fmt.Errorf("set exceptions: %w", err)
	}
	current := map[olc.PortKey]float64{}
	shed := map[olc.PortKey]bool{}
	for _, pd := range d.last.decision.Ports {
		current[pd.Key] = pd.DropProbability
		shed[pd.Key] = pd.ShedRetransmits
	}
	var pol []loader.PortPolicy
	for _, p := range d.ports {
		pp := loader.PortPolicy{
			Key:    p.key,
			Mode:   p.mode,
			Action: p.action,
			Class:  p.class,
		}
		if cfg.Mode != olc.ModeOff {
			pp.DropProbability, pp.ShedRetransmits = current[p.key], shed[p.key]
		}
		pol = append(pol, pp)
	}
	// The global datapath mode only caps the ports' modes; a port's own
	// mode decides, so one port can be enforced while the rest observe.
	if err := d.dp.SetRejectLimit(rejectRate(cfg), cfg.Action.RejectBurst); err != nil {
		return fmt.Errorf("set reject limit: %w", err)
	}
	global := olc.ModeEnforce
	if cfg.Mode == olc.ModeOff {
		global = olc.ModeOff
	}
	if global == olc.ModeOff {
		// The kill switch must not wait for the policies.
		if err := d.dp.SetMode(global); err != nil {
			return fmt.Errorf("set datapath mode: %w", err)
		}
	}
	if err := d.dp.SetPolicies(pol); err != nil {
		return fmt.Errorf("set port policies: %w", err)
	}
	if err := d.dp.SetMode(global); err != nil {
		return fmt.Errorf("set datapath mode: %w", err)
	}
	return d.dp.Heartbeat()
}

// The config file watch's timing. settleAfter coalesces a burst of events
// (an editor's write, rename and chmod). quietPeriod is how long a file
// written in place must keep the same content before it is read as
// complete: a writer that truncates first and writes later (`(sleep 0.6;
// cat new.yaml) > olcd.yaml`, a slow config management run) leaves it
// empty or partial in between, and its next write ends the wait.
const (
	settleAfter = 200 * time.Millisecond
	quietPeriod = time.Second
)

// fileChange is the trigger of a reload by the config file watch.
const fileChange = "file change"

// rewatchEvery is how often the watch looks for the config file's
// directory to return after it was removed or renamed away (the inotify
// watch goes with the directory, or follows it to its new name).
var rewatchEvery = time.Second

// watchConfig sends the config file, read and decoded, to out after each
// complete write, until ctx is done. The directory is watched, not the
// file, because editors and config management replace files by rename,
// which a watch on the file would miss. A file renamed (or linked) into
// place is complete: it is read settleAfter after the last event. A file
// written in place, or one that appears empty, is read when its content
// has not changed for quietPeriod after settling. Removing the file, or
// renaming it away, is not acted on (there is nothing to load; SIGHUP
// reports it). The directory removed or renamed away is watched again once
// it is back (`rm -rf /etc/olcd; mkdir /etc/olcd; …`), and a file it then
// holds is read as one written in place.
func (d *Daemon) watchConfig(ctx context.Context, out chan<- configLoad) {
	if d.opts.ConfigPath == "" {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		d.log.Warn("config file watch unavailable; reload with SIGHUP", "err", err)
		return
	}
	path := d.opts.ConfigPath
	dir := dirOf(path)
	if err := w.Add(dir); err != nil {
		d.log.Warn("config file watch unavailable; reload with SIGHUP", "dir", dir, "err", err)
		w.Close()
		return
	}
	sw := newConfigWatch(path)
	cw := completeWrite{read: readConfigFile, path: path}
	go func() {
		defer w.Close()
		// Armed by events only; Reset needs no drain since Go 1.23.
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		var rewatch *time.Ticker
		var rewatchC <-chan time.Time // nil while the directory is watched
		defer func() {
			if rewatch != nil {
				rewatch.Stop()
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if sameFile(ev.Name, dir) && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 && rewatchC == nil {
					_ = w.Remove(dir) // a renamed directory is still watched under its new name
					d.log.Warn("config file directory removed or renamed; watching for it to return (SIGHUP reloads meanwhile)", "dir", dir)
					rewatch = time.NewTicker(rewatchEvery)
					rewatchC = rewatch.C
					continue
				}
				if sw.changed(ev) {
					cw.event(ev.Op.Has(fsnotify.Write))
					timer.Reset(settleAfter)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				// Events may be lost (a full queue): read the file once it
				// is quiet, as if it was written in place.
				d.log.Warn("config file watch error", "err", err)
				cw.event(true)
				timer.Reset(settleAfter)
			case <-rewatchC:
				if err := w.Add(dir); err != nil {
					continue // not back yet
				}
				rewatch.Stop()
				rewatch, rewatchC = nil, nil
				d.log.Info("config file directory is back; watching it again", "dir", dir)
				// A file written before the watch was in place made no
				// event: read it as one written in place (complete once
				// quiet). Without one, its creation is an event.
				sw.target = resolveConfig(path)
				if _, err := os.Stat(path); err == nil {
					cw.event(true)
					timer.Reset(settleAfter)
				}
			case <-timer.C:
				data, done, err := cw.check()
				if !done {
					timer.Reset(quietPeriod)
					continue
				}
				l := configLoad{trigger: fileChange, err: err}
				if err == nil {
					l = parseConfig(fileChange, path, data)
				}
				select {
				case out <- l:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
}

// completeWrite decides when a changed config file is completely written.
type completeWrite struct {
	read    func(path string) ([]byte, error)
	path    string
	inPlace bool // a write event since the last read was acted on
	// The last read, while waiting for the content to stay the same.
	have    bool
	data    []byte
	errText string
}

// event notes a change of the file; written tells a write in place from a
// rename into place (or a new link, directory, FIFO).
func (c *completeWrite) event(written bool) {
	c.inPlace = c.inPlace || written
	c.have = false
}

// check reads the file once the events settled. done reports that the
// write is complete and data (or err) is what to load: at once for a file
// renamed into place that is not blank, else when the content equals the
// previous check's (the caller checks again after quietPeriod).
func (c *completeWrite) check() (data []byte, done bool, err error) {
	data, err = c.read(c.path)
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	switch {
	case !c.inPlace && (err != nil || len(bytes.TrimSpace(data)) > 0):
		done = true
	case c.have && errText == c.errText && bytes.Equal(data, c.data):
		done = true
	}
	if done {
		c.inPlace, c.have, c.data, c.errText = false, false, nil, ""
		return data, true, err
	}
	c.have, c.data, c.errText = true, data, errText
	return nil, false, nil
}

// refusal describes a refused reload for the status.
func refusal(trigger string, err error) *api.ReloadFailure {
	rf := &api.ReloadFailure{At: time.Now(), Trigger: trigger, Error: err.Error()}
	var pl problemLister
	if errors.As(err, &pl) {
		rf.Problems = pl.ProblemLines()
	}
	return rf
}

// portNames renders ports for the log: ["tcp/80", "tcp/443"].
func portNames(ports []portEntry) []string {
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = p.key.String()
	}
	return out
}
