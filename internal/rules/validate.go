package rules

import (
	"fmt"
	"math"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/olcd/olcd/internal/adaptive"

	"github.com/olcd/olcd/internal/olc"
)

// MaxInterval is the longest accepted tick interval: beyond it the
// controller reacts too late to protect anything.
const MaxInterval = 60 * time.Second

// MaxStaleAfter is the longest accepted heartbeat.stale_after. The
// datapath keeps shedding with the last drop probabilities until the
// heartbeat is this old, so a hung or stopped daemon sheds for that long
// after the overload ended; beyond a minute fail-open no longer protects
// the node's clients from a dead olcd.
const MaxStaleAfter = 60 * time.Second

// intRange is the valid range of an integer controller parameter.
type intRange struct {
	lo, hi int64
	hint   string
}

// tickRanges are the ranges of the integer controller parameters, shared
// by the decoder (which reports an out-of-range number with them) and
// validate (for configs built in Go).
var tickRanges = map[string]intRange{
	"activation_ticks": {1, 10, "2 ignores single-tick spikes and acts at the second tick"},
	"cooldown_ticks":   {0, 1000, "5 (2.5 s at 500ms) outlasts the 1 s SYN retransmit"},
}

// paramRange is the valid range of one float controller parameter. The
// ranges match adaptive.Params.Validate (TestParamRangesAgree).
type paramRange struct {
	key            string
	lo, hi         float64
	loOpen, hiOpen bool
}

var paramRanges = []paramRange{
	{key: "ki", lo: 0, hi: 2, loOpen: true},
	{key: "kp", lo: 0, hi: 2},
	{key: "smoothing", lo: 0, hi: 1, loOpen: true},
	{key: "hysteresis", lo: 0, hi: 0.5},
	{key: "saturation_boost", lo: 1, hi: 4},
	{key: "max_step", lo: 0, hi: 1, loOpen: true},
	{key: "recovery_step", lo: 0, hi: 1, loOpen: true},
	{key: "min_pass_rate", lo: 0, hi: 1},
	{key: "corroboration_ratio", lo: 0, hi: 1, loOpen: true},
	{key: "demand_smoothing", lo: 0, hi: 1, loOpen: true},
	{key: "record_change", lo: 0, hi: 1, loOpen: true},
	{key: "onset_ratio", lo: 1.1, hi: 10},
	{key: "latency_kp", lo: 0, hi: 4},
	{key: "latency_ki", lo: 0, hi: 2, loOpen: true},
	{key: "target_factor", lo: 1.2, hi: 20},
}

// contains reports whether x lies in the range.
func (r paramRange) contains(x float64) bool {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return false
	}
	if x < r.lo || x > r.hi || (r.loOpen && x == r.lo) || (r.hiOpen && x == r.hi) {
		return false
	}
	return true
}

// String renders "[0, 1]", "(0, 2]", ….
func (r paramRange) String() string {
	l, h := "[", "]"
	if r.loOpen {
		l = "("
	}
	if r.hiOpen {
		h = ")"
	}
	return fmt.Sprintf("%s%g, %g%s", l, r.lo, r.hi, h)
}

// thresholdCheck returns what is wrong with threshold x of sig, and a hint.
func thresholdCheck(sig olc.Signal, x float64) (msg, hint string) {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return fmt.Sprintf("threshold %v is not a finite number", x), ""
	case x <= 0:
		return fmt.Sprintf("threshold %g must be positive", x), "remove the signal to stop using it"
	case sig.IsFraction() && x > 1:
		msg = fmt.Sprintf("threshold %g is outside (0, 1]: %s is a fraction", x, sig)
		switch {
		case x > 100 && x <= 1000:
			hint = fmt.Sprintf("looks like per-mille; did you mean %g?", x/1000)
		case x >= 2 && x <= 100:
			hint = fmt.Sprintf("looks like percent; did you mean %g?", x/100)
		default:
			hint = "fractions are written 0..1, e.g. 0.8 for 80 %"
		}
		return msg, hint
	}
	return "", ""
}

