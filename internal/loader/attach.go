package loader

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/lock"
	"github.com/olcd/olcd/internal/olc"
)

// FilterPrefix starts the name of every cls_bpf filter olcd creates. At
// Attach, filters with this prefix that belong to no live Datapath of this
// process are leftovers of a killed instance and are removed.
const FilterPrefix = "olcd"

// LockDir holds the attachment locks: while a Datapath is attached to an
// interface it holds an exclusive flock on LockDir/attach-<netns>-<ifindex>.lock
// (netns is the network namespace's inode). The kernel drops the lock when
// the process exits, however it exits.
const LockDir = "/run/olcd"

// filterName is the cls_bpf filter name (TCA_BPF_NAME) of olcd_tc, and
// egressFilterName that of olcd_tc_egress.
const (
	filterName       = FilterPrefix + "_tc"
	egressFilterName = FilterPrefix + "_tc_egress"
)

// Attachment describes one attached program.
type Attachment struct {
	Interface string
	Hook      string // "xdp" or "tc"
	Mode      string // "tcx" or "clsact" (tc); "native" or "generic" (xdp)
	// Ifindex is the interface's index when it was attached: a link
	// deleted and created again under the same name has a new one, and
	// the program went with the old.
	Ifindex int
	// Egress is how the TC egress program of response timing is attached
	// beside the ingress hook: "tcx" or "clsact"; "" when timing is off.
	Egress string
}

type attachment struct {
	Attachment
	netns uint64 // inode of the network namespace attached in
	// nl speaks netlink in the network namespace the interface was
	// attached in, so that Close removes filters there whatever thread or
	// namespace it is called from.
	nl   *netlink.Handle
	link link.Link // tcx and xdp
	// pinned is the bpffs path link is pinned at (Config.PinDir), ""
	// when not pinned. A full detach unpins it; Release leaves it.
	pinned string
	// clsact only: the filter as the kernel numbered it, and whether olcd
	// added the qdisc (and so may remove it when it is left empty).
	filter       *netlink.BpfFilter
	createdQdisc bool
	// egress is the TC egress program's attachment (response timing),
	// detached before this one; it uses this one's netlink handle.
	egress   *attachment
	sharedNL bool
	// lock says that this process is the olcd attached to the interface
	// (see LockDir); nil for egress, which shares its ingress's.
	lock *lock.File
	// takenOver says the attachment was a pinned one whose program was
	// replaced (Config.PinDir).
	takenOver bool
}

// Attachments lists the current attachments in the order they were made.
func (d *Datapath) Attachments() []Attachment {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Attachment, 0, len(d.attachments))
	for _, a := range d.attachments {
		out = append(out, a.Attachment)
	}
	return out
}

// Attach attaches the datapath to the interface named iface ("" mode means
// AttachAuto). The ladder is decided by attach results, never by kernel
// version: TC tries tcx and, on ebpf.ErrNotSupported, a clsact qdisc (created
// only if absent) with a direct-action cls_bpf filter named "olcd_tc"; XDP
// tries native and, on EOPNOTSUPP, EINVAL or ERANGE, generic mode.
//
// Before attaching it removes cls_bpf filters named with FilterPrefix that a
// killed instance left on the interface. It refuses, naming the program id,
// to attach XDP where another XDP program is attached.
//
// The interface is looked up, and attached, in the calling thread's network
// namespace.
//
// Errors name the hook, mode and interface, e.g. "attach xdp (native) to
// eth0: ...": unknown mode, unknown interface, already attached to it, a
// foreign XDP program, or the kernel refusing the attachment.
func (d *Datapath) Attach(iface string, mode olc.AttachMode) error {
	return d.attach(iface, mode, false)
}

