package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/spell"
)

// Load reads and validates the config file at path. The error is a
// *ValidationError listing every problem when the file is invalid (an empty
// file is: see Parse), or a wrapped I/O error when it cannot be read (see
// ReadFile). Warnings list valid but surprising settings.
func Load(path string) (*Config, []Warning, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return Parse(data, path)
}

// MaxConfigBytes is the largest config file Load reads (4 MiB): far above
// any real config, even one with thousands of exception prefixes.
const MaxConfigBytes = 4 << 20

// ReadFile returns the content of the config file at path (symlinks
// followed). It never blocks on what is not a config: a FIFO would wait for
// a writer for ever, a device may never end, a directory has no content, so
// anything but a regular file is refused, checked before the open and again
// on the open file (opened with O_NONBLOCK, in case a FIFO took the
// file's place in between). Errors: the path cannot be read, is not a
// regular file, or is larger than MaxConfigBytes.
func ReadFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if err := regularFile(path, fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if err := regularFile(path, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("read config %s: larger than %d bytes: not a config file", path, MaxConfigBytes)
	}
	return data, nil
}

// ErrNotRegular is wrapped by ReadFile's error for a path that is not a
// regular file.
var ErrNotRegular = errors.New("not a regular file")

// regularFile refuses what is not a regular file, naming what it is.
func regularFile(path string, fi os.FileInfo) error {
	m := fi.Mode()
	if m.IsRegular() {
		return nil
	}
	what := "a special file"
	switch {
	case m.IsDir():
		what = "a directory"
	case m&os.ModeNamedPipe != 0:
		what = "a FIFO (named pipe)"
	case m&os.ModeSocket != 0:
		what = "a socket"
	case m&os.ModeCharDevice != 0:
		what = "a character device"
	case m&os.ModeDevice != 0:
		what = "a block device"
	}
	return fmt.Errorf("read config %s: %s, %w: not a config file", path, what, ErrNotRegular)
}

// Parse decodes and validates a config document; source names it in
// problems (a path, or "" for the embedded default). Keys absent from the
// document keep their defaults; a `signals` section replaces the default
// signal list as a whole. A document without any setting (no bytes, white
// space or comments only) is refused unless source is "": an empty config
// file is a mistake (a truncated or unfinished write, `: > olcd.yaml`) far
// more often than a request for every default, which `{}` states. The error
// is a *ValidationError.
func Parse(data []byte, source string) (*Config, []Warning, error) {
	origins := map[*yaml.Node]string{}
	name := source
	if name == "" {
		name = "embedded default"
	}
	if source != "" && len(bytes.TrimSpace(data)) == 0 {
		// Before YAML, which refuses a tab as white space.
		return nil, nil, &ValidationError{Problems: []Problem{emptyProblem(source, data)}}
	}
	root, probs := parseDocument(data, name, origins)
	if len(probs) > 0 {
		return nil, nil, &ValidationError{Problems: probs}
	}
	if root == nil && source != "" {
		return nil, nil, &ValidationError{Problems: []Problem{emptyProblem(source, data)}}
	}
	return decodeDocument(root, origins, source, name)
}

// Patch applies a partial document (YAML or JSON, e.g. just
// `signals: {cpu_busy: {threshold: 0.7}}`) onto c and validates the result
// exactly like a file: mappings merge key by key, a null deletes a key (back
// to its default), lists and scalars replace. Problems in the patch name
// source and the patch's lines. c is not modified.
func (c *Config) Patch(doc []byte, source string) (*Config, []Warning, error) {
	if source == "" {
		source = "patch"
	}
	origins := make(map[*yaml.Node]string, len(c.origins)+16)
	for n, s := range c.origins {
		origins[n] = s
	}
	root, probs := parseDocument(doc, source, origins)
	if len(probs) > 0 {
		return nil, nil, &ValidationError{Problems: probs}
	}
	base := c.doc
	if root != nil && mapGet(root, "signals") != nil && mapGet(base, "signals") == nil {
		// The running signals are the defaults, which the document does not
		// spell out: materialise them so the patch changes one signal
		// instead of replacing the list.
		base = withSignals(base, c.Thresholds, origins)
	}
	name := c.Source
	if name == "" {
		name = "embedded default"
	}
	merged := merge(base, root, origins)
	return decodeDocument(merged, reachable(merged, origins), c.Source, name)
}

