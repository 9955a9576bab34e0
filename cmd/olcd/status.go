package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/cli"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/spell"
)

// clientTimeout bounds an admin request. A write waits for the tick loop,
// which may be mid-tick, so it is generous.
const clientTimeout = 10 * time.Second

// cmdStatus prints what the running daemon sees and does.
func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stderr)
	asJSON := fs.Bool("json", false, "print the status document as JSON")
	all := fs.Bool("all", false, "also list available signals that have no threshold")
	socket := socketFlag(fs)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := cli.NoArgs(fs, stderr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	st, err := api.NewClient(*socket, clientTimeout).Status(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printStatus(stdout, st, *all, time.Now())
	return nil
}

// printStatus renders the status as aligned tables.
func printStatus(w io.Writer, st *api.Status, all bool, now time.Time) {
	src := st.ConfigSource
	if n := len(st.Overrides); n > 0 {
		src += fmt.Sprintf(" + %d live override(s)", n)
	}
	if st.Ticks == 0 && st.UpdatedAt.IsZero() {
		// The admin socket answers while the datapath is still loaded and
		// attached: the empty tables ("no protected ports", no
		// interfaces, no overload) would read as what olcd does.
		fmt.Fprintf(w, "olcd %s   config %s\n", st.Version, src)
		fmt.Fprintf(w, "starting (up %s): loading and attaching the datapath; no tick yet, nothing to show\n",
			now.Sub(st.StartedAt).Round(100*time.Millisecond))
		return
	}
	fmt.Fprintf(w, "olcd %s   mode %s   config %s\n", st.Version, strings.ToUpper(st.Mode), src)
	fmt.Fprintf(w, "tick %d every %gs, last %s ago, up %s\n", st.Ticks, st.IntervalS,
		ago(now, st.UpdatedAt), now.Sub(st.StartedAt).Round(time.Second))
	printConfigNotices(w, st)
	fmt.Fprintln(w)

	ov := st.Overload
	if ov.Active {
		since := ""
		if ov.Since != nil {
			since = fmt.Sprintf(" since %s (%s)", ov.Since.Local().Format("15:04:05"), now.Sub(*ov.Since).Round(time.Second))
		}
		enforcing, observing := portsByMode(st.Ports)
		switch {
		case st.Mode == "off":
			fmt.Fprintf(w, "OVERLOAD%s: pressure %.2f; mode OFF: nothing is shed (the controller would shed %.1f%%)\n", since, ov.Pressure, 100*ov.DropProbability)
		case len(enforcing) > 0 && len(observing) > 0:
			// Per-port modes: say which ports shed and which only count.
			fmt.Fprintf(w, "OVERLOAD%s: pressure %.2f, node drop probability %.1f%%: shedding on %s (enforce); counted, not dropped, on %s (observe)\n",
				since, ov.Pressure, 100*ov.DropProbability, strings.Join(enforcing, ", "), strings.Join(observing, ", "))
		case len(enforcing) > 0 || (st.Mode == "enforce" && len(observing) == 0):
			fmt.Fprintf(w, "OVERLOAD%s: pressure %.2f, shedding %.1f%% of new connections\n", since, ov.Pressure, 100*ov.DropProbability)
		case st.Mode == "observe" || len(observing) > 0:
			fmt.Fprintf(w, "OVERLOAD%s: pressure %.2f, would shed %.1f%% of new connections (observe mode: counted, not dropped)\n", since, ov.Pressure, 100*ov.DropProbability)
		default:
			fmt.Fprintf(w, "OVERLOAD%s: pressure %.2f; mode OFF: nothing is shed (the controller would shed %.1f%%)\n", since, ov.Pressure, 100*ov.DropProbability)
		}
	} else {
		fmt.Fprintf(w, "no overload: pressure %.2f, drop probability %.3f\n", ov.Pressure, ov.DropProbability)
	}
	if ov.Reason != "" {
		fmt.Fprintf(w, "  %s\n", ov.Reason)
	}
	if lb := st.LB; lb != nil && lb.AgentAddress != "" {
		fmt.Fprintf(w, "load balancers: HAProxy agent on %s answers %q for the node (GET /v1/lb per port)\n", lb.AgentAddress, lb.AgentReply)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SIGNAL\tVALUE\tTHRESHOLD\tPRESSURE\tSTATE")
	for _, s := range st.Signals {
		if s.Threshold == nil && !all {
			continue
		}
		state := "ok"
		switch {
		case !s.Available && s.Reason != "":
			state = "unavailable: " + s.Reason
		case !s.Available:
			state = "unavailable"
		case s.Pressure != nil && *s.Pressure > 1 && !s.Corroborated:
			state = "over, not corroborated"
		case s.Pressure != nil && *s.Pressure > 1:
			state = "OVER"
		case s.Threshold == nil:
			state = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, fmtSignal(s.Name, s.Value), fmtSignal(s.Name, s.Threshold), fmtPtr(s.Pressure, 2), state)
	}
	tw.Flush()
	fmt.Fprintln(w)

	fmt.Fprint(w, "classes:")
	for _, c := range st.Classes {
		fmt.Fprintf(w, "  %s p=%.3f", c.Class, c.DropProbability)
	}
	fmt.Fprint(w, "\n\n")

	if len(st.Ports) == 0 {
		fmt.Fprintln(w, "no protected ports (ports: auto protects TCP ports listening on non-loopback addresses)")
	} else {
		fmt.Fprintln(tw, "PORT\tCLASS\tMODE\tACTION\tSOURCE\tP\tP APPLIES TO\tNEW/S\tUNIQUE/S\tRETX/S\tDROP%\tREJECT/S\tWOULD-DROP%\tMARK%\tEXEMPT/S\tSTALE/S\tACCEPTQ")
		for _, p := range st.Ports {
			fmt.Fprintf(tw, "%s/%d\t%s\t%s\t%s\t%s\t%.3f\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\n",
				p.Proto, p.Port, p.Class, p.Mode, p.Action, p.Source, p.DropProbability, appliesTo(p.Retransmits), p.NewPerS, p.UniquePerS,
				p.RetransmitsPerS, 100*p.DropShare, p.RejectedPerS+p.WouldRejectPerS, 100*p.WouldDropShare, 100*p.MarkedShare,
				p.ExemptPerS, p.StalePerS, fmtPtr(p.AcceptQueueFill, 2))
		}
		tw.Flush()
		fmt.Fprint(w, portsLegend)
		if st.RejectLimited > 0 {
			fmt.Fprintf(w, "reject: %d SYNs dropped unanswered over action.reject_rate since start\n", st.RejectLimited)
		}
		for _, p := range st.Ports {
			if p.CappedPerS > 0 {
				fmt.Fprintf(w, "cap: %s/%d: %.1f/s refused by its static caps (ports[].caps; of DROP%%, or WOULD-DROP%% in observe)\n",
					p.Proto, p.Port, p.CappedPerS)
			}
		}
		printResponse(w, st)
		printKeepAlive(w, st)
	}
	if len(st.Exceptions) > 0 {
		fmt.Fprintf(w, "exempt: %s\n", strings.Join(st.Exceptions, ", "))
	}
	for _, l := range st.ListenersExempt {
		why := "listed in " + l.Reason
		if l.Reason == "exceptions.management" {
			why = "a management port (exceptions.management), never shed so operators can reach the node; list it under ports: to protect it"
		}
		fmt.Fprintf(w, "listening, not protected: %s/%d: %s\n", l.Proto, l.Port, why)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(tw, "INTERFACE\tHOOK\tATTACH MODE\tEGRESS")
	for _, a := range st.Interfaces {
		eg := a.Egress
		if eg == "" {
			eg = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Name, a.Hook, a.Mode, eg)
	}
	for _, n := range st.InterfacesWaiting {
		fmt.Fprintf(tw, "%s\t-\tnot attached: does not exist (attached when it appears)\n", n)
	}
	tw.Flush()
	if st.Unclassified > 0 {
		fmt.Fprintf(w, "unclassified frames passed since start: %d\n", st.Unclassified)
	}
	if len(st.Overrides) > 0 {
		fmt.Fprintln(w, "\nlive overrides (dropped on reload):")
		for _, o := range st.Overrides {
			fmt.Fprintf(w, "  %s  %s  %s\n", o.At.Local().Format("15:04:05"), o.Kind, strings.TrimSpace(o.Value))
		}
	}
	if len(st.SampleErrors) > 0 {
		fmt.Fprintln(w, "\nsources unreadable in the last tick:")
		for _, e := range st.SampleErrors {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// fmtSignal formats a signal value with the precision its unit deserves.
func fmtSignal(name string, v *float64) string {
	if v == nil {
		return "-"
	}
	if s, err := olc.ParseSignal(name); err == nil && s.IsFraction() {
		return strconv.FormatFloat(*v, 'f', 3, 64)
	} else if err == nil && s.Unit() == olc.UnitSeconds {
		return fmtSeconds(v)
	}
	return strconv.FormatFloat(*v, 'f', 2, 64)
}

// fmtSeconds writes a duration in seconds with three significant digits
// in a readable unit ("20.4ms", "1.25s"); "-" when unavailable.
func fmtSeconds(v *float64) string {
	if v == nil {
		return "-"
	}
	switch x := *v; {
	case x < 1e-3:
		return strconv.FormatFloat(x*1e6, 'g', 3, 64) + "µs"
	case x < 1:
		return strconv.FormatFloat(x*1e3, 'g', 3, 64) + "ms"
	default:
		return strconv.FormatFloat(x, 'g', 3, 64) + "s"
	}
}

// printResponse prints the response time of the timed ports and the flow
// table of the response timer.
func printResponse(w io.Writer, st *api.Status) {
	rt := st.ResponseTiming
	if rt == nil {
		fmt.Fprintln(w, "response timing off (datapath.response_sample: 0)")
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tRESPONSE P50\tP95\tP99\tSAMPLES\tREQUESTS/S\tINFLIGHT\tCAPACITY")
	for _, p := range st.Ports {
		if !p.Timed || p.ResponseTime == nil {
			fmt.Fprintf(tw, "%s/%d\tnot timed\t\t\t\t\t\t\n", p.Proto, p.Port)
			continue
		}
		r := p.ResponseTime
		fmt.Fprintf(tw, "%s/%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Proto, p.Port, fmtSeconds(r.P50S), fmtSeconds(r.P95S),
			fmtSeconds(r.P99S), r.Samples, fmtPtr(p.RequestsPerS, 1), fmtInflight(p), fmtCapacity(p.Capacity))
	}
	tw.Flush()
	node := map[string]*float64{}
	for _, s := range st.Signals {
		node[s.Name] = s.Value
	}
	fmt.Fprintf(w, "node (worst timed port): p50 %s  p95 %s  p99 %s\n", fmtSeconds(node["response_time_p50"]),
		fmtSeconds(node["response_time_p95"]), fmtSeconds(node["response_time_p99"]))
	sample := "every flow timed"
	if rt.Sample > 1 {
		sample = fmt.Sprintf("1 flow in %d timed, rates scaled", rt.Sample)
	}
	fmt.Fprintf(w, "(first request byte in to first answer byte out, over the last tick; %s; - is fewer than %d samples)\n",
		sample, rt.MinSamples)
	fmt.Fprintf(w, "flow table: %d of %d flows (%.1f%%), %d waiting for an answer; since start %d inserted, %d evicted, %d expired, %d closed\n",
		rt.FlowsTracked, rt.FlowTableCapacity, 100*rt.FlowTableFill, rt.FlowsOutstanding, rt.Inserts, rt.Evictions, rt.Expired, rt.Forgotten)
}

// printKeepAlive prints the timed ports' demand on open connections, for
// the ports with the request gate on or any request start on an open
// connection since they were timed; nothing when there is none.
func printKeepAlive(w io.Writer, st *api.Status) {
	var shown []api.PortStatus
	for _, p := range st.Ports {
		if ka := p.KeepAlive; ka != nil && (ka.RequestGate || ka.Totals.Reused > 0) {
			shown = append(shown, p)
		}
	}
	if len(shown) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT	REQUEST GATE	REUSED/S	REUSED%	RESETS/S	WOULD-RESET/S	RESETS SINCE START")
	for _, p := range shown {
		ka := p.KeepAlive
		gate := "off"
		if ka.RequestGate {
			gate = "on"
		}
		fmt.Fprintf(tw, "%s/%d\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\n", p.Proto, p.Port, gate, ka.ReusedPerS, 100*ka.ReusedShare,
			ka.ResetsPerS, ka.WouldResetPerS, ka.Totals.Resets)
	}
	tw.Flush()
	fmt.Fprintln(w, "(REUSED/S: requests started on connections already open, nothing outstanding; REUSED%: their share")
	fmt.Fprintln(w, " of the port's demand, with UNIQUE/S; RESETS/S: those the request gate shed, resetting the connection)")
}

// fmtInflight renders a port's requests in flight, and the law's ceiling
// on them while it holds one: "33 ≤ 40".
func fmtInflight(p api.PortStatus) string {
	s := fmtPtr(p.InflightRequests, 0)
	if p.InFlightCeiling != nil {
		s += fmt.Sprintf(" ≤ %d", *p.InFlightCeiling)
	}
	return s
}

// fmtCapacity renders a port's measured capacity: "780/s, 2.5s ago", or
// "-" until the port was saturated once.
func fmtCapacity(c *api.Capacity) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f/s, %.1fs ago", c.RequestsPerS, c.AgeS)
}

func fmtPtr(v *float64, prec int) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return now.Sub(t).Round(10 * time.Millisecond).String()
}

// cmdSet changes the running daemon: mode, one threshold, or a patch.
func cmdSet(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("set", stderr)
	socket := socketFlag(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage:
  olcd set mode off|observe|enforce     off is the kill switch: nothing is shed from the next tick
  olcd set threshold SIGNAL VALUE       e.g. olcd set threshold cpu_busy 0.75
  olcd set patch FILE|-                 a partial config document (YAML or JSON)

Live overrides show in 'olcd status' and are dropped on reload.

`)
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	c := api.NewClient(*socket, clientTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	var err error
	switch {
	case rest[0] == "mode" && len(rest) == 2:
		err = c.SetMode(ctx, rest[1])
	case rest[0] == "threshold" && len(rest) == 3:
		if _, perr := olc.ParseSignal(rest[1]); perr != nil {
			hint := "the canonical names are in docs/signals.md"
			if c := spell.Closest(rest[1], spell.Names(olc.Signals())); c != "" {
				hint = fmt.Sprintf("did you mean %q?", c)
			}
			fmt.Fprintf(stderr, "olcd set threshold: unknown signal %q (%s)\n", rest[1], hint)
			return cli.ErrUsage
		}
		sig, _ := olc.ParseSignal(rest[1])
		// A number strconv reads is sent as written, 1e309 (ErrRange), NaN
		// and Inf included: the validator refuses each as it would in the
		// file, naming the value and the threshold's range (exit 1, as for
		// 80 or -1). Only what is no number at all is a usage error, and
		// nothing else reaches the document (no YAML is injected).
		if _, perr := strconv.ParseFloat(rest[2], 64); perr != nil && !errors.Is(perr, strconv.ErrRange) {
			d, derr := time.ParseDuration(rest[2])
			if derr != nil || sig.Unit() != olc.UnitSeconds {
				fmt.Fprintf(stderr, "olcd set threshold: %q is not a number\n", rest[2])
				return cli.ErrUsage
			}
			rest[2] = strconv.FormatFloat(d.Seconds(), 'g', -1, 64)
		}
		// One line: a problem the daemon finds is at "admin patch:1", the
		// line of the value the user typed, not of a document never seen.
		doc := fmt.Sprintf("signals: {%s: {threshold: %s}}\n", rest[1], rest[2])
		err = c.Patch(ctx, []byte(doc))
	case rest[0] == "patch" && len(rest) == 2:
		var doc []byte
		if rest[1] == "-" {
			doc, err = io.ReadAll(os.Stdin)
		} else {
			doc, err = os.ReadFile(rest[1])
		}
		if err != nil {
			return fmt.Errorf("read patch: %w", err)
		}
		err = c.Patch(ctx, doc)
	default:
		fs.Usage()
		return cli.ErrUsage
	}
	if err != nil {
		return err
	}
	if len(rest) == 2 && rest[0] == "mode" && rest[1] == "off" {
		// The kill switch writes the datapath before the daemon answers.
		fmt.Fprintln(stdout, "ok: mode off applied; the datapath passes everything now")
		return nil
	}
	fmt.Fprintf(stdout, "ok: %s applied; it takes effect at the next tick\n", strings.Join(rest, " "))
	return nil
}

// cmdReload asks the daemon to re-read its config file.
func cmdReload(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reload", stderr)
	socket := socketFlag(fs)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	// `olcd reload new.yaml` would re-read the running file, not new.yaml,
	// and answer "ok": a stray argument is refused before any request.
	if err := cli.NoArgs(fs, stderr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	c := api.NewClient(*socket, clientTimeout)
	overrides := -1 // unknown: the status before could not be read
	if before, err := c.Status(ctx); err == nil {
		overrides = len(before.Overrides)
	}
	st, err := c.Reload(ctx)
	if err != nil {
		return err
	}
	switch {
	case overrides == 0:
		fmt.Fprintln(stdout, "ok: config reloaded")
	case overrides > 0:
		fmt.Fprintf(stdout, "ok: config reloaded; %d live override(s) dropped\n", overrides)
	default:
		fmt.Fprintln(stdout, "ok: config reloaded; live overrides dropped")
	}
	if len(st.RestartPending) > 0 {
		fmt.Fprintln(stdout, restartPendingLine(st.RestartPending))
	}
	return nil
}

// printConfigNotices prints what the operator must know of the config in
// force: a refused reload of the file, settings waiting for a start.
func printConfigNotices(w io.Writer, st *api.Status) {
	if rf := st.ReloadRefused; rf != nil {
		// The error of an invalid file renders its problems too: print them
		// once, as the list.
		why := rf.Error
		if len(rf.Problems) > 0 {
			why = fmt.Sprintf("%d problem(s):", len(rf.Problems))
		}
		fmt.Fprintf(w, "CONFIG FILE REFUSED at %s (%s): the running config stays — %s\n",
			rf.At.Local().Format("15:04:05"), rf.Trigger, why)
		for _, p := range rf.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	if len(st.RestartPending) > 0 {
		fmt.Fprintln(w, restartPendingLine(st.RestartPending))
	}
}

// restartPendingLine says which settings the config changed that only a
// start applies (api.Status.RestartPending), and what that start needs.
func restartPendingLine(fields []string) string {
	s := fmt.Sprintf("RESTART PENDING: %s changed, still as at the start; the next start applies them", strings.Join(fields, ", "))
	if slices.Contains(fields, "datapath") {
		s += " (a changed datapath section: that start recreates the maps it resizes, carrying the policies over, and keeps shedding)"
	}
	return s
}

// portsByMode names the protected ports ("tcp/443") whose effective mode is
// enforce and those whose is observe, in the status's order (ports off are
// in neither).
func portsByMode(ports []api.PortStatus) (enforcing, observing []string) {
	for _, p := range ports {
		name := fmt.Sprintf("%s/%d", p.Proto, p.Port)
		switch p.Mode {
		case "enforce":
			enforcing = append(enforcing, name)
		case "observe":
			observing = append(observing, name)
		}
	}
	return enforcing, observing
}

// appliesTo renders a port's retransmit rule (api.PortStatus.Retransmits)
// as what its drop probability applies to.
func appliesTo(rule string) string {
	switch rule {
	case "shed":
		return "first attempts (retransmits shed)"
	case "last":
		return "retransmits (first attempts pass)"
	}
	return "all new work"
}

// portsLegend explains the ports table of printStatus.
const portsLegend = `(per second and % over the last tick; NEW/S counts SYN retransmits too, UNIQUE/S does not;
 P APPLIES TO: all new work, or first attempts with every retransmit of a dropped SYN shed,
 or retransmits alone with every first attempt passing (docs/controller.md, retransmits last);
 DROP%, WOULD-DROP% and MARK% are shares of NEW/S; REJECT/S: dropped SYNs answered with a reset
 (in observe mode: would be); ACCEPTQ is the accept-queue fill)
`
