package daemon

import (
	"context"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/olcd/olcd/internal/loader"
)

// watchLinks returns a channel that receives a value (coalesced: capacity
// 1) whenever a link of the daemon's network namespace is created, deleted
// or changes, until ctx is done. Without a subscription (refused, or ended
// by an error such as a full socket buffer) the channel stays silent, and
// the check every DiscoverEvery still catches the change.
func (d *Daemon) watchLinks(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			d.log.Warn("link events: interfaces are checked every "+DiscoverEvery.String()+" instead", "err", err)
		},
	})
	if err != nil {
		d.log.Warn("subscribe to link events: interfaces are checked every "+DiscoverEvery.String()+" instead", "err", err)
		return out
	}
	go func() {
		<-ctx.Done()
		close(done)
	}()
	go func() {
		for range updates {
			select {
			case out <- struct{}{}:
			default:
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
//     selectInterfaces would pick is attached; one that becomes a bridge or
//     bond port is detached (its master is protected). One that merely goes
//     down stays attached: its filter is still there when it comes back up;
//   - with a list, the listed interfaces are attached when they exist, and
//     an interface a reload removed from the list is detached.
//
// The attach mode is the one the daemon started with. Problems are logged
// once per interface until they change.
func (d *Daemon) syncInterfaces() {
	links, err := netlink.LinkList()
	if err != nil {
		d.warnLink("", "list interfaces: "+err.Error())
		return
	}
	index := make(map[string]int, len(links))
	for _, l := range links {
		index[l.Attrs().Name] = l.Attrs().Index
	}
	want, skipped := d.cfg.Interfaces, map[string]string{}
	auto := len(want) == 0
	if auto {
		want, skipped = selectInterfaces(linkInfos(links))
	}
	attached := map[string]bool{}
	for _, a := range d.dp.Attachments() {
		idx, exists := index[a.Interface]
		why := ""
		switch {
		case !exists:
			why = "interface deleted"
		case idx != a.Ifindex:
			why = "interface created again under its name"
		case auto && skipped[a.Interface] != "":
			why = "no longer selected: " + skipped[a.Interface]
		case !auto && !slices.Contains(want, a.Interface):
			why = "no longer in interfaces:"
		}
		if why == "" {
			attached[a.Interface] = true
			continue
		}
		if err := d.dp.Detach(a.Interface); err != nil {
			d.log.Warn("detach interface", "interface", a.Interface, "reason", why, "err", err)
		} else {
			d.log.Info("interface detached", "interface", a.Interface, "reason", why)
		}
		d.metrics.interfaceChanges.WithLabelValues("detached").Inc()
	}
	for _, name := range want {
		if attached[name] {
			delete(d.linkWarned, name)
			continue
		}
		if _, exists := index[name]; !exists {
			d.warnLink(name, "interface named in interfaces: does not exist; it is attached when it appears")
			continue
		}
		if err := d.dp.Attach(name, loader.AttachMode(d.limits.attach)); err != nil {
			d.warnLink(name, err.Error())
			continue
		}
		delete(d.linkWarned, name)
		d.metrics.interfaceChanges.WithLabelValues("attached").Inc()
		for _, a := range d.dp.Attachments() {
			if a.Interface == name {
				d.log.Info("interface attached", "interface", name, "hook", a.Hook, "mode", a.Mode)
			}
		}
	}
	if len(d.dp.Attachments()) == 0 {
		d.warnLink("", "no interface attached: nothing is protected until one is")
	} else {
		delete(d.linkWarned, "")
	}
}

// warnLink logs a problem with an interface ("" for all of them) unless the
// same one was logged last for it.
func (d *Daemon) warnLink(name, problem string) {
	if d.linkWarned == nil {
		d.linkWarned = map[string]string{}
	}
	if prev, ok := d.linkWarned[name]; ok && prev == problem {
		return
	}
	d.linkWarned[name] = problem
	if name == "" {
		d.log.Warn(problem)
		return
	}
	d.log.Warn("interface not attached", "interface", name, "problem", problem)
}