// reachable returns the origins of the nodes of doc only. Each patch copies
// its base's origins; without pruning, the nodes of every earlier patch
// (long replaced) would be carried along, and a daemon that is patched
// every minute would grow and copy that map for ever.
func reachable(doc *yaml.Node, origins map[*yaml.Node]string) map[*yaml.Node]string {
	out := map[*yaml.Node]string{}
	visited := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil || visited[n] {
			return
		}
		visited[n] = true
		// A mapping merge created has no origin; the decoder's fallback
		// (the config's own file) names it.
		if src, ok := origins[n]; ok {
			out[n] = src
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(doc)
	return out
}

// withSignals returns base with a `signals` mapping holding thresholds.
func withSignals(base *yaml.Node, th [olc.NumSignals]float64, origins map[*yaml.Node]string) *yaml.Node {
	sigs := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for s, v := range th {
		if v <= 0 {
			continue
		}
		inner := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "threshold"},
			{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(v, 'g', -1, 64)},
		}}
		sigs.Content = append(sigs.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: olc.Signal(s).String()}, inner)
	}
	record(sigs, "default", origins)
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if base != nil {
		cp := *resolve(base)
		out = &cp
		out.Content = append([]*yaml.Node(nil), cp.Content...)
	}
	out.Content = append(out.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "signals"}, sigs)
	return out
}

// decodeDocument decodes root onto the defaults and validates the result.
func decodeDocument(root *yaml.Node, origins map[*yaml.Node]string, source, name string) (*Config, []Warning, error) {
	d := &decoder{origins: origins, fallback: name, pos: map[string]*yaml.Node{}, failed: map[string]bool{}}
	cfg := defaults()
	cfg.Source = source
	if root != nil {
		d.root(root, cfg)
	}
	d.validate(cfg)
	if len(d.problems) > 0 {
		sortProblems(d.problems)
		return nil, nil, &ValidationError{Problems: d.problems}
	}
	warnings := d.warn(cfg)
	cfg.doc, cfg.origins = root, origins
	return cfg, warnings, nil
}

// decoder walks one document, collecting problems instead of stopping.
type decoder struct {
	origins  map[*yaml.Node]string
	fallback string
	problems []Problem
	warnings []Warning
	// pos maps every field path seen to its value node, for the positions
	// of the typed checks in validate.
	pos map[string]*yaml.Node
	// thresholdSet marks the signals the document gives a threshold, so
	// that validate also checks an explicit 0 (which the typed config reads
	// as "unused").
	thresholdSet [olc.NumSignals]bool
	// failed marks the fields that did not decode, so that validate skips
	// the cross-checks that would only repeat the mistake.
	failed map[string]bool
	// The field paths of the decoded list entries, parallel to the typed
	// lists (an entry that failed to decode is missing from both).
	portPaths, exPortPaths, sourcePaths, ifacePaths, mgmtPaths []string
}

// file returns the source n came from.
func (d *decoder) file(n *yaml.Node) string {
	if s, ok := d.origins[n]; ok {
		return s
	}
	return d.fallback
}

// add records a problem at node n.
func (d *decoder) add(n *yaml.Node, field, msg, hint string) {
	p := Problem{File: d.fallback, Field: field, Msg: msg, Hint: hint}
	d.failed[field] = true
	if n != nil {
		p.File, p.Line = d.file(n), n.Line
	}
	d.problems = append(d.problems, p)
}

// at returns the node recorded for field, or for its closest recorded
// parent ("ports[2].port" → "ports[2]" → "ports").
func (d *decoder) at(field string) *yaml.Node {
	for f := field; f != ""; {
		if n, ok := d.pos[f]; ok {
			return n
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return nil
}

// addAt records a problem at the node of field.
func (d *decoder) addAt(field, msg, hint string) { d.add(d.at(field), field, msg, hint) }

// warnAt records a warning at the node of field.
func (d *decoder) warnAt(field, msg string) {
	w := Warning{File: d.fallback, Field: field, Msg: msg}
	if n := d.at(field); n != nil {
		w.File, w.Line = d.file(n), n.Line
	}
	d.warnings = append(d.warnings, w)
}

// join builds a field path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapping walks a mapping node, reporting a node of another kind, duplicate
// keys and unknown keys (with the closest known one), and calls fn for each
// known key. A null node is an empty mapping.
func (d *decoder) mapping(n *yaml.Node, path string, keys []string, fn func(key string, v *yaml.Node, field string)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.add(n, path, "must be a mapping (key: value), got "+kindName(n), "")
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.add(k, path, "keys must be plain names, got "+kindName(k), "")
			continue
		}
		field := join(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.add(k, field, fmt.Sprintf("duplicate key (first at line %d)", line), "remove one of them")
			continue
		}
		seen[k.Value] = k.Line
		if keys != nil && !contains(keys, k.Value) {
			hint := ""
			if s := closest(k.Value, keys); s != "" {
				hint = fmt.Sprintf("did you mean %q?", s)
			} else {
				hint = "known keys: " + strings.Join(keys, ", ")
			}
			d.add(k, field, "unknown key", hint)
			continue
		}
		d.pos[field] = v
		fn(k.Value, v, field)
	}
}