// Detach removes the attachment to the interface named iface, as Close does
// for all of them. An interface that vanished took its programs with it:
// detaching it only releases what olcd held. Errors: not attached, or the
// kernel refusing to remove the program (the attachment is forgotten all
// the same, so that the interface can be attached again).
func (d *Datapath) Detach(iface string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, a := range d.attachments {
		if a.Interface == iface {
			d.attachments = slices.Delete(d.attachments, i, i+1)
			if err := a.detach(d.log); err != nil {
				return err
			}
			d.log.Info("datapath detached", "interface", iface, "hook", a.Hook, "mode", a.Mode)
			return nil
		}
	}
	return fmt.Errorf("detach from %s: not attached", iface)
}

// attach is Attach with a way to skip tcx, for testing the clsact rung.
func (d *Datapath) attach(iface string, mode olc.AttachMode, noTCX bool) error {
	if mode == "" {
		mode = olc.AttachAuto
	}
	if !mode.Valid() {
		return fmt.Errorf("attach %s to %s: unknown attach mode", mode, iface)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return fmt.Errorf("attach %s to %s: %w", mode, iface, err)
	}
	for _, a := range d.attachments {
		if a.Interface == iface {
			return fmt.Errorf("attach %s to %s: already attached (%s, %s)", mode, iface, a.Hook, a.Mode)
		}
	}
	nl, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("attach %s to %s: netlink: %w", mode, iface, err)
	}
	l, err := nl.LinkByName(iface)
	if err != nil {
		nl.Close()
		return fmt.Errorf("attach %s to %s: %w", mode, iface, err)
	}
	if !ethernetFramed(l) {
		nl.Close()
		return fmt.Errorf("attach %s to %s: link type %q has no Ethernet header, which the datapath parses "+
			"(its bytes would be read as one); attach to the Ethernet interface the traffic arrives on", mode, iface, l.Attrs().EncapType)
	}
	// The same interface under another name (renamed, or an altname)
	// would run the program twice on every packet.
	ns := currentNetns()
	for _, a := range d.attachments {
		if a.Ifindex == l.Attrs().Index && a.netns == ns {
			nl.Close()
			return fmt.Errorf("attach %s to %s: already attached as %s (%s, %s)", mode, iface, a.Interface, a.Hook, a.Mode)
		}
	}
	lk, err := d.lockInterface(nl, l, ns)
	if err != nil {
		nl.Close()
		return fmt.Errorf("attach %s to %s: %w", mode, iface, err)
	}
	fail := func(err error) error {
		nl.Close()
		return errors.Join(err, lk.Release())
	}
	var a *attachment
	if d.cfg.PinDir != "" {
		// A pinned datapath's programs are replaced in place: the
		// interface is never without one.
		if a, err = d.takeOverIngress(nl, l, mode, noTCX); err != nil {
			return fail(fmt.Errorf("attach %s to %s: %w", mode, iface, err))
		}
	}
	if a == nil {
		if err := d.removeLeftovers(nl, l); err != nil {
			return fail(fmt.Errorf("attach %s to %s: %w", mode, iface, err))
		}
		if err := d.checkOtherInstance(nl, l); err != nil {
			return fail(fmt.Errorf("attach %s to %s: %w", mode, iface, err))
		}
		if a, err = d.attachIngress(nl, l, mode, noTCX); err != nil {
			return fail(err)
		}
	}
	a.nl, a.netns, a.lock = nl, ns, lk
	if d.cfg.ResponseSample != 0 {
		// Egress sees the answers; with XDP ingress too, TC is the
		// only egress hook.
		e, err := d.attachOrTakeOverEgress(nl, l, noTCX)
		if err != nil {
			return errors.Join(err, a.detach(d.log))
		}
		e.nl, e.netns = nl, ns
		a.egress = e
		a.Egress = e.Mode
	} else if d.cfg.PinDir != "" {
		// Timing turned off since the pinned datapath was attached.
		if err := d.removePinnedEgress(nl, l); err != nil {
			return errors.Join(err, a.detach(d.log))
		}
	}
	d.attachments = append(d.attachments, a)
	d.log.Info("datapath attached", "interface", iface, "hook", a.Hook, "mode", a.Mode, "egress", a.Egress, "taken_over", a.takenOver)
	return nil
}