// validate checks the typed config; every problem is placed at the node of
// its field.
func (d *decoder) validate(c *Config) {
	if c.Interval < MinInterval {
		d.addAt("interval", fmt.Sprintf("%v is below the minimum %v", c.Interval, MinInterval),
			"the sampler's deltas get too noisy below 100ms; use 100ms..1s")
	} else if c.Interval > MaxInterval {
		d.addAt("interval", fmt.Sprintf("%v is above the maximum %v", c.Interval, MaxInterval), "olcd would react too late; use 100ms..1s")
	}

	for s := range c.Thresholds {
		sig := olc.Signal(s)
		x := c.Thresholds[s]
		if !d.thresholdSet[s] && x == 0 {
			continue
		}
		if msg, hint := thresholdCheck(sig, x); msg != "" {
			d.addAt("signals."+sig.String()+".threshold", msg, hint)
		}
	}

	p := &c.Controller
	for _, r := range paramRanges {
		if x := *paramField(p, r.key); !r.contains(x) {
			hint := ""
			if r.key == "min_pass_rate" && x > 1 && x <= 100 {
				hint = fmt.Sprintf("looks like percent; did you mean %g?", x/100)
			}
			d.addAt("controller."+r.key, fmt.Sprintf("%g is outside %s", x, r), hint)
		}
	}
	for _, t := range []struct {
		key string
		v   int
	}{{"activation_ticks", p.ActivationTicks}, {"cooldown_ticks", p.Cooldown}} {
		if key, v, r := t.key, t.v, tickRanges[t.key]; int64(v) < r.lo || int64(v) > r.hi {
			d.addAt("controller."+key, fmt.Sprintf("%d is out of range: must be %d..%d", v, r.lo, r.hi), r.hint)
		}
	}
	if iv := p.OnsetInterval; iv != 0 && (iv < adaptive.MinOnsetInterval || iv > adaptive.MaxOnsetInterval) {
		d.addAt("controller.onset_interval", fmt.Sprintf("%v is outside [%v, %v]", iv, adaptive.MinOnsetInterval, adaptive.MaxOnsetInterval),
			"0 turns the onset check off; 50ms is the default")
	}
	if it := p.InitialTarget; it < time.Millisecond || it > 30*time.Second {
		d.addAt("controller.initial_target", fmt.Sprintf("%v is outside [1ms, 30s]", it), "100ms is the default")
	}
	if rc := p.ResponseCooldown; rc < 0 || rc > 30*time.Second {
		d.addAt("controller.response_cooldown", fmt.Sprintf("%v is outside [0, 30s]", rc), "1s, the first SYN retransmit, is the default")
	}
	if p.ContinueEvery < time.Second {
		d.addAt("controller.continue_every", fmt.Sprintf("%v is below 1s", p.ContinueEvery), "overload_continue is meant for people reading the log; 10s is the default")
	}

	d.validateInterfaces(c)
	d.validatePorts(c)

	markSets := c.Action.SetDSCP || c.Action.Fwmark != 0 || d.failed["action.dscp"] || d.failed["action.fwmark"]
	if c.Action.Kind == olc.ActionMark && !markSets {
		d.addAt("action.kind", "mark needs a dscp or a non-zero fwmark to set", "add action.dscp (0..63) and/or action.fwmark")
	}
	switch {
	case d.failed["heartbeat.stale_after"]:
	case c.StaleAfter > MaxStaleAfter:
		d.addAt("heartbeat.stale_after", fmt.Sprintf("%v is above the maximum %v: a hung or stopped daemon would keep shedding that long, fail-open would be as good as off", c.StaleAfter, MaxStaleAfter),
			fmt.Sprintf("use 3 to 10 × interval, e.g. %v (the default is %v)", min(10*c.Interval, MaxStaleAfter), olc.DefaultStaleAfter))
	case c.StaleAfter <= c.Interval && !d.failed["interval"]:
		hint := fmt.Sprintf("use at least 3 × interval, e.g. %v", 10*c.Interval)
		if 3*c.Interval > MaxStaleAfter {
			hint = fmt.Sprintf("stale_after is at most %v: use an interval of at most %v", MaxStaleAfter, MaxStaleAfter/3)
		}
		d.addAt("heartbeat.stale_after", fmt.Sprintf("%v is not longer than the interval %v: the datapath would go stale between two ticks", c.StaleAfter, c.Interval), hint)
	}
	for i, p := range c.Ports {
		if p.HasAction && p.Action == olc.ActionMark && !markSets {
			d.addAt(join(pathOf(d.portPaths, i, "ports"), "action"), "mark needs action.dscp or a non-zero action.fwmark to set", "add action.dscp (0..63) and/or action.fwmark")
		}
	}
	if c.MetricsAddress != "" {
		host, port, err := net.SplitHostPort(c.MetricsAddress)
		n, perr := strconv.Atoi(port)
		switch {
		case err != nil:
			d.addAt("metrics.address", fmt.Sprintf("%q is not host:port", c.MetricsAddress), "write e.g. 127.0.0.1:9477, or \"\" to turn metrics off")
		case perr != nil || n < 1 || n > 65535:
			d.addAt("metrics.address", fmt.Sprintf("port %q must be a number 1..65535", port), "")
		case host != "" && net.ParseIP(host) == nil && strings.ContainsAny(host, " /"):
			d.addAt("metrics.address", fmt.Sprintf("host %q is not an address or a name", host), "")
		}
	}
	if !filepath.IsAbs(c.AdminSocket) {
		d.addAt("admin.socket", fmt.Sprintf("%q must be an absolute path", c.AdminSocket), "the default is "+DefaultAdminSocket)
	} else if len(c.AdminSocket) > 107 {
		d.addAt("admin.socket", fmt.Sprintf("path is %d bytes: unix socket paths hold at most 107", len(c.AdminSocket)), "")
	}
	if c.DecisionLog != "" && c.DecisionLog != "-" && !filepath.IsAbs(c.DecisionLog) {
		d.addAt("decision_log", fmt.Sprintf("%q must be an absolute path (or \"\" to turn the log off)", c.DecisionLog), "the default is "+DefaultDecisionLog)
	}
	d.validateCgroup(c.Cgroup)
	d.validateLB(c)
	if !c.PortsAuto && len(c.Ports) > c.Datapath.MaxPorts {
		d.addAt("datapath.max_ports", fmt.Sprintf("%d is fewer than the %d ports listed", c.Datapath.MaxPorts, len(c.Ports)), "")
	}
	if len(c.Exceptions.Sources) > c.Datapath.MaxPrefixes {
		d.addAt("datapath.max_prefixes", fmt.Sprintf("%d is fewer than the %d exception sources listed", c.Datapath.MaxPrefixes, len(c.Exceptions.Sources)), "")
	}
}