// seq walks a list node; a null node is an empty list.
func (d *decoder) seq(n *yaml.Node, path string, fn func(i int, item *yaml.Node, field string)) bool {
	n = resolve(n)
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		d.add(n, path, "must be a list, got "+kindName(n), "write [a, b] or one '- item' per line")
		return false
	}
	for i, item := range n.Content {
		field := fmt.Sprintf("%s[%d]", path, i)
		d.pos[field] = item
		fn(i, resolve(item), field)
	}
	return true
}

// str returns a scalar's text; null is "".
func (d *decoder) str(n *yaml.Node, field string) (string, bool) {
	n = resolve(n)
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		d.add(n, field, "must be a string, got "+kindName(n), "")
		return "", false
	}
	return n.Value, true
}

// enum returns a scalar that must be one of values.
func (d *decoder) enum(n *yaml.Node, field string, values []string) (string, bool) {
	s, ok := d.str(n, field)
	if !ok {
		return "", false
	}
	if !contains(values, s) {
		hint := "want " + orList(values)
		if c := suggest(s, values); c != "" && c != s {
			hint = fmt.Sprintf("did you mean %q? want %s", c, orList(values))
		}
		d.add(n, field, fmt.Sprintf("unknown value %q", s), hint)
		return "", false
	}
	return s, true
}

// switchWords are the words people use for a switch. As a mode they are
// ambiguous, and the edit distance would suggest "off" for "on".
var switchWords = map[string]string{
	"on": "enforce", "yes": "enforce", "true": "enforce", "enable": "enforce", "enabled": "enforce", "1": "enforce",
	"no": "off", "false": "off", "disable": "off", "disabled": "off", "none": "off", "0": "off",
}

// suggest returns the value of values that s most plausibly means: the same
// word in other letter case ("TCP"), the mode a switch word stands for
// ("on" → enforce), or the closest by edit distance.
func suggest(s string, values []string) string {
	for _, v := range values {
		if strings.EqualFold(s, v) {
			return v
		}
	}
	if m, ok := switchWords[strings.ToLower(s)]; ok && contains(values, m) {
		return m
	}
	return closest(s, values)
}

// number returns a numeric scalar.
func (d *decoder) number(n *yaml.Node, field string) (float64, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err == nil {
			return v, true
		}
		if i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
			return float64(i), true
		}
		if n.Tag == "!!float" {
			switch strings.ToLower(n.Value) {
			case ".nan":
				return math.NaN(), true
			case ".inf", "+.inf":
				return math.Inf(1), true
			case "-.inf":
				return math.Inf(-1), true
			}
		}
	}
	hint := quotedNumberHint(n)
	if n.Kind == yaml.ScalarNode && strings.HasSuffix(strings.TrimSpace(n.Value), "%") {
		if v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(n.Value), "%"), 64); err == nil {
			hint = fmt.Sprintf("fractions are written 0..1: did you mean %g?", v/100)
		}
	}
	d.add(n, field, "must be a number, got "+kindName(n), hint)
	return 0, false
}

// quotedNumberHint explains a number written as a string ("0.5", '80'): the
// quotes make YAML read text.
func quotedNumberHint(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
		return ""
	}
	if _, err := strconv.ParseFloat(strings.TrimSpace(n.Value), 64); err != nil {
		return ""
	}
	return fmt.Sprintf("remove the quotes: write %s", strings.TrimSpace(n.Value))
}