// attachIngress attaches the ingress program afresh, pinning its link when
// the datapath is pinned.
func (d *Datapath) attachIngress(nl *netlink.Handle, l netlink.Link, mode olc.AttachMode, noTCX bool) (a *attachment, err error) {
	iface := l.Attrs().Name
	switch mode {
	case olc.AttachAuto, olc.AttachTC:
		a, err = d.attachTC(nl, l, noTCX)
	case olc.AttachXDP:
		a, err = d.attachXDP(l, true, true)
	case olc.AttachXDPNative:
		a, err = d.attachXDP(l, true, false)
	case olc.AttachXDPGeneric:
		a, err = d.attachXDP(l, false, true)
	}
	if err != nil {
		return nil, err
	}
	if err := d.pinLink(a); err != nil {
		a.nl = nl
		return nil, errors.Join(fmt.Errorf("attach %s to %s: %w", mode, iface, err), a.detach(d.log))
	}
	return a, nil
}

// pinLink pins a fresh attachment's link under Config.PinDir (nothing
// without one, or for a clsact filter: netlink holds it, not a link).
func (d *Datapath) pinLink(a *attachment) error {
	if d.cfg.PinDir == "" || a.link == nil {
		return nil
	}
	path := linkPin(d.cfg.PinDir, a.Hook, a.Mode, a.Ifindex)
	_ = os.Remove(path) // a stale pin of a link the interface lost
	if err := a.link.Pin(path); err != nil {
		return fmt.Errorf("pin %s link: %w", a.Hook, err)
	}
	a.pinned = path
	return nil
}

// attachEgress attaches olcd_tc_egress with tcx or, on
// ebpf.ErrNotSupported, a clsact egress filter named "olcd_tc_egress".
func (d *Datapath) attachEgress(nl *netlink.Handle, l netlink.Link, noTCX bool) (*attachment, error) {
	name, idx := l.Attrs().Name, l.Attrs().Index
	if !noTCX {
		lk, err := link.AttachTCX(link.TCXOptions{
			Interface: idx,
			Program:   d.objs.OlcdTcEgress,
			Attach:    ebpf.AttachTCXEgress,
		})
		if err == nil {
			return &attachment{Attachment: Attachment{Interface: name, Hook: "tc-egress", Mode: "tcx", Ifindex: idx}, link: lk}, nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("attach tc egress (tcx) to %s: %w", name, err)
		}
	}
	return d.attachClsactDir(nl, l, d.objs.OlcdTcEgress, netlink.HANDLE_MIN_EGRESS, egressFilterName, "tc-egress")
}

func (d *Datapath) attachTC(nl *netlink.Handle, l netlink.Link, noTCX bool) (*attachment, error) {
	name, idx := l.Attrs().Name, l.Attrs().Index
	if !noTCX {
		lk, err := link.AttachTCX(link.TCXOptions{
			Interface: idx,
			Program:   d.objs.OlcdTc,
			Attach:    ebpf.AttachTCXIngress,
		})
		if err == nil {
			return &attachment{Attachment: Attachment{Interface: name, Hook: "tc", Mode: "tcx", Ifindex: idx}, link: lk}, nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("attach tc (tcx) to %s: %w", name, err)
		}
		d.log.Info("tcx not supported, falling back to clsact", "interface", name)
	}
	return d.attachClsact(nl, l)
}

func (d *Datapath) attachClsact(nl *netlink.Handle, l netlink.Link) (*attachment, error) {
	return d.attachClsactDir(nl, l, d.objs.OlcdTc, netlink.HANDLE_MIN_INGRESS, filterName, "tc")
}

