package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/netif"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
)

// linkEventBuffer is the receive buffer asked for the link-event socket
// (bytes). The kernel default (about 200 KB) overflows when a burst of link
// changes meets a daemon that is not scheduled, which is what an overloaded
// node looks like; 4 MB holds tens of thousands of events.
const linkEventBuffer = 4 << 20

// resubscribeAfter is the pause before subscribing again to link events
// after the subscription ended with an error.
const resubscribeAfter = time.Second

// linkState is what following the interfaces keeps between two syncs.
// Owned by the tick loop.
type linkState struct {
	log       *slog.Logger
	changes   *prometheus.CounterVec // olcd_interface_changes_total, by change
	following bool                   // set by Run once attached
	warned    map[string]string      // interface → the last problem logged for it
	waiting   []string               // listed interfaces that do not exist
}

// watch returns a channel that receives a value (coalesced: capacity
// 1) whenever a link of the daemon's network namespace is created, deleted
// or changes, until ctx is done. When the subscription ends with an error
// (events lost to a full socket buffer), the channel fires at once so that
// every interface is checked, and the subscription is made again after
// resubscribeAfter. The check every DiscoverEvery stands in for events
// while there is no subscription.
func (l *linkState) watch(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	poke := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		warned := false
		for ctx.Err() == nil {
			updates := make(chan netlink.LinkUpdate, 256)
			done := make(chan struct{})
			err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
				ReceiveBufferSize: linkEventBuffer, ReceiveBufferForceSize: true,
				ErrorCallback: func(err error) {
					if ctx.Err() == nil { // closing the socket at a stop fails the receive
						l.log.Warn("link events lost: checking every interface, subscribing again", "err", err)
					}
				},
			})
			if err != nil {
				if !warned {
					l.log.Warn("subscribe to link events: interfaces are checked periodically until it works", "every", DiscoverEvery, "err", err)
					warned = true
				}
			} else {
				warned = false
				stop := context.AfterFunc(ctx, func() { close(done) })
				for range updates {
					poke()
				}
				if stop() {
					close(done) // ended by an error: release the library's socket
				}
			}
			poke()
			select {
			case <-ctx.Done():
			case <-time.After(resubscribeAfter):
			}
		}
	}()
	return out
}

// syncInterfaces keeps the attachments in step with the links, so that
// protection survives what happens to interfaces while olcd runs:
//   - an interface deleted, or deleted and created again under its name (a
//     re-created bond or VLAN, a VM's tap), took olcd's program with it: the
//     stale attachment is dropped, and the interface attached again when it
//     exists and is wanted;
//   - with interfaces: [] an interface that appears, or comes up, and that
//     netif.Default would pick is attached; one that becomes a bridge or
//     bond port is detached (its master is protected). One that merely goes
//     down stays attached: its filter is still there when it comes back up;
//   - with a list, the listed interfaces (by name or altname) are attached
//     when they exist, and an interface a reload removed from the list is
//     detached;
//   - a renamed interface is detached and attached again under its new
//     name when that is wanted.
//
// Attachments are matched to links by interface index, so an altname in the
// list names the interface the loader attached under its name. The attach
// mode is the one the daemon started with. Expected events (an interface
// deleted, or gone while being attached) are logged at info level; attach
// failures once per interface until they change; "no interface attached" only
// when the periodic check (periodic true) still finds none.
func (d *Daemon) syncInterfaces(periodic bool) {
	d.links.sync(d.eng.dp, d.eng.cfg.Interfaces, d.eng.limits.attach, periodic)
}