// integer returns an integer scalar within [lo, hi].
func (d *decoder) integer(n *yaml.Node, field string, lo, hi int64) (int64, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!float" && wholeNumber.MatchString(n.Value) {
		// Digits beyond int64, which YAML resolves as a float.
		d.add(n, field, fmt.Sprintf("%s is out of range: must be %d..%d", n.Value, lo, hi), "")
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.add(n, field, "must be a whole number, got "+kindName(n), quotedNumberHint(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v < lo || v > hi {
		d.add(n, field, fmt.Sprintf("%s is out of range: must be %d..%d", n.Value, lo, hi), "")
		return 0, false
	}
	return v, true
}

// wholeNumber matches a decimal integer as written in YAML.
var wholeNumber = regexp.MustCompile(`^[-+]?[0-9][0-9_]*$`)

// duration returns a duration scalar such as "500ms" or "2s".
func (d *decoder) duration(n *yaml.Node, field string) (time.Duration, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		d.add(n, field, fmt.Sprintf("duration %s has no unit", n.Value), fmt.Sprintf("write e.g. %sms or %ss", n.Value, n.Value))
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		d.add(n, field, "must be a duration such as 500ms or 2s, got "+kindName(n), "")
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		d.add(n, field, fmt.Sprintf("%q is not a duration", n.Value), "write e.g. 500ms, 2s or 1m")
		return 0, false
	}
	return v, true
}

// The keys of each section, in documentation order.
var (
	rootKeys       = []string{"mode", "interfaces", "attach", "interval", "signals", "cgroup", "controller", "ports", "exceptions", "action", "heartbeat", "metrics", "admin", "decision_log", "datapath", "lb"}
	controllerKeys = []string{"ki", "kp", "activation_ticks", "smoothing", "cooldown_ticks", "hysteresis", "saturation_boost", "max_step", "recovery_step", "min_pass_rate", "corroboration_ratio", "demand_smoothing", "continue_every", "record_change", "onset_interval", "onset_ratio", "response_target", "target_factor", "initial_target", "response_cooldown", "latency_kp", "latency_ki"}
	portKeys       = []string{"port", "proto", "class", "mode", "action", "response_target"}
	exceptionKeys  = []string{"ports", "sources", "management"}
	exPortKeys     = []string{"port", "proto"}
	actionKeys     = []string{"kind", "dscp", "fwmark", "reject_rate", "reject_burst"}
	datapathKeys   = []string{"max_ports", "syn_table_size", "max_prefixes", "selection", "response_sample", "response_ports", "flow_table_size", "response_min_samples"}
)

// root decodes the top-level mapping onto cfg.
func (d *decoder) root(n *yaml.Node, cfg *Config) {
	d.mapping(n, "", rootKeys, func(key string, v *yaml.Node, field string) {
		switch key {
		case "mode":
			if s, ok := d.enum(v, field, []string{"off", "observe", "enforce"}); ok {
				cfg.Mode, _ = olc.ParseMode(s)
			}
		case "interfaces":
			cfg.Interfaces = nil
			d.seq(v, field, func(_ int, item *yaml.Node, f string) {
				if s, ok := d.str(item, f); ok {
					cfg.Interfaces = append(cfg.Interfaces, s)
					d.ifacePaths = append(d.ifacePaths, f)
				}
			})
		case "attach":
			names := make([]string, len(attachModes))
			for i, m := range attachModes {
				names[i] = string(m)
			}
			if s, ok := d.enum(v, field, names); ok {
				cfg.Attach = olc.AttachMode(s)
			}
		case "interval":
			if dur, ok := d.duration(v, field); ok {
				cfg.Interval = dur
			}
		case "signals":
			d.signals(v, field, cfg)
		case "cgroup":
			if s, ok := d.str(v, field); ok {
				cfg.Cgroup = s
			}
		case "controller":
			d.controller(v, field, cfg)
		case "ports":
			d.ports(v, field, cfg)
		case "exceptions":
			d.exceptions(v, field, cfg)
		case "action":
			d.action(v, field, cfg)
		case "heartbeat":
			d.mapping(v, field, []string{"stale_after"}, func(_ string, v *yaml.Node, f string) {
				if dur, ok := d.duration(v, f); ok {
					cfg.StaleAfter = dur
				}
			})
		case "metrics":
			d.mapping(v, field, []string{"address"}, func(_ string, v *yaml.Node, f string) {
				if s, ok := d.str(v, f); ok {
					cfg.MetricsAddress = s
				}
			})
		case "admin":
			d.mapping(v, field, []string{"socket"}, func(_ string, v *yaml.Node, f string) {
				if s, ok := d.str(v, f); ok {
					cfg.AdminSocket = s
				}
			})
		case "decision_log":
			if s, ok := d.str(v, field); ok {
				cfg.DecisionLog = s
			}
		case "lb":
			d.lb(v, field, cfg)
		case "datapath":
			d.mapping(v, field, datapathKeys, func(key string, v *yaml.Node, f string) {
				switch key {
				case "max_ports":
					// Policy indices are 16 bits in the datapath, with 0
					// meaning "no policy" and one slot for "other".
					if i, ok := d.integer(v, f, 1, olc.MaxMaxPorts); ok {
						cfg.Datapath.MaxPorts = int(i)
					}
				case "syn_table_size":
					if i, ok := d.integer(v, f, 1024, 1<<24); ok {
						cfg.Datapath.SYNTableSize = int(i)
					}
				case "max_prefixes":
					if i, ok := d.integer(v, f, 1, 1<<20); ok {
						cfg.Datapath.MaxPrefixes = int(i)
					}
				case "selection":
					if s, ok := d.enum(v, f, []string{"random", "even"}); ok {
						cfg.Datapath.Selection = s
					}
				case "response_sample":
					if i, ok := d.integer(v, f, 0, 65536); ok {
						cfg.Datapath.ResponseSample = int(i)
					}
				case "response_ports":
					if i, ok := d.integer(v, f, 1, olc.MaxMaxPorts); ok {
						cfg.Datapath.ResponsePorts = int(i)
					}
				case "flow_table_size":
					if i, ok := d.integer(v, f, 64, 1<<24); ok {
						cfg.Datapath.FlowTableSize = int(i)
					}
				case "response_min_samples":
					if i, ok := d.integer(v, f, 1, 1000000); ok {
						cfg.Datapath.ResponseMinSamples = int(i)
					}
				}
			})
		}
	})
}

// signals decodes `signals: {<name>: {threshold: x}}`; the section replaces
// the default signal list.
func (d *decoder) signals(n *yaml.Node, path string, cfg *Config) {
	cfg.Thresholds = [olc.NumSignals]float64{}
	d.mapping(n, path, nil, func(name string, v *yaml.Node, field string) {
		sig, err := olc.ParseSignal(name)
		if err != nil {
			hint := "see docs/config.md for the canonical names"
			if s := spell.Closest(name, spell.Names(olc.Signals())); s != "" {
				hint = fmt.Sprintf("did you mean %q?", s)
			}
			d.add(v, field, fmt.Sprintf("unknown signal %q", name), hint)
			return
		}
		if isNull(v) || resolve(v).Kind != yaml.MappingNode {
			d.add(v, field, "must be a mapping with a threshold, got "+kindName(v), fmt.Sprintf("write %s: {threshold: …}", name))
			return
		}
		found := false
		d.mapping(v, field, []string{"threshold"}, func(_ string, tv *yaml.Node, f string) {
			found = true
			if sig.Unit() == olc.UnitSeconds && resolve(tv).Kind == yaml.ScalarNode && resolve(tv).Tag == "!!str" {
				// Seconds may be written as a duration: 50ms.
				if dur, ok := d.duration(tv, f); ok {
					cfg.Thresholds[sig] = dur.Seconds()
					d.thresholdSet[sig] = true
				}
				return
			}
			if x, ok := d.number(tv, f); ok {
				cfg.Thresholds[sig] = x
				d.thresholdSet[sig] = true
			}
		})
		if !found {
			d.add(v, join(field, "threshold"), "missing", fmt.Sprintf("write %s: {threshold: …}, or remove the signal", name))
		}
	})
}

// controller decodes the controller parameters.
func (d *decoder) controller(n *yaml.Node, path string, cfg *Config) {
	p := &cfg.Controller
	d.mapping(n, path, controllerKeys, func(key string, v *yaml.Node, field string) {
		switch key {
		case "response_target":
			if t, ok := d.responseTarget(v, field); ok {
				cfg.ResponseTarget = t
			}
		case "initial_target", "response_cooldown":
			if dur, ok := d.duration(v, field); ok {
				if key == "initial_target" {
					p.InitialTarget = dur
				} else {
					p.ResponseCooldown = dur
				}
			}
		case "activation_ticks", "cooldown_ticks":
			// The documented range, not the int's: "must be 0..1000" tells
			// the user what fits, "-2147483648..2147483647" does not.
			r := tickRanges[key]
			i, ok := d.integer(v, field, r.lo, r.hi)
			if !ok {
				if last := &d.problems[len(d.problems)-1]; last.Hint == "" && strings.Contains(last.Msg, "out of range") {
					last.Hint = r.hint
				}
				return
			}
			if key == "activation_ticks" {
				p.ActivationTicks = int(i)
			} else {
				p.Cooldown = int(i)
			}
		case "continue_every":
			if dur, ok := d.duration(v, field); ok {
				p.ContinueEvery = dur
			}
		case "onset_interval":
			if dur, ok := d.duration(v, field); ok {
				p.OnsetInterval = dur
			}
		default:
			x, ok := d.number(v, field)
			if !ok {
				return
			}
			*paramField(p, key) = x
		}
	})
}

// paramField returns the float field of p named key.
func paramField(p *adaptive.Params, key string) *float64 {
	switch key {
	case "ki":
		return &p.Ki
	case "kp":
		return &p.Kp
	case "smoothing":
		return &p.Smoothing
	case "hysteresis":
		return &p.Hysteresis
	case "saturation_boost":
		return &p.SaturationBoost
	case "max_step":
		return &p.MaxStep
	case "recovery_step":
		return &p.RecoveryStep
	case "min_pass_rate":
		return &p.MinPassRate
	case "corroboration_ratio":
		return &p.CorroborationRatio
	case "demand_smoothing":
		return &p.DemandSmoothing
	case "record_change":
		return &p.RecordChange
	case "onset_ratio":
		return &p.OnsetRatio
	case "target_factor":
		return &p.TargetFactor
	case "latency_kp":
		return &p.LatencyKp
	case "latency_ki":
		return &p.LatencyKi
	}
	panic("rules: no float parameter " + key)
}

// portNumber decodes a port number 1..65535.
func (d *decoder) portNumber(n *yaml.Node, field string) (uint16, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err == nil && (v < 1 || v > 65535) {
			d.add(n, field, fmt.Sprintf("port %s is out of range: must be 1..65535", n.Value), "")
			return 0, false
		}
	}
	v, ok := d.integer(n, field, 1, 65535)
	return uint16(v), ok
}