// validateInterfaces checks interface names: kernel names are 1..15 bytes
// without '/', ':' or white space, and each is listed once.
func (d *decoder) validateInterfaces(c *Config) {
	seen := map[string]int{}
	for i, name := range c.Interfaces {
		field := pathOf(d.ifacePaths, i, "interfaces")
		switch {
		case name == "" || len(name) > 15:
			d.addAt(field, fmt.Sprintf("interface name %q must be 1..15 characters", name), "")
		case strings.ContainsAny(name, "/: \t") || name == "." || name == "..":
			d.addAt(field, fmt.Sprintf("%q is not a valid interface name", name), "")
		case name == "lo":
			d.addAt(field, "lo cannot be protected: loopback traffic never comes from a client", "remove it; leave interfaces empty for every non-loopback interface")
		}
		if j, dup := seen[name]; dup {
			d.addAt(field, fmt.Sprintf("%q is listed twice (also %s)", name, pathOf(d.ifacePaths, j, "interfaces")), "")
		}
		seen[name] = i
	}
}

// validatePorts checks duplicates among protected and exempt ports and
// prefixes, and ports both protected and exempt.
func (d *decoder) validatePorts(c *Config) {
	protected := map[olc.PortKey]int{}
	for i, p := range c.Ports {
		field := pathOf(d.portPaths, i, "ports")
		if j, dup := protected[p.Key()]; dup {
			other := pathOf(d.portPaths, j, "ports")
			d.addAt(field, fmt.Sprintf("%s is listed twice (also %s, %s)", p.Key(), other, d.where(other, field)), "keep one entry per port and protocol")
			continue
		}
		protected[p.Key()] = i
	}
	exempt := map[olc.PortKey]int{}
	for i, k := range c.Exceptions.Ports {
		field := pathOf(d.exPortPaths, i, "exceptions.ports")
		if j, dup := exempt[k]; dup {
			d.addAt(field, fmt.Sprintf("%s is listed twice (also %s)", k, pathOf(d.exPortPaths, j, "exceptions.ports")), "")
			continue
		}
		exempt[k] = i
		if j, both := protected[k]; both {
			other := pathOf(d.portPaths, j, "ports")
			d.addAt(field, fmt.Sprintf("%s is both protected (%s, %s) and exempt", k, other, d.where(other, field)),
				"remove it from one of the two lists")
		}
	}
	mgmt := map[olc.PortKey]int{}
	for i, k := range c.Exceptions.Management {
		field := pathOf(d.mgmtPaths, i, "exceptions.management")
		if j, dup := mgmt[k]; dup {
			d.addAt(field, fmt.Sprintf("%s is listed twice (also %s)", k, pathOf(d.mgmtPaths, j, "exceptions.management")), "")
			continue
		}
		mgmt[k] = i
	}
	prefixes := map[string]int{}
	for i, p := range c.Exceptions.Sources {
		field := pathOf(d.sourcePaths, i, "exceptions.sources")
		if j, dup := prefixes[p.String()]; dup {
			d.addAt(field, fmt.Sprintf("%s is listed twice (also %s)", p, pathOf(d.sourcePaths, j, "exceptions.sources")), "")
			continue
		}
		prefixes[p.String()] = i
	}
}