// attachClsactDir adds prog as a direct-action cls_bpf filter named fname
// under parent (ingress or egress) of a clsact qdisc, created if absent.
func (d *Datapath) attachClsactDir(nl *netlink.Handle, l netlink.Link, prog *ebpf.Program, parent uint32, fname, hook string) (*attachment, error) {
	name, idx := l.Attrs().Name, l.Attrs().Index
	has, err := hasClsact(nl, l)
	if err != nil {
		return nil, fmt.Errorf("attach %s (clsact) to %s: %w", hook, name, err)
	}
	a := &attachment{Attachment: Attachment{Interface: name, Hook: hook, Mode: "clsact", Ifindex: idx}, nl: nl}
	if !has {
		q := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: idx,
			Handle:    netlink.MakeHandle(0xffff, 0),
			Parent:    netlink.HANDLE_CLSACT,
		}}
		if err := nl.QdiscAdd(q); err != nil {
			return nil, fmt.Errorf("attach %s (clsact) to %s: add clsact qdisc: %w", hook, name, err)
		}
		a.createdQdisc = true
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: idx,
			Parent:    parent,
			Protocol:  unix.ETH_P_ALL,
			// Priority and handle 0: the kernel picks free ones, so
			// olcd never collides with a filter already there.
		},
		Fd:           prog.FD(),
		Name:         fname,
		DirectAction: true,
	}
	if err := nl.FilterAdd(f); err != nil {
		err = fmt.Errorf("attach %s (clsact) to %s: add filter: %w", hook, name, err)
		return nil, errors.Join(err, a.removeQdiscIfEmpty(d.log))
	}
	// Find the numbers the kernel gave the filter, to delete exactly it.
	id, err := progID(prog)
	if err == nil {
		a.filter, err = findFilterAt(nl, l, parent, func(f *netlink.BpfFilter) bool {
			return f.Name == fname && f.Id == int(id)
		})
	}
	if err == nil && a.filter == nil {
		err = errors.New("the filter added is not listed")
	}
	if err != nil {
		err = fmt.Errorf("attach %s (clsact) to %s: %w", hook, name, err)
		return nil, errors.Join(err, a.removeQdiscIfEmpty(d.log))
	}
	return a, nil
}

func (d *Datapath) attachXDP(l netlink.Link, native, generic bool) (*attachment, error) {
	name, idx := l.Attrs().Name, l.Attrs().Index
	first := "native"
	if !native {
		first = "generic"
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return nil, fmt.Errorf("attach xdp (%s) to %s: XDP program id %d is already attached; "+
			"olcd does not replace another program (detach it, or use attach: tc)", first, name, x.ProgId)
	}
	if native {
		lk, err := link.AttachXDP(link.XDPOptions{Program: d.objs.OlcdXdp, Interface: idx, Flags: link.XDPDriverMode})
		if err == nil {
			return &attachment{Attachment: Attachment{Interface: name, Hook: "xdp", Mode: "native", Ifindex: idx}, link: lk}, nil
		}
		if !generic || !(errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ERANGE)) {
			return nil, fmt.Errorf("attach xdp (native) to %s: %w", name, err)
		}
		d.log.Info("native XDP refused, falling back to generic", "interface", name, "err", err)
	}
	lk, err := link.AttachXDP(link.XDPOptions{Program: d.objs.OlcdXdp, Interface: idx, Flags: link.XDPGenericMode})
	if err != nil {
		return nil, fmt.Errorf("attach xdp (generic) to %s: %w", name, err)
	}
	return &attachment{Attachment: Attachment{Interface: name, Hook: "xdp", Mode: "generic", Ifindex: idx}, link: lk}, nil
}