// proto decodes tcp|udp.
func (d *decoder) proto(n *yaml.Node, field string) (olc.Proto, bool) {
	s, ok := d.enum(n, field, []string{"tcp", "udp"})
	if !ok {
		return 0, false
	}
	p, _ := olc.ParseProto(s)
	return p, true
}

// ports decodes `ports: auto` or the list of protected ports.
func (d *decoder) ports(n *yaml.Node, path string, cfg *Config) {
	r := resolve(n)
	if r.Kind == yaml.ScalarNode && !isNull(r) {
		if r.Value != "auto" {
			d.add(r, path, fmt.Sprintf("must be auto or a list of ports, got %s", kindName(r)), "write ports: auto, or ports: [{port: 443, proto: tcp}]")
			return
		}
		cfg.PortsAuto, cfg.Ports = true, nil
		return
	}
	cfg.PortsAuto, cfg.Ports = false, nil
	d.seq(n, path, func(_ int, item *yaml.Node, field string) {
		if item.Kind != yaml.MappingNode {
			d.add(item, field, "must be a mapping such as {port: 443, proto: tcp}, got "+kindName(item), portShorthandHint(item))
			return
		}
		p := Port{Proto: olc.ProtoTCP, Class: olc.ClassNormal}
		ok, hasPort := true, false
		d.mapping(item, field, portKeys, func(key string, v *yaml.Node, f string) {
			var good bool
			switch key {
			case "port":
				hasPort = true
				p.Port, good = d.portNumber(v, f)
			case "proto":
				p.Proto, good = d.proto(v, f)
			case "class":
				var s string
				if s, good = d.enum(v, f, []string{"critical", "normal", "best-effort"}); good {
					p.Class, _ = olc.ParseClass(s)
				}
			case "mode":
				var s string
				s, good = d.enum(v, f, []string{"observe", "enforce"})
				if !good && resolve(v).Value == "off" {
					d.problems[len(d.problems)-1].Hint = "a port cannot be switched off alone: remove it from ports, or list it under exceptions"
				}
				if good {
					p.Override, _ = olc.ParseMode(s)
				}
			case "action":
				var s string
				if s, good = d.enum(v, f, actionNames); good {
					p.Action, _ = olc.ParseAction(s)
					p.HasAction = true
				}
			case "response_target":
				if p.Target, good = d.responseTarget(v, f); good {
					p.HasTarget = true
				}
			}
			ok = ok && good
		})
		if !hasPort {
			d.add(item, join(field, "port"), "missing", "every entry needs a port number")
			ok = false
		}
		if ok {
			cfg.Ports = append(cfg.Ports, p)
			d.portPaths = append(d.portPaths, field)
		}
	})
}