// where renders the position of field for a problem reported at from:
// "line 12" when both come from the same document, "patch:1" when a live
// patch and the config file are in conflict (a bare line number would name
// the wrong file).
func (d *decoder) where(field, from string) string {
	n := d.at(field)
	if n == nil {
		return "line 0"
	}
	if f := d.at(from); f == nil || d.file(f) != d.file(n) {
		return fmt.Sprintf("%s:%d", d.file(n), n.Line)
	}
	return fmt.Sprintf("line %d", n.Line)
}

// warn returns the valid but surprising settings of c.
func (d *decoder) warn(c *Config) []Warning {
	var anySignal bool
	for _, t := range c.Thresholds {
		anySignal = anySignal || t > 0
	}
	switch {
	case c.Mode == olc.ModeOff:
		d.warnAt("mode", "off: olcd reports what it sees but never sheds")
	case !anySignal:
		d.warnAt("signals", fmt.Sprintf("no signal has a threshold: the controller never sheds, even in %s mode", c.Mode))
	case c.Mode == olc.ModeEnforce && !c.PortsAuto && len(c.Ports) > 0:
		allObserve := true
		for _, p := range c.Ports {
			allObserve = allObserve && p.Override == olc.ModeObserve
		}
		if allObserve {
			d.warnAt("mode", "enforce, but every port overrides it to observe: nothing is enforced")
		}
	case c.Mode == olc.ModeObserve && !c.PortsAuto && len(c.Ports) > 0:
		allObserve := true
		for _, p := range c.Ports {
			allObserve = allObserve && p.Override != olc.ModeEnforce
		}
		if allObserve && d.at("mode") != nil {
			d.warnAt("mode", "observe on every port: olcd only counts what it would drop (fine for a first rollout; enforce one port next)")
		}
	}
	if c.Cgroup == "" {
		for s, t := range c.Thresholds {
			if sig := olc.Signal(s); t > 0 && sig.IsCgroup() {
				d.warnAt("signals."+sig.String(), "no cgroup is configured: the daemon never samples this signal, so it never sheds on it (set cgroup: to the service's cgroup)")
			}
		}
	}
	if !c.PortsAuto && len(c.Ports) == 0 {
		d.warnAt("ports", "the port list is empty: nothing is protected")
	}
	if !c.PortsAuto && len(c.Ports) > 1 {
		allCritical := true
		for _, p := range c.Ports {
			allCritical = allCritical && p.Class == olc.ClassCritical
		}
		if allCritical {
			d.warnAt("ports", "every port is critical: the classes make no difference")
		}
	}
	if c.Controller.MinPassRate < 0.1 {
		d.warnAt("controller.min_pass_rate", fmt.Sprintf("%g lets a faulty metric cut a service to below 10 %% of its new connections", c.Controller.MinPassRate))
	}
	if c.Controller.MinPassRate == 1 {
		d.warnAt("controller.min_pass_rate", "1 admits everything: nothing can ever be shed")
	}
	if c.StaleAfter > c.Interval && c.StaleAfter < 3*c.Interval {
		d.warnAt("heartbeat.stale_after", fmt.Sprintf("%v is less than 3 intervals: one slow tick lets the datapath go stale and pass everything", c.StaleAfter))
	}
	if c.Interval > 5*time.Second {
		d.warnAt("interval", fmt.Sprintf("%v: overload is acted on only after %v", c.Interval, time.Duration(c.Controller.ActivationTicks)*c.Interval))
	}
	marks := c.Action.Kind == olc.ActionMark
	rejects := c.Action.Kind == olc.ActionReject && (c.PortsAuto || len(c.Ports) == 0)
	for i, p := range c.Ports {
		a := p.EffectiveAction(c.Action.Kind)
		marks = marks || a == olc.ActionMark
		rejects = rejects || a == olc.ActionReject
		if a == olc.ActionReject && p.Proto == olc.ProtoUDP {
			f := join(pathOf(d.portPaths, i, "ports"), "action")
			if !p.HasAction {
				f = "action.kind"
			}
			d.warnAt(f, fmt.Sprintf("%s: a UDP request cannot be refused with a reset: reject drops it", p.Key()))
		}
	}
	if !marks && (c.Action.SetDSCP || c.Action.Fwmark != 0) {
		d.warnAt("action", "dscp and fwmark are ignored: no port uses the mark action")
	}
	if rejects && c.Action.RejectRate == 0 {
		d.warnAt("action.reject_rate", "0 answers no SYN: the reject action drops everything it sheds")
	}
	for i, p := range c.Exceptions.Sources {
		if p.Bits() == 0 {
			d.warnAt(pathOf(d.sourcePaths, i, "exceptions.sources"), fmt.Sprintf("%s exempts every %s source: nothing is shed for that family", p, map[bool]string{true: "IPv4", false: "IPv6"}[p.Addr().Is4()]))
		}
	}
	sort.SliceStable(d.warnings, func(i, j int) bool { return d.warnings[i].Line < d.warnings[j].Line })
	return d.warnings
}