// sync is syncInterfaces for the interface list listed, on dp, attaching
// with mode attach.
func (l *linkState) sync(dp datapath, listed []string, attach olc.AttachMode, periodic bool) {
	links, err := listLinks()
	if err != nil {
		l.warnLink("", err.Error())
		return
	}
	byIndex := make(map[int]netlink.Link, len(links))
	for _, ln := range links {
		byIndex[ln.Attrs().Index] = ln
	}
	auto := len(listed) == 0
	want, skipped := l.wanted(links, listed)

	attached := map[int]bool{}
	for _, a := range dp.Attachments() {
		ln, exists := byIndex[a.Ifindex]
		why := ""
		switch {
		case !exists:
			why = "interface deleted"
		case ln.Attrs().Name != a.Interface:
			why = "interface renamed to " + ln.Attrs().Name
		case auto && skipped[a.Interface] != "":
			why = "no longer selected: " + skipped[a.Interface]
		case !auto && want[a.Ifindex] == "":
			why = "no longer in interfaces:"
		}
		if why == "" {
			attached[a.Ifindex] = true
			continue
		}
		if err := dp.Detach(a.Interface); err != nil {
			l.log.Warn("detach interface", "interface", a.Interface, "reason", why, "err", err)
		} else {
			l.log.Info("interface detached", "interface", a.Interface, "reason", why)
		}
		l.changes.WithLabelValues("detached").Inc()
	}

	names := make([]string, 0, len(want))
	for idx, n := range want {
		if !attached[idx] {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		if err := dp.Attach(n, attach); err != nil {
			if loader.InterfaceGone(err) {
				l.noteLink(n, "interface gone while being attached")
			} else {
				l.warnLink(n, err.Error())
			}
			continue
		}
		delete(l.warned, n)
		l.changes.WithLabelValues("attached").Inc()
		// The loader's "datapath attached" names the hook and mode.
		l.log.Info("interface attached", "interface", n)
	}
	switch {
	case len(dp.Attachments()) > 0:
		delete(l.warned, "")
	case periodic:
		l.warnLink("", "no interface attached: nothing is protected until one is")
	}
}

// wanted returns the links to attach (ifindex → the name to attach it by)
// and, with no list (listed empty), the links netif.Default left out with
// the reason; a listed interface that does not exist is noted as waiting.
func (l *linkState) wanted(links []netlink.Link, listed []string) (want map[int]string, skipped map[string]string) {
	byName := make(map[string]netlink.Link, len(links))
	for _, ln := range links {
		byName[ln.Attrs().Name] = ln
		for _, alt := range ln.Attrs().AltNames {
			byName[alt] = ln
		}
	}
	want = map[int]string{}
	if len(listed) == 0 {
		var names []string
		names, skipped = netif.Default(links)
		for _, n := range names {
			want[byName[n].Attrs().Index] = n
		}
	}
	l.waiting = l.waiting[:0]
	for _, n := range listed {
		if ln, ok := byName[n]; ok {
			want[ln.Attrs().Index] = n
		} else {
			l.waiting = append(l.waiting, n)
			l.noteLink(n, "listed interface does not exist; it is attached when it appears")
		}
	}
	return want, skipped
}

// listLinks lists the links, retrying a dump the kernel interrupted (links
// changed while it was read; loader.RetryDump). Tests replace it.
var listLinks = listNetlinkLinks

func listNetlinkLinks() ([]netlink.Link, error) {
	var links []netlink.Link
	err := loader.RetryDump(func() (err error) { links, err = netlink.LinkList(); return err })
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	return links, nil
}

// checkListed returns an error naming the interfaces of the list that do
// not exist: a reload must not trade the running protection for a typo,
// as the start refuses one. Errors: "interfaces: eht0 does not exist".
func checkListed(cfg *rules.Config, names []string) error {
	var missing []string
	for _, n := range names {
		if _, err := netlink.LinkByName(n); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return cfg.ProblemAt("interfaces", fmt.Sprintf("%v does not exist", missing),
			"a listed interface must exist when the list is loaded; one deleted later is attached again when it returns")
	}
	return nil
}

// warnLink logs a problem with an interface ("" for all of them) at warning
// level unless the same one was logged last for it.
func (l *linkState) warnLink(name, problem string) {
	if !l.newLinkProblem(name, problem) {
		return
	}
	if name == "" {
		l.log.Warn("interfaces not attached", "problem", problem)
		return
	}
	l.log.Warn("interface not attached", "interface", name, "problem", problem)
}

// noteLink is warnLink at info level, for what happens to interfaces in
// normal operation.
func (l *linkState) noteLink(name, what string) {
	if l.newLinkProblem(name, what) {
		l.log.Info("interface not attached", "interface", name, "reason", what)
	}
}

func (l *linkState) newLinkProblem(name, problem string) bool {
	if l.warned == nil {
		l.warned = map[string]string{}
	}
	if prev, ok := l.warned[name]; ok && prev == problem {
		return false
	}
	l.warned[name] = problem
	return true
}