// responseTarget decodes a response-time target: auto, off, a duration
// (50ms) or seconds (0.05), in (0, 30s].
func (d *decoder) responseTarget(n *yaml.Node, field string) (adaptive.ResponseTarget, bool) {
	r := resolve(n)
	if r.Kind == yaml.ScalarNode && r.Tag == "!!str" {
		switch r.Value {
		case "auto":
			return adaptive.ResponseTarget{Auto: true}, true
		case "off":
			return adaptive.ResponseTarget{}, true
		}
		dur, ok := d.duration(r, field)
		if !ok {
			d.problems[len(d.problems)-1].Hint = "write auto, off, or a duration such as 50ms"
			return adaptive.ResponseTarget{}, false
		}
		return d.targetSeconds(r, field, dur.Seconds())
	}
	x, ok := d.number(r, field)
	if !ok {
		return adaptive.ResponseTarget{}, false
	}
	return d.targetSeconds(r, field, x)
}

// targetSeconds checks a fixed target's range.
func (d *decoder) targetSeconds(n *yaml.Node, field string, x float64) (adaptive.ResponseTarget, bool) {
	if !(x > 0 && x <= adaptive.MaxResponseTarget) {
		d.add(n, field, fmt.Sprintf("response target %v s is out of range: must be in (0, 30s]", x), "write auto, off, or a duration such as 50ms")
		return adaptive.ResponseTarget{}, false
	}
	return adaptive.ResponseTarget{Seconds: x}, true
}