// sortProblems orders problems by file, then line.
func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].File != ps[j].File {
			return ps[i].File < ps[j].File
		}
		return ps[i].Line < ps[j].Line
	})
}

// pathOf returns the field path of entry i of a decoded list, or list[i]
// when the config was not decoded from a document.
func pathOf(paths []string, i int, list string) string {
	if i < len(paths) {
		return paths[i]
	}
	return fmt.Sprintf("%s[%d]", list, i)
}

// validateCgroup checks the watched cgroup: either a filesystem path under
// /sys/fs/cgroup, or a path inside the cgroup hierarchy written without the
// leading slash (the sampler resolves it through /proc/self/mountinfo).
func (d *decoder) validateCgroup(cg string) {
	for _, el := range strings.Split(cg, "/") {
		if el == ".." {
			d.addAt("cgroup", fmt.Sprintf("%q must not contain ..", cg), "write the cgroup's path inside the hierarchy, e.g. system.slice/nginx.service")
			return
		}
	}
	if strings.HasPrefix(cg, "/") && cg != "/sys/fs/cgroup" && !strings.HasPrefix(cg, "/sys/fs/cgroup/") {
		d.addAt("cgroup", fmt.Sprintf("%q: an absolute path must be under /sys/fs/cgroup", cg),
			fmt.Sprintf("did you mean %q, the path inside the hierarchy?", strings.TrimLeft(cg, "/")))
	}
}
