package daemon

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/netif"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/sampler"
)

// engine is what the tick and the onset check between ticks touch: the
// config in force, the protected ports, the sampler, the controller, the
// datapath and what the last tick saw. It is the only writer of the
// datapath's maps (program, tick, the onset check; the kill switch's one
// write, forceOff, is the exception that may run off the loop). Every other
// method runs on the tick loop's goroutine; the shell (Daemon) drives it and
// reconfiguration (reconfigure.go) swaps what it runs with.
type engine struct {
	log     *slog.Logger
	metrics *metrics
	dlog    *decisionLog

	cfg    *rules.Config       // what is in force: the file's config and the live overrides
	ports  []loader.PortPolicy // the protected ports, as resolvePorts found them (p = 0)
	limits limits              // what the loaded datapath was sized and set up with
	found  discovery           // the last discovery of listening ports (ports.go)
	smp    snapshotter
	ctrl   *adaptive.Controller
	dp     datapath

	prev    loader.Stats   // the last tick's read of the datapath
	last    tickResult     // what the last tick saw and decided
	ticks   uint64         // ticks run
	changes pendingChanges // probability changes not yet in the decision log
	ticker  *time.Ticker   // the tick's timer; nil until the loop starts
	onset   onset          // the onset check between ticks (onset.go)

	// pinDir is the bpffs directory of the pinned datapath ("" none);
	// adopted the policies of a pinned datapath taken over at start.
	pinDir  string
	adopted []loader.PortPolicy
	// adoptedFresh says the taken-over datapath's heartbeat was fresh:
	// its drop probabilities were in force when this daemon took over.
	adoptedFresh bool
	// capping holds the ports whose static caps refused new work in the
	// last tick (recordCaps).
	capping map[olc.PortKey]bool
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
	SetRetransmits(m map[olc.PortKey]olc.Retransmits) error
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
	// Release leaves the datapath attached and pinned (a restart).
	Release() error
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

// start resolves interfaces and ports, creates the sampler and controller,
// and loads and attaches the datapath. On error nothing stays attached.
func (e *engine) start() error {
	ifaces, err := e.resolveInterfaces(e.cfg.Interfaces)
	if err != nil {
		return err
	}
	e.limits = limitsOf(e.cfg)
	e.ports = e.resolvePorts(e.cfg)
	smp, err := sampler.New(samplerConfig(e.cfg, tcpPorts(e.ports)), e.log.With("component", "sampler"))
	if err != nil {
		return fmt.Errorf("start sampler: %w", err)
	}
	e.smp = smp
	if e.ctrl, err = adaptive.New(e.cfg.ControllerConfig(controllerPorts(e.ports))); err != nil {
		return fmt.Errorf("start controller: %w", err)
	}
	lcfg := loaderConfig(e.cfg, ifaces)
	lcfg.PinDir = e.pinDir
	dp, err := openDatapath(lcfg, e.log.With("component", "loader"))
	if err != nil {
		return err
	}
	e.dp = dp
	if dp.Adopted() {
		// The old daemon's probabilities stay in force until the first
		// tick (program writes what e.last holds).
		e.adopted, e.adoptedFresh = dp.Policies(), dp.AdoptedFresh()
		e.adoptPolicies(e.adopted)
		e.log.Info("took over the pinned datapath", "pin_dir", e.pinDir, "ports", len(e.adopted))
	}
	if err := e.program(); err != nil {
		if dp.Adopted() {
			_ = e.dp.Release() // leave the old daemon's datapath as it was; err is the start's error
		} else {
			e.dp.Close()
		}
		return err
	}
	for _, a := range e.dp.Attachments() {
		e.log.Info("attached", "interface", a.Interface, "hook", a.Hook, "mode", a.Mode)
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
func (e *engine) resolveInterfaces(configured []string) ([]string, error) {
	if len(configured) > 0 {
		return configured, nil
	}
	links, err := listLinks()
	if err != nil {
		return nil, err
	}
	out, skipped := netif.Default(links)
	for name, why := range skipped {
		e.log.Info("interface not protected by the embedded default", "interface", name, "reason", why)
	}
	if len(out) == 0 {
		return nil, e.cfg.ProblemAt("interfaces", "[] finds no interface to attach to: no non-loopback Ethernet interface is up",
			"list the interfaces to protect")
	}
	return out, nil
}

// loaderConfig maps the config onto the datapath's own types.
func loaderConfig(cfg *rules.Config, ifaces []string) loader.Config {
	lc := loader.Config{
		Interfaces:   ifaces,
		Attach:       cfg.Attach,
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

// program writes mode, exceptions and port policies into the datapath.
// Probabilities already in force are kept (they change at the next tick);
// in mode off they are written as 0.
func (e *engine) program() error {
	cfg := e.cfg
	if err := e.dp.SetExceptions(cfg.ExemptPorts(), cfg.Exceptions.Sources); err != nil {
		return fmt.Errorf("set exceptions: %w", err)
	}
	current := map[olc.PortKey]adaptive.PortDecision{}
	for _, pd := range e.last.decision.Ports {
		current[pd.Key] = pd
	}
	pol := slices.Clone(e.ports)
	for i, p := range pol {
		if cfg.Mode != olc.ModeOff {
			pol[i].DropProbability, pol[i].Retransmits = current[p.Key].DropProbability, current[p.Key].Retransmits
		}
	}
	// The global datapath mode only caps the ports' modes; a port's own
	// mode decides, so one port can be enforced while the rest observe.
	if err := e.dp.SetRejectLimit(rejectRate(cfg), cfg.Action.RejectBurst); err != nil {
		return fmt.Errorf("set reject limit: %w", err)
	}
	global := olc.ModeEnforce
	if cfg.Mode == olc.ModeOff {
		global = olc.ModeOff
	}
	if global == olc.ModeOff {
		// The kill switch must not wait for the policies.
		if err := e.dp.SetMode(global); err != nil {
			return fmt.Errorf("set datapath mode: %w", err)
		}
	}
	if err := e.dp.SetPolicies(pol); err != nil {
		return fmt.Errorf("set port policies: %w", err)
	}
	if cs, ok := e.dp.(capSetter); ok {
		if err := cs.SetSourceCaps(sourceCaps(cfg)); err != nil {
			return fmt.Errorf("set source caps: %w", err)
		}
	}
	if err := e.dp.SetMode(global); err != nil {
		return fmt.Errorf("set datapath mode: %w", err)
	}
	return e.dp.Heartbeat()
}

// forceOff is the kill switch's write: the datapath's global mode off,
// from whatever goroutine asks (the loader is safe for concurrent use), so
// that `olcd set mode off` never waits behind a tick. The override that
// makes it stick is applied by the tick loop.
func (e *engine) forceOff() error {
	return e.dp.SetMode(olc.ModeOff)
}

// staleAfter is the heartbeat.stale_after the datapath runs with: the
// value at the start (a reload cannot change it), which /healthz, the
// status and olcd_heartbeat_stale_after_seconds must report, not the file's.
func (e *engine) staleAfter() time.Duration {
	if e.limits.staleAfter > 0 {
		return e.limits.staleAfter
	}
	return e.cfg.StaleAfter
}