// detach undoes the attachment. A vanished interface took everything with
// it and is not an error.
func (a *attachment) detach(log *slog.Logger) (err error) {
	// After the programs are gone (or failed to go: the attachment is
	// forgotten all the same), the interface is free for the next olcd.
	defer func() { err = errors.Join(err, a.lock.Release()) }()
	if a.egress != nil {
		e := a.egress
		a.egress = nil
		e.sharedNL = true // a's handle, closed below
		if err := e.detach(log); err != nil {
			return errors.Join(err, a.detach(log))
		}
	}
	if a.nl != nil && !a.sharedNL {
		defer a.nl.Close()
	}
	if a.link != nil {
		if a.pinned != "" {
			if err := a.link.Unpin(); err != nil && !errors.Is(err, os.ErrNotExist) {
				log.Warn("unpin link", "path", a.pinned, "err", err)
			}
		}
		if err := a.link.Close(); err != nil {
			return fmt.Errorf("detach %s (%s) from %s: %w", a.Hook, a.Mode, a.Interface, err)
		}
		return nil
	}
	if a.filter != nil {
		if err := a.nl.FilterDel(a.filter); err != nil && !gone(err) && !a.clsactGone() {
			return fmt.Errorf("detach tc (clsact) from %s: delete filter: %w", a.Interface, err)
		}
	}
	return a.removeQdiscIfEmpty(log)
}

// clsactGone reports whether the interface has no clsact qdisc any more:
// another tool deleted it, and the filter with it (the kernel then answers
// EINVAL to the filter's deletion, not ENOENT).
func (a *attachment) clsactGone() bool {
	l, err := a.nl.LinkByIndex(a.Ifindex)
	if err != nil {
		return gone(err)
	}
	has, err := hasClsact(a.nl, l)
	return err == nil && !has
}

// removeQdiscIfEmpty removes the clsact qdisc if olcd created it and no
// filter is left on it: someone may have added theirs since, and deleting
// the qdisc would take them too.
func (a *attachment) removeQdiscIfEmpty(log *slog.Logger) error {
	if !a.createdQdisc {
		return nil
	}
	l, err := a.nl.LinkByIndex(a.Ifindex)
	if err != nil {
		if gone(err) {
			return nil
		}
		return fmt.Errorf("detach tc (clsact) from %s: %w", a.Interface, err)
	}
	if has, err := hasClsact(a.nl, l); err != nil || !has {
		if err != nil {
			return fmt.Errorf("detach tc (clsact) from %s: %w", a.Interface, err)
		}
		return nil // someone deleted it already
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := listFilters(a.nl, l, parent)
		if err != nil {
			return fmt.Errorf("detach tc (clsact) from %s: %w", a.Interface, err)
		}
		if len(fs) > 0 {
			log.Info("leaving the clsact qdisc olcd created: other filters use it", "interface", a.Interface)
			return nil
		}
	}
	q := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: a.Ifindex,
		Handle:    netlink.MakeHandle(0xffff, 0),
		Parent:    netlink.HANDLE_CLSACT,
	}}
	if err := a.nl.QdiscDel(q); err != nil && !gone(err) {
		return fmt.Errorf("detach tc (clsact) from %s: delete clsact qdisc: %w", a.Interface, err)
	}
	return nil
}

// lockInterface takes the interface's attachment lock (see LockDir). Held by
// another process (or another Datapath of this one), it means another olcd
// runs on the interface: the error names what that olcd attached when
// checkOtherInstance can tell (it may still be attaching), the lock file
// otherwise.
func (d *Datapath) lockInterface(nl *netlink.Handle, l netlink.Link, netns uint64) (*lock.File, error) {
	path := attachLockPath(netns, l.Attrs().Index)
	lk, err := lock.TryExclusive(path)
	if errors.Is(err, lock.ErrLocked) {
		if err := d.checkOtherInstance(nl, l); err != nil {
			return nil, err
		}
		who := "it"
		if pid := lock.Holder(path); pid != 0 {
			who = fmt.Sprintf("pid %d", pid)
		}
		return nil, fmt.Errorf("another olcd is attached (%s holds %s); two would shed the same connections twice: stop it first", who, path)
	}
	return lk, err
}

