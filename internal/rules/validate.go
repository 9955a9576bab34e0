package rules

import (
	"fmt"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/lb"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/ranges"
	sy "github.com/olcd/olcd/internal/strictyaml"
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

// thresholdCheck returns what is wrong with threshold x of sig, and a hint.
func thresholdCheck(sig olc.Signal, x float64) (msg, hint string) {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return fmt.Sprintf("threshold %v is not a finite number: must be in %s", x, ThresholdRange(sig)), ""
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
func (d *checker) validate(c *Config) {
	if c.Interval < MinInterval {
		d.AddAt("interval", fmt.Sprintf("%v is below the minimum %v", c.Interval, MinInterval),
			"the sampler's deltas get too noisy below 100ms; use 100ms..1s")
	} else if c.Interval > MaxInterval {
		d.AddAt("interval", fmt.Sprintf("%v is above the maximum %v", c.Interval, MaxInterval), "olcd would react too late; use 100ms..1s")
	}

	for s := range c.Thresholds {
		sig := olc.Signal(s)
		x := c.Thresholds[s]
		if !d.set[s] && x == 0 {
			continue
		}
		if msg, hint := thresholdCheck(sig, x); msg != "" {
			d.AddAt("signals."+sig.String()+".threshold", msg, hint)
		}
	}

	for _, pr := range ranges.Check(c.Controller) {
		d.AddAt("controller."+pr.Key, pr.Msg, pr.Hint)
	}

	d.validateInterfaces(c)
	d.validatePorts(c)

	markSets := c.Action.SetDSCP || c.Action.Fwmark != 0 || d.Failed("action.dscp") || d.Failed("action.fwmark")
	if c.Action.Kind == olc.ActionMark && !markSets {
		d.AddAt("action.kind", "mark needs a dscp or a non-zero fwmark to set", "add action.dscp (0..63) and/or action.fwmark")
	}
	d.validateStaleAfter(c)
	for i, p := range c.Ports {
		if p.HasAction && p.Action == olc.ActionMark && !markSets {
			d.AddAt(sy.Join(d.EntryPath("ports", i), "action"), "mark needs action.dscp or a non-zero action.fwmark to set", "add action.dscp (0..63) and/or action.fwmark")
		}
		if !p.RequestGate {
			continue
		}
		at := sy.Join(d.EntryPath("ports", i), "request_gate")
		switch {
		case p.Key.Proto != olc.ProtoTCP:
			d.AddAt(at, "the request gate resets TCP connections: a UDP port has none", "remove request_gate from the UDP port")
		case c.Datapath.ResponseSample == 0:
			d.AddAt(at, "the request gate reads response timing's flow table, and datapath.response_sample is 0 (timing off)", "set datapath.response_sample: 1 (the default)")
		case p.EffectiveAction(c.Action.Kind) == olc.ActionMark:
			d.AddAt(at, "the mark action passes what it selects; the request gate would reset it", "use action drop or reject on this port, or remove request_gate")
		}
	}
	d.validateCaps(c)
	d.validateOwnPaths(c)
	d.validateCgroup(c.Cgroup)
	d.validateLB(c)
	if !c.PortsAuto && len(c.Ports) > c.Datapath.MaxPorts {
		d.AddAt("datapath.max_ports", fmt.Sprintf("%d is fewer than the %d ports listed", c.Datapath.MaxPorts, len(c.Ports)), "")
	}
	if len(c.Exceptions.Sources) > c.Datapath.MaxPrefixes {
		d.AddAt("datapath.max_prefixes", fmt.Sprintf("%d is fewer than the %d exception sources listed", c.Datapath.MaxPrefixes, len(c.Exceptions.Sources)), "")
	}
}

// validateInterfaces checks interface names: kernel names are 1..15 bytes
// without '/', ':' or white space, and each is listed once.
func (d *checker) validateInterfaces(c *Config) {
	seen := map[string]int{}
	for i, name := range c.Interfaces {
		field := d.EntryPath("interfaces", i)
		switch {
		case name == "" || len(name) > 15:
			d.AddAt(field, fmt.Sprintf("interface name %q must be 1..15 characters", name), "")
		case strings.ContainsAny(name, "/: \t") || name == "." || name == "..":
			d.AddAt(field, fmt.Sprintf("%q is not a valid interface name", name), "")
		case name == "lo":
			d.AddAt(field, "lo cannot be protected: loopback traffic never comes from a client", "remove it; leave interfaces empty for every non-loopback interface")
		}
		if j, dup := seen[name]; dup {
			d.AddAt(field, fmt.Sprintf("%q is listed twice (also %s)", name, d.EntryPath("interfaces", j)), "")
		}
		seen[name] = i
	}
}

// validatePorts checks duplicates among protected and exempt ports and
// prefixes, and ports both protected and exempt.
func (d *checker) validatePorts(c *Config) {
	protected := map[olc.PortKey]int{}
	for i, p := range c.Ports {
		field := d.EntryPath("ports", i)
		if j, dup := protected[p.Key]; dup {
			other := d.EntryPath("ports", j)
			d.AddAt(field, fmt.Sprintf("%s is listed twice (also %s, %s)", p.Key, other, d.Where(other, field)), "keep one entry per port and protocol")
			continue
		}
		protected[p.Key] = i
	}
	exempt := unique(d, "exceptions.ports", c.Exceptions.Ports)
	for i, k := range c.Exceptions.Ports {
		if j, both := protected[k]; both && exempt[k] == i {
			field, other := d.EntryPath("exceptions.ports", i), d.EntryPath("ports", j)
			d.AddAt(field, fmt.Sprintf("%s is both protected (%s, %s) and exempt", k, other, d.Where(other, field)),
				"remove it from one of the two lists")
		}
	}
	unique(d, "exceptions.management", c.Exceptions.Management)
	unique(d, "exceptions.sources", c.Exceptions.Sources)
}

// unique reports each entry of the list at path that repeats an earlier
// one, and returns the index of every key's first entry.
func unique[K comparable](d *checker, path string, keys []K) map[K]int {
	first := make(map[K]int, len(keys))
	for i, k := range keys {
		if j, dup := first[k]; dup {
			d.AddAt(d.EntryPath(path, i), fmt.Sprintf("%v is listed twice (also %s)", k, d.EntryPath(path, j)), "")
			continue
		}
		first[k] = i
	}
	return first
}

// warn returns the valid but surprising settings of c, in line order.
func (d *checker) warn(c *Config) []Warning {
	listed := !c.PortsAuto && len(c.Ports) > 0
	every := func(f func(Port) bool) bool { return !slices.ContainsFunc(c.Ports, func(p Port) bool { return !f(p) }) }
	switch {
	case c.Mode == olc.ModeOff:
		d.WarnAt("mode", "off: olcd reports what it sees but never sheds")
	case !slices.ContainsFunc(c.Thresholds[:], func(t float64) bool { return t > 0 }) && !c.queueLaw():
		d.WarnAt("signals", fmt.Sprintf("no signal has a threshold: the controller never sheds, even in %s mode", c.Mode))
	case c.Mode == olc.ModeEnforce && listed && every(func(p Port) bool { return p.Mode == olc.ModeObserve }):
		d.WarnAt("mode", "enforce, but every port overrides it to observe: nothing is enforced")
	case c.Mode == olc.ModeObserve && listed && d.At("mode") != nil && every(func(p Port) bool { return p.Mode != olc.ModeEnforce }):
		d.WarnAt("mode", "observe on every port: olcd only counts what it would drop (fine for a first rollout; enforce one port next)")
	}
	var left []string // default signals a signals section leaves out
	for s, t := range DefaultThresholds() {
		if t > 0 && !d.named[s] && d.At("signals") != nil {
			left = append(left, olc.Signal(s).String())
		}
	}
	if len(left) > 0 {
		d.WarnAt("signals", fmt.Sprintf("the list replaces the default signals: %s not used (list them to keep them, or write %s: off to say so)", sy.OrList(left), left[0]))
	}
	for s, t := range c.Thresholds {
		if sig := olc.Signal(s); t > 0 && sig.IsCgroup() && c.Cgroup == "" {
			d.WarnAt("signals."+sig.String(), "no cgroup is configured: the daemon never samples this signal, so it never sheds on it (set cgroup: to the service's cgroup)")
		}
	}
	if !c.PortsAuto && len(c.Ports) == 0 {
		d.WarnAt("ports", "the port list is empty: nothing is protected")
	}
	if len(c.Ports) > 1 && !c.PortsAuto && every(func(p Port) bool { return p.Class == olc.ClassCritical }) {
		d.WarnAt("ports", "every port is critical: the classes make no difference")
	}
	if c.Controller.MinPassRate < 0.1 {
		d.WarnAt("controller.min_pass_rate", fmt.Sprintf("%g lets a faulty metric cut a service to below 10 %% of its new connections", c.Controller.MinPassRate))
	}
	if c.Controller.MinPassRate == 1 {
		d.WarnAt("controller.min_pass_rate", "1 admits everything: nothing can ever be shed")
	}
	if c.StaleAfter > c.Interval && c.StaleAfter < 3*c.Interval {
		d.WarnAt("heartbeat.stale_after", fmt.Sprintf("%v is less than 3 intervals: one slow tick lets the datapath go stale and pass everything", c.StaleAfter))
	}
	if c.Interval > 5*time.Second {
		d.WarnAt("interval", fmt.Sprintf("%v: overload is acted on only after %v", c.Interval, time.Duration(c.Controller.ActivationTicks)*c.Interval))
	}
	d.warnActions(c)
	if d.Given("exceptions.management") && len(c.Exceptions.Management) == 0 {
		// `management:` with no value reads as null: the list is empty.
		d.WarnAt("exceptions.management", "empty: no management port is exempt, so under overload SSH can be shed with the rest (the default is [22])")
	}
	for i, p := range c.Exceptions.Sources {
		if p.Bits() == 0 {
			d.WarnAt(d.EntryPath("exceptions.sources", i), fmt.Sprintf("%s exempts every %s source: nothing is shed for that family", p, map[bool]string{true: "IPv4", false: "IPv6"}[p.Addr().Is4()]))
		}
	}
	slices.SortStableFunc(d.Warnings, func(a, b Warning) int { return a.Line - b.Line })
	return d.Warnings
}

// warnActions warns of actions that do not do what they say: reject on
// UDP, mark settings no port uses, reject without replies.
func (d *checker) warnActions(c *Config) {
	marks := c.Action.Kind == olc.ActionMark
	rejects := c.Action.Kind == olc.ActionReject && (c.PortsAuto || len(c.Ports) == 0)
	for i, p := range c.Ports {
		a := p.EffectiveAction(c.Action.Kind)
		marks, rejects = marks || a == olc.ActionMark, rejects || a == olc.ActionReject
		if f := sy.Join(d.EntryPath("ports", i), "action"); a == olc.ActionReject && p.Key.Proto == olc.ProtoUDP {
			if !p.HasAction {
				f = "action.kind"
			}
			d.WarnAt(f, fmt.Sprintf("%s: a UDP request cannot be refused with a reset: reject drops it", p.Key))
		}
	}
	if !marks && (c.Action.SetDSCP || c.Action.Fwmark != 0) {
		d.WarnAt("action", "dscp and fwmark are ignored: no port uses the mark action")
	}
	if rejects && c.Action.RejectRate == 0 {
		d.WarnAt("action.reject_rate", "0 answers no SYN: the reject action drops everything it sheds")
	}
}

// validateLB checks the `lb` section.
func (d *checker) validateLB(c *Config) {
	if a := c.LB.Agent; a.Address != "" && !d.Failed("lb.agent.address") {
		if err := lb.CheckAddress(a.Address, a.AllowAny); err != nil {
			d.AddAt("lb.agent.address", err.Error(), "the listener tells anyone who connects the node's weight: bind the address the load balancer reaches")
		} else if a.Address == c.MetricsAddress {
			d.AddAt("lb.agent.address", fmt.Sprintf("%q is also metrics.address", a.Address), "use another port, e.g. 9478")
		}
	}
	for _, pr := range ranges.Check(c.LB.Agent) {
		d.AddAt("lb.agent."+pr.Key, pr.Msg, pr.Hint)
	}
	for _, pr := range ranges.Check(c.LB.Weight) {
		d.AddAt("lb."+pr.Key, pr.Msg, pr.Hint)
	}
}

// validateCgroup checks the watched cgroup: either a filesystem path under
// /sys/fs/cgroup, or a path inside the cgroup hierarchy written without the
// leading slash (the sampler resolves it through /proc/self/mountinfo).
func (d *checker) validateCgroup(cg string) {
	for _, el := range strings.Split(cg, "/") {
		if el == ".." {
			d.AddAt("cgroup", fmt.Sprintf("%q must not contain ..", cg), "write the cgroup's path inside the hierarchy, e.g. system.slice/nginx.service")
			return
		}
	}
	if strings.HasPrefix(cg, "/") && cg != "/sys/fs/cgroup" && !strings.HasPrefix(cg, "/sys/fs/cgroup/") {
		d.AddAt("cgroup", fmt.Sprintf("%q: an absolute path must be under /sys/fs/cgroup", cg),
			fmt.Sprintf("did you mean %q, the path inside the hierarchy?", strings.TrimLeft(cg, "/")))
	}
}

// validateStaleAfter checks heartbeat.stale_after against the interval.
func (d *checker) validateStaleAfter(c *Config) {
	switch {
	case d.Failed("heartbeat.stale_after"):
	case c.StaleAfter > MaxStaleAfter:
		d.AddAt("heartbeat.stale_after", fmt.Sprintf("%v is above the maximum %v: a hung or stopped daemon would keep shedding that long, fail-open would be as good as off", c.StaleAfter, MaxStaleAfter),
			fmt.Sprintf("use 3 to 10 × interval, e.g. %v (the default is %v)", min(10*c.Interval, MaxStaleAfter), olc.DefaultStaleAfter))
	case c.StaleAfter <= c.Interval && !d.Failed("interval"):
		longer := fmt.Sprintf("at least 3 × interval, e.g. %v", min(10*c.Interval, MaxStaleAfter))
		hint := "use " + longer
		if 3*c.Interval > MaxStaleAfter {
			hint = fmt.Sprintf("stale_after is at most %v: use an interval of at most %v", MaxStaleAfter, MaxStaleAfter/3)
		}
		if !d.Given("heartbeat.stale_after") {
			// The default stale_after: the interval the document sets is the cause.
			if 3*c.Interval <= MaxStaleAfter {
				hint = fmt.Sprintf("use an interval below %v, or set heartbeat.stale_after to %s", c.StaleAfter, longer)
			}
			d.AddAt("interval", fmt.Sprintf("%v is not shorter than heartbeat.stale_after %v (the default): the datapath would go stale between two ticks", c.Interval, c.StaleAfter), hint)
			return
		}
		d.AddAt("heartbeat.stale_after", fmt.Sprintf("%v is not longer than the interval %v: the datapath would go stale between two ticks", c.StaleAfter, c.Interval), hint)
	}
}

// validateOwnPaths checks the listeners' addresses and the paths, and
// refuses a decision log or admin socket at the config file's own path, or
// at each other's: the log's records would be appended to the config
// (which the next reload refuses), and olcd does not replace a file that is
// not a socket.
func (d *checker) validateOwnPaths(c *Config) {
	if c.MetricsAddress != "" {
		host, port, err := net.SplitHostPort(c.MetricsAddress)
		n, perr := strconv.Atoi(port)
		switch {
		case err != nil:
			d.AddAt("metrics.address", fmt.Sprintf("%q is not host:port", c.MetricsAddress), "write e.g. 127.0.0.1:9477, or \"\" to turn metrics off")
		case perr != nil || n < 1 || n > 65535:
			d.AddAt("metrics.address", fmt.Sprintf("port %q must be a number 1..65535", port), "")
		case host != "" && net.ParseIP(host) == nil && strings.ContainsAny(host, " /"):
			d.AddAt("metrics.address", fmt.Sprintf("host %q is not an address or a name", host), "")
		}
	}
	if !filepath.IsAbs(c.AdminSocket) {
		d.AddAt("admin.socket", fmt.Sprintf("%q must be an absolute path", c.AdminSocket), "the default is "+DefaultAdminSocket)
	} else if len(c.AdminSocket) > 107 {
		d.AddAt("admin.socket", fmt.Sprintf("path is %d bytes: unix socket paths hold at most 107", len(c.AdminSocket)), "")
	}
	if c.DecisionLog != "" && c.DecisionLog != "-" && !filepath.IsAbs(c.DecisionLog) {
		d.AddAt("decision_log", fmt.Sprintf("%q must be an absolute path (or \"\" to turn the log off)", c.DecisionLog), "the default is "+DefaultDecisionLog)
	}
	logOn := c.DecisionLog != "" && c.DecisionLog != "-" && filepath.IsAbs(c.DecisionLog)
	if logOn && filepath.IsAbs(c.AdminSocket) && filepath.Clean(c.DecisionLog) == filepath.Clean(c.AdminSocket) {
		d.AddAt("decision_log", fmt.Sprintf("%q is also admin.socket", c.DecisionLog), "give the decision log and the admin socket paths of their own")
	}
	if c.Source == "" {
		return
	}
	src, err := filepath.Abs(c.Source)
	if err != nil {
		return
	}
	if logOn && filepath.Clean(c.DecisionLog) == src {
		d.AddAt("decision_log", fmt.Sprintf("%q is the config file itself: its records would be appended to the config", c.DecisionLog), "the default is "+DefaultDecisionLog)
	}
	if filepath.IsAbs(c.AdminSocket) && filepath.Clean(c.AdminSocket) == src {
		d.AddAt("admin.socket", fmt.Sprintf("%q is the config file itself", c.AdminSocket), "the default is "+DefaultAdminSocket)
	}
}

// queueLaw reports whether the law on the measured response time can shed
// for some port of c: responses are timed and a port's target (its own, or
// controller.response_target) is not off. Without a signal threshold it is
// then what sheds.
func (c *Config) queueLaw() bool {
	if c.Datapath.ResponseSample == 0 {
		return false
	}
	on := func(t adaptive.ResponseTarget) bool { return t.Auto || t.Seconds > 0 }
	if c.PortsAuto {
		return on(c.ResponseTarget)
	}
	for _, p := range c.Ports {
		if p.HasTarget && on(p.Target) || !p.HasTarget && on(c.ResponseTarget) {
			return true
		}
	}
	return false
}