// portShorthandHint answers a bare port number in a port list
// (`ports: [8080]`): every entry is a mapping, so that a protocol can be
// given.
func portShorthandHint(item *yaml.Node) string {
	if item.Kind == yaml.ScalarNode && item.Tag == "!!int" {
		return fmt.Sprintf("write {port: %s}, or {port: %s, proto: udp}", item.Value, item.Value)
	}
	return ""
}

// exceptions decodes the exempt ports and source prefixes.
func (d *decoder) exceptions(n *yaml.Node, path string, cfg *Config) {
	d.mapping(n, path, exceptionKeys, func(key string, v *yaml.Node, field string) {
		switch key {
		case "ports":
			cfg.Exceptions.Ports = nil
			d.seq(v, field, func(_ int, item *yaml.Node, f string) {
				if item.Kind != yaml.MappingNode {
					d.add(item, f, "must be a mapping such as {port: 22, proto: tcp}, got "+kindName(item), portShorthandHint(item))
					return
				}
				k := olc.PortKey{Proto: olc.ProtoTCP}
				ok, hasPort := true, false
				d.mapping(item, f, exPortKeys, func(key string, v *yaml.Node, ff string) {
					var good bool
					if key == "port" {
						hasPort = true
						k.Port, good = d.portNumber(v, ff)
					} else {
						k.Proto, good = d.proto(v, ff)
					}
					ok = ok && good
				})
				if !hasPort {
					d.add(item, join(f, "port"), "missing", "every entry needs a port number")
					ok = false
				}
				if ok {
					cfg.Exceptions.Ports = append(cfg.Exceptions.Ports, k)
					d.exPortPaths = append(d.exPortPaths, f)
				}
			})
		case "management":
			cfg.Exceptions.Management = nil
			d.seq(v, field, func(_ int, item *yaml.Node, f string) {
				if k, ok := d.managementPort(item, f); ok {
					cfg.Exceptions.Management = append(cfg.Exceptions.Management, k)
					d.mgmtPaths = append(d.mgmtPaths, f)
				}
			})
		case "sources":
			cfg.Exceptions.Sources = nil
			d.seq(v, field, func(_ int, item *yaml.Node, f string) {
				s, ok := d.str(item, f)
				if !ok {
					return
				}
				if pfx, ok := d.prefix(item, f, s); ok {
					cfg.Exceptions.Sources = append(cfg.Exceptions.Sources, pfx)
					d.sourcePaths = append(d.sourcePaths, f)
				}
			})
		}
	})
}