// attachLockPath is the lock file of the interface ifindex in the network
// namespace with inode netns.
func attachLockPath(netns uint64, ifindex int) string {
	return lockPathIn(LockDir, netns, ifindex)
}

// lockPathIn is attachLockPath in the directory dir.
func lockPathIn(dir string, netns uint64, ifindex int) string {
	return filepath.Join(dir, fmt.Sprintf("attach-%d-%d.lock", netns, ifindex))
}

// lockGlobIn is the glob pattern of every interface's lock of the
// namespace netns in the directory dir.
func lockGlobIn(dir string, netns uint64) string {
	return filepath.Join(dir, fmt.Sprintf("attach-%d-*.lock", netns))
}

// removeLeftovers deletes cls_bpf ingress filters named with FilterPrefix
// that are not this Datapath's. It runs holding the interface's lock, so no
// other olcd is running there: they are a killed olcd's, which cannot remove
// its own, and its program would keep running on frozen maps.
func (d *Datapath) removeLeftovers(nl *netlink.Handle, l netlink.Link) error {
	has, err := hasClsact(nl, l)
	if err != nil || !has {
		return err
	}
	own, err := progID(d.objs.OlcdTc)
	if err != nil {
		return err
	}
	ownEgress, err := progID(d.objs.OlcdTcEgress)
	if err != nil {
		return err
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := listFilters(nl, l, parent)
		if err != nil {
			return err
		}
		for _, f := range fs {
			bf, ok := f.(*netlink.BpfFilter)
			if !ok || !strings.HasPrefix(bf.Name, FilterPrefix) || bf.Id == int(own) || bf.Id == int(ownEgress) || bf.Handle == 0 {
				continue
			}
			if err := nl.FilterDel(bf); err != nil && !gone(err) {
				return fmt.Errorf("remove leftover filter %q (program id %d): %w", bf.Name, bf.Id, err)
			}
			d.log.Info("removed a leftover olcd filter", "interface", l.Attrs().Name,
				"filter", bf.Name, "program_id", bf.Id, "priority", bf.Priority)
		}
	}
	return nil
}

// checkOtherInstance refuses to attach where another running olcd already
// is: both would count every new connection and shed it, each with its own
// probability. Its tcx program, XDP program or clsact filter (one a live
// process holds: removeLeftovers took the others) is recognised by name.
func (d *Datapath) checkOtherInstance(nl *netlink.Handle, l netlink.Link) error {
	own := map[ebpf.ProgramID]bool{}
	for _, p := range []*ebpf.Program{d.objs.OlcdTc, d.objs.OlcdXdp, d.objs.OlcdTcEgress} {
		id, err := progID(p)
		if err != nil {
			return err
		}
		own[id] = true
	}
	other := func(id ebpf.ProgramID, hook string) error {
		if own[id] {
			return nil
		}
		if name := ProgramName(id); strings.HasPrefix(name, FilterPrefix) {
			return fmt.Errorf("another olcd is attached (%s program %s, id %d); two would shed the same connections twice: stop it first", hook, name, id)
		}
		return nil
	}
	q, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: ebpf.AttachTCXIngress})
	if err == nil {
		for _, p := range q.Programs {
			if err := other(p.ID, "tcx"); err != nil {
				return err
			}
		}
	} else if !errors.Is(err, ebpf.ErrNotSupported) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("query tcx programs: %w", err)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		if err := other(ebpf.ProgramID(x.ProgId), "xdp"); err != nil {
			return err
		}
	}
	has, err := hasClsact(nl, l)
	if err != nil || !has {
		return err
	}
	fs, err := listFilters(nl, l, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return err
	}
	for _, f := range fs {
		bf, ok := f.(*netlink.BpfFilter)
		if ok && strings.HasPrefix(bf.Name, FilterPrefix) && !own[ebpf.ProgramID(bf.Id)] && bf.Handle != 0 {
			return fmt.Errorf("another olcd is attached (clsact filter %q, program id %d); two would shed the same connections twice: stop it first", bf.Name, bf.Id)
		}
	}
	return nil
}

