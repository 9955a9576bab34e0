package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/sampler"
)

// Reconfiguration: a reload of the file, a live override or a change of
// the discovered ports makes a new config (and ports) the one in force.
// plan works out what differs from what runs and opens what the change
// needs before anything is touched; reconfigure applies it in one place,
// and a failure part-way is undone by one rollback (engine.undo), so an
// error always means that the running config stays.

// configState is where the config in force came from, as reconfiguration
// keeps it. Owned by the tick loop.
type configState struct {
	overrides []liveOverride     // one per field path, oldest first (overrides.go)
	refused   *api.ReloadFailure // the last refused reload of the file, until one succeeds
	// fileData is the content of the config file in force (nil for the
	// embedded default), and fileDigest what it sets (rules.Config.Digest):
	// a file change that sets the same again, comments or layout aside,
	// changes nothing, and must not drop the live overrides (the kill switch).
	fileData   []byte
	fileDigest string
	// file is fileData's config (the embedded default's when nil): the
	// live overrides replayed onto it give the config in force.
	file *rules.Config
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

// override applies a live override (kind "mode" or "patch", value as
// sent, doc the partial document) on top of the config in force.
func (d *Daemon) override(kind, value string, doc []byte) error {
	cfg, warns, err := d.eng.cfg.Patch(doc, "admin "+kind)
	if err == nil {
		// A live override that could not take effect would show in status
		// as applied while the datapath runs on the old values.
		if fields := restartOnly(d.eng.cfg, cfg); len(fields) > 0 {
			err = fmt.Errorf("%s: not changed by a live override; they take effect only after a restart (edit the file and restart olcd)",
				strings.Join(fields, ", "))
		}
	}
	var list []liveOverride
	if err == nil {
		var o liveOverride
		if o, err = newOverride(kind, value, doc); err == nil {
			if list, err = withOverride(d.conf.overrides, o); err == nil {
				list = withoutSpentReset(list, o, d.conf.file, cfg)
			}
		}
	}
	if err != nil {
		d.log.Warn("live override refused: the running config stays", "kind", kind, "value", loggedValue(value), "err", err)
		d.eng.dlog.Record("config_override_refused", "kind", kind, "value", loggedValue(value), "err", err.Error())
		return err
	}
	for _, w := range warns {
		d.log.Warn("config warning", "warning", w.String())
	}
	if err := d.apply(cfg); err != nil {
		return err
	}
	replaced := len(d.conf.overrides) + 1 - len(list)
	d.conf.overrides = list
	d.log.Info("live override applied", "kind", kind, "value", value, "replaced", replaced)
	d.eng.dlog.Record("config_override", "kind", kind, "value", loggedValue(value), "mode", cfg.Mode.String(), "replaced", replaced)
	return nil
}

// applyLoad applies a config file read off the loop (or refuses it: a read
// or decode error, or a config apply refuses), counts the outcome and
// records it in the status and the decision log. On success the live
// overrides are dropped.
func (d *Daemon) applyLoad(l configLoad) error {
	src := d.configSource()
	digest := ""
	if l.err == nil {
		digest = l.cfg.Digest()
	}
	if digest != "" && l.trigger == fileChange && d.conf.fileData != nil && digest == d.conf.fileDigest {
		// Written again as it is in force (config management, an editor's
		// save without a change or with a new comment, a refused edit
		// undone): nothing to apply, and a kill switch set with `olcd set
		// mode off` stays. SIGHUP and `olcd reload` still drop the overrides.
		d.metrics.reloads.Inc() // read and valid: a successful reload that changes nothing
		d.conf.refused, d.conf.fileData, d.conf.file = nil, l.data, l.cfg
		d.log.Info("config file written without a change: nothing to apply, live overrides kept", "source", src, "overrides_kept", len(d.conf.overrides))
		return nil
	}
	err := l.err
	if err == nil {
		d.logWarnings(l.warns)
		err = d.apply(l.cfg)
	}
	if err != nil {
		d.metrics.reloadFailures.Inc()
		d.conf.refused = refusal(l.trigger, err)
		// Logged here, whatever the trigger: a refusal through the admin
		// API reaches the journal too, not only its caller. A warning: the
		// daemon runs on, and the file is the operator's to fix.
		d.log.Warn("reload refused: the running config stays", "trigger", l.trigger, "err", err)
		d.eng.dlog.Record("config_reload_failed", "trigger", l.trigger, "source", src, "err", err.Error())
		return err
	}
	d.metrics.reloads.Inc()
	d.conf.refused = nil
	d.conf.fileData, d.conf.fileDigest, d.conf.file = l.data, digest, l.cfg
	dropped := len(d.conf.overrides)
	d.conf.overrides = nil
	d.log.Info("config reloaded", "trigger", l.trigger, "source", src, "overrides_dropped", dropped)
	d.eng.dlog.Record("config_reload", "trigger", l.trigger, "source", src, "overrides_dropped", dropped, "mode", l.cfg.Mode.String())
	return nil
}

// apply makes cfg the config in force: the controller, sampler and datapath
// take it before the next tick. Settings that need a restart are kept at
// their running values and named in the log. A config the running datapath
// cannot hold is refused before anything changes; if writing the datapath
// fails anyway, the previous config is restored and written again.
func (d *Daemon) apply(cfg *rules.Config) error {
	return d.reconfigure(cfg, func() []loader.PortPolicy { return d.eng.resolvePorts(cfg) })
}

// rediscover refreshes the ports under ports: auto and reprograms when the
// set changed.
func (d *Daemon) rediscover() {
	e := d.eng
	ports := e.resolvePorts(e.cfg)
	if slices.Equal(ports, e.ports) {
		return
	}
	added, removed := diffPorts(e.ports, ports)
	// The controller must not produce probabilities for ports without a
	// policy: a failure keeps the ports the datapath has.
	if err := d.reconfigure(e.cfg, func() []loader.PortPolicy { return ports }); err != nil {
		d.log.Error("program discovered ports; keeping the previous ones", "err", err)
		return
	}
	d.log.Info("protected ports changed", "added", added, "removed", removed)
	e.dlog.Record("ports_changed", "added", added, "removed", removed)
	d.publish()
}

// change is what making cfg (with ports) the config in force changes in
// the running daemon, worked out by plan before anything is touched.
type change struct {
	old, cfg *rules.Config
	ports    []loader.PortPolicy

	newSampler    bool     // the watched cgroup changed
	newController bool     // leaving mode off: the controller starts again from p = 0
	interval      bool     // the tick's period changed
	onset         bool     // the onset check's period, or the tick's, changed
	interfaces    bool     // the interface list changed while the links are followed
	restart       []string // settings that take effect only after a restart (restartOnly)

	// Opened by plan, so that one olcd cannot open refuses the config
	// before anything changes: adopted at the end, closed on a refusal.
	switchLog bool
	log       *os.File
	moveAgent bool
	agent     net.Listener
}

// plan checks cfg against what runs and opens what it needs. ports is
// called once the interfaces are checked (a discovery, or the ports just
// discovered). Errors: a listed interface that does not exist, a config the
// running datapath cannot hold (fits), a decision log or agent address
// that cannot be opened; nothing has changed then.
func (d *Daemon) plan(cfg *rules.Config, ports func() []loader.PortPolicy) (*change, error) {
	e := d.eng
	old := e.cfg
	c := &change{old: old, cfg: cfg}
	if d.links.following {
		var added []string
		for _, n := range cfg.Interfaces {
			if !slices.Contains(old.Interfaces, n) {
				added = append(added, n)
			}
		}
		if err := checkListed(cfg, added); err != nil {
			return nil, err
		}
	}
	c.ports = ports()
	if err := e.limits.fits(cfg, c.ports); err != nil {
		return nil, err
	}
	// A decision log that cannot be opened refuses the config: kept
	// running on the old file, a live override or reload would show as in
	// force while the log it names gets nothing.
	if c.switchLog = old.DecisionLog != cfg.DecisionLog && d.opts.DecisionLog == ""; c.switchLog {
		f, err := openLogFile(cfg.DecisionLog)
		if err != nil {
			return nil, cfg.ProblemAt("decision_log", err.Error(), "the running decision log stays")
		}
		c.log = f
	}
	// So is an agent address olcd cannot listen on (busy, not local): the
	// running listener stays and the reload says why, instead of reporting
	// success while the agent stays where it was.
	if c.moveAgent = d.links.following && cfg.LB.Agent.Address != d.lb.addr; c.moveAgent {
		ln, err := openAgent(cfg.LB.Agent.Address)
		if err != nil {
			c.close()
			return nil, cfg.ProblemAt("lb.agent.address", err.Error(), "the running agent listener stays")
		}
		c.agent = ln
	}
	c.newSampler = old.Cgroup != cfg.Cgroup
	c.newController = old.Mode == olc.ModeOff && cfg.Mode != olc.ModeOff
	c.interval = old.Interval != cfg.Interval
	c.onset = c.interval || old.Controller.OnsetInterval != cfg.Controller.OnsetInterval
	c.interfaces = d.links.following && !slices.Equal(old.Interfaces, cfg.Interfaces)
	// Against what runs, not the previous file: a value changed back to
	// the running one needs no restart, and one left changed still does.
	if cfg != old && e.limits.started != nil {
		c.restart = restartOnly(e.limits.started, cfg)
	}
	return c, nil
}

// close releases what plan opened and the change did not adopt.
func (c *change) close() {
	if c.log != nil {
		c.log.Close()
	}
	if c.agent != nil {
		c.agent.Close()
	}
}

// reconfigure makes cfg, with the ports the function returns, the config
// in force: one plan, one application, one rollback.
func (d *Daemon) reconfigure(cfg *rules.Config, ports func() []loader.PortPolicy) error {
	c, err := d.plan(cfg, ports)
	if err != nil {
		return err
	}
	e := d.eng
	was := e.running()
	if done, err := e.take(c); err != nil {
		c.close()
		if rerr := e.undo(was, done); rerr != nil {
			return errors.Join(err, fmt.Errorf("restore the running config: %w", rerr))
		}
		return err
	}
	// Nothing below fails: the change is taken.
	if e.ticker != nil && c.interval {
		e.ticker.Reset(cfg.Interval)
	}
	if e.ticker != nil && c.onset {
		e.resetOnset()
	}
	if c.moveAgent {
		d.lb.adopt(cfg.LB.Agent.Address, c.agent)
	}
	if c.switchLog {
		if err := e.dlog.adopt(cfg.DecisionLog, c.log); err != nil {
			d.log.Warn("close the previous decision log", "err", err)
		}
	}
	if c.interfaces {
		d.syncInterfaces(false)
	}
	if len(c.restart) > 0 {
		d.log.Warn("settings changed that take effect only after a restart", "fields", c.restart)
	}
	return nil
}

// running is what the engine runs with, as undo restores it.
type running struct {
	cfg       *rules.Config
	ports     []loader.PortPolicy
	ctrl      *adaptive.Controller
	smp       snapshotter
	lastPorts []adaptive.PortDecision // the last decision's p, which program carries over
}

func (e *engine) running() running {
	return running{cfg: e.cfg, ports: e.ports, ctrl: e.ctrl, smp: e.smp, lastPorts: e.last.decision.Ports}
}

// step is how far take got: what undo has to reverse.
type step int

const (
	stepNone       step = iota
	stepController      // the running controller took the new ports and settings
	stepSampler         // the sampler watches the new ports (or a new one runs)
	stepProgrammed      // the datapath was (partly) written
)

// take makes the engine run with c: the controller, the sampler, then the
// datapath. On error done says how far it got.
func (e *engine) take(c *change) (done step, err error) {
	if err := e.ctrl.Reconfigure(c.cfg.ControllerConfig(controllerPorts(c.ports))); err != nil {
		return stepNone, fmt.Errorf("reconfigure controller: %w", err)
	}
	if c.newSampler {
		smp, err := sampler.New(samplerConfig(c.cfg, tcpPorts(c.ports)), e.log.With("component", "sampler"))
		if err != nil {
			return stepController, fmt.Errorf("restart sampler: %w", err)
		}
		e.smp = smp
	} else {
		e.smp.SetTCPPorts(tcpPorts(c.ports))
	}
	if c.newController {
		// Leaving the kill switch starts from p = 0: while off, nothing
		// was shed, so what the controller learnt does not describe this
		// node under shedding.
		ctrl, err := adaptive.New(c.cfg.ControllerConfig(controllerPorts(c.ports)))
		if err != nil {
			return stepSampler, fmt.Errorf("restart controller: %w", err)
		}
		e.ctrl = ctrl
		// program() carries the last decision's p over; that was the old
		// controller's, computed while off, and must not reach the
		// datapath.
		e.last.decision.Ports = nil
	}
	e.cfg, e.ports = c.cfg, c.ports
	return stepProgrammed, e.program()
}

// undo puts back what ran before take got as far as done, and writes the
// datapath again when take had written it.
func (e *engine) undo(r running, done step) error {
	e.cfg, e.ports, e.ctrl, e.smp, e.last.decision.Ports = r.cfg, r.ports, r.ctrl, r.smp, r.lastPorts
	if done >= stepSampler {
		e.smp.SetTCPPorts(tcpPorts(r.ports))
	}
	if done < stepController {
		return nil
	}
	if err := e.ctrl.Reconfigure(r.cfg.ControllerConfig(controllerPorts(r.ports))); err != nil {
		return err
	}
	if done >= stepProgrammed {
		return e.program()
	}
	return nil
}

// fits checks that the running datapath can carry cfg with these ports:
// map sizes and the heartbeat's stale-after are fixed at start, so a config
// that raises them in the same change as it uses them must wait for a
// restart. Errors name the setting and both values.
func (l limits) fits(cfg *rules.Config, ports []loader.PortPolicy) error {
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

// refusal describes a refused reload for the status.
func refusal(trigger string, err error) *api.ReloadFailure {
	rf := &api.ReloadFailure{At: time.Now(), Trigger: trigger, Error: err.Error()}
	var pl problemLister
	if errors.As(err, &pl) {
		rf.Problems = pl.ProblemLines()
	}
	return rf
}