// managementPort decodes an exceptions.management entry: a port number
// (TCP, which every remote shell and config agent uses), or {port, proto}.
func (d *decoder) managementPort(item *yaml.Node, f string) (olc.PortKey, bool) {
	k := olc.PortKey{Proto: olc.ProtoTCP}
	if item.Kind != yaml.MappingNode {
		if item.Kind != yaml.ScalarNode || item.Tag != "!!int" {
			d.add(item, f, "must be a port number such as 22, or {port: 22, proto: tcp}, got "+kindName(item), quotedNumberHint(item))
			return k, false
		}
		var ok bool
		k.Port, ok = d.portNumber(item, f)
		return k, ok
	}
	ok, hasPort := true, false
	d.mapping(item, f, exPortKeys, func(key string, v *yaml.Node, ff string) {
		var good bool
		if key == "port" {
			hasPort = true
			k.Port, good = d.portNumber(v, ff)
		} else {
			k.Proto, good = d.proto(v, ff)
		}
		ok = ok && good
	})
	if !hasPort {
		d.add(item, join(f, "port"), "missing", "every entry needs a port number")
		ok = false
	}
	return k, ok
}

// prefix parses a CIDR prefix, or a bare address as a host prefix.
func (d *decoder) prefix(n *yaml.Node, field, s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if addr, zoned, ok := strings.Cut(s, "%"); ok {
		// An IPv6 zone (fe80::1%eth0) names an interface; a prefix cannot
		// hold one, and dropping it silently would exempt the address on
		// every interface.
		zone, bits, hasBits := strings.Cut(zoned, "/")
		if hasBits {
			addr += "/" + bits
		}
		d.add(n, field, fmt.Sprintf("%q has an interface zone %%%s: exceptions apply on every interface", s, zone),
			fmt.Sprintf("write %s", addr))
		return netip.Prefix{}, false
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			d.add(n, field, fmt.Sprintf("%q is not an address or CIDR prefix", s), "write e.g. 10.0.0.0/8, 192.0.2.1 or 2001:db8::/32")
			return netip.Prefix{}, false
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		d.add(n, field, fmt.Sprintf("%q is not a CIDR prefix", s), "write e.g. 10.0.0.0/8 (IPv4 lengths 0..32, IPv6 0..128)")
		return netip.Prefix{}, false
	}
	if m := p.Masked(); m != p {
		d.add(n, field, fmt.Sprintf("%s has bits set beyond the prefix length", s), fmt.Sprintf("did you mean %s?", m))
		return netip.Prefix{}, false
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, true
}

// action decodes the shedding action.
func (d *decoder) action(n *yaml.Node, path string, cfg *Config) {
	d.mapping(n, path, actionKeys, func(key string, v *yaml.Node, field string) {
		switch key {
		case "kind":
			if s, ok := d.enum(v, field, actionNames); ok {
				cfg.Action.Kind, _ = olc.ParseAction(s)
			}
		case "reject_rate":
			if i, ok := d.integer(v, field, 0, olc.MaxRejectRate); ok {
				cfg.Action.RejectRate = int(i)
			}
		case "reject_burst":
			if i, ok := d.integer(v, field, 1, olc.MaxRejectRate); ok {
				cfg.Action.RejectBurst = int(i)
			}
		case "dscp":
			if i, ok := d.integer(v, field, 0, 63); ok {
				cfg.Action.DSCP, cfg.Action.SetDSCP = uint8(i), true
			}
		case "fwmark":
			if i, ok := d.integer(v, field, 0, math.MaxUint32); ok {
				cfg.Action.Fwmark = uint32(i)
			}
		}
	})
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// orList renders "a, b or c".
func orList(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// closest returns the candidate nearest to s by edit distance, when it is
// close enough to be a plausible typo.
func closest(s string, candidates []string) string {
	if c := spell.Closest(s, candidates); c != "" {
		return c
	}
	// A truncated name ("min_pass" for "min_pass_rate") is far in edit
	// distance but still the obvious intent.
	for _, c := range candidates {
		if len(s) >= 3 && strings.HasPrefix(c, s) {
			return c
		}
	}
	return ""
}