// programName returns the name of a loaded program, or "" when it cannot be
// read (gone already).
func ProgramName(id ebpf.ProgramID) string {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return ""
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return ""
	}
	return info.Name
}

func hasClsact(nl *netlink.Handle, l netlink.Link) (bool, error) {
	var qs []netlink.Qdisc
	err := RetryDump(func() (err error) { qs, err = nl.QdiscList(l); return err })
	if err != nil {
		return false, fmt.Errorf("list qdiscs: %w", err)
	}
	for _, q := range qs {
		if q.Type() == "clsact" {
			return true, nil
		}
	}
	return false, nil
}

func listFilters(nl *netlink.Handle, l netlink.Link, parent uint32) ([]netlink.Filter, error) {
	var fs []netlink.Filter
	err := RetryDump(func() (err error) { fs, err = nl.FilterList(l, parent); return err })
	if err != nil {
		return nil, fmt.Errorf("list filters: %w", err)
	}
	return fs, nil
}

func findFilter(nl *netlink.Handle, l netlink.Link, match func(*netlink.BpfFilter) bool) (*netlink.BpfFilter, error) {
	return findFilterAt(nl, l, netlink.HANDLE_MIN_INGRESS, match)
}

// findFilterAt is findFilter under parent (ingress or egress).
func findFilterAt(nl *netlink.Handle, l netlink.Link, parent uint32, match func(*netlink.BpfFilter) bool) (*netlink.BpfFilter, error) {
	fs, err := listFilters(nl, l, parent)
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		if bf, ok := f.(*netlink.BpfFilter); ok && match(bf) && bf.Handle != 0 {
			return bf, nil
		}
	}
	return nil, nil
}

// RetryDump runs fn, a netlink dump, again while the kernel reports it
// interrupted (netlink.ErrDumpInterrupted: the list changed while it was
// read), at most 5 times in all. It returns fn's last error.
func RetryDump(fn func() error) error {
	var err error
	for range 5 {
		if err = fn(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return err
		}
	}
	return err
}

func progID(p *ebpf.Program) (ebpf.ProgramID, error) {
	info, err := p.Info()
	if err != nil {
		return 0, fmt.Errorf("program info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return 0, errors.New("program info: kernel reports no program id")
	}
	return id, nil
}

// currentNetns identifies the calling thread's network namespace by its
// inode, asked of a socket (SIOCGSKNS, Linux 4.9) rather than read from
// /proc; 0 if the kernel cannot tell, which only weakens the duplicate check
// and shares one lock between namespaces.
func currentNetns() uint64 {
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(s)
	ns, err := unix.IoctlRetInt(s, unix.SIOCGSKNS)
	if err != nil {
		return 0
	}
	defer unix.Close(ns)
	var st unix.Stat_t
	if err := unix.Fstat(ns, &st); err != nil {
		return 0
	}
	return st.Ino
}

// ethernetFramed reports whether frames on l start with an Ethernet header:
// Ethernet-type links (physical NICs, veth, bridges, bonds, VLANs, VXLAN)
// and loopback (which carries a zeroed one). L3 devices (WireGuard, tun,
// IP-in-IP, GRE, PPP) hand the programs the IP header first.
func ethernetFramed(l netlink.Link) bool {
	t := l.Attrs().EncapType
	return t == "ether" || t == "loopback"
}

// InterfaceGone reports whether an error of Attach or Detach says the
// interface does not exist (any more): deleted before or while olcd
// attached to it. A caller following the interfaces waits for it to appear
// instead of reporting a failure.
func InterfaceGone(err error) bool { return gone(err) }

// gone reports whether err says the interface (and so its qdiscs and
// filters) no longer exists.
func gone(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}
