package loader

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FilterPrefix starts the name of every cls_bpf filter olcd creates. At
// Attach, filters with this prefix that belong to no live Datapath of this
// process are leftovers of a killed instance and are removed.
const FilterPrefix = "olcd"

// filterName is the cls_bpf filter name (TCA_BPF_NAME) of olcd_tc.
const filterName = FilterPrefix + "_tc"

// Attachment describes one attached program.
type Attachment struct {
	Interface string
	Hook      string // "xdp" or "tc"
	Mode      string // "tcx" or "clsact" (tc); "native" or "generic" (xdp)
}

type attachment struct {
	Attachment
	ifindex int
	// nl speaks netlink in the network namespace the interface was
	// attached in, so that Close removes filters there whatever thread or
	// namespace it is called from.
	nl   *netlink.Handle
	link link.Link // tcx and xdp
	// clsact only: the filter as the kernel numbered it, and whether olcd
	// added the qdisc (and so may remove it when it is left empty).
	filter       *netlink.BpfFilter
	createdQdisc bool
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
func (d *Datapath) Attach(iface string, mode AttachMode) error {
	return d.attach(iface, mode, false)
}

// attach is Attach with a way to skip tcx, for testing the clsact rung.
func (d *Datapath) attach(iface string, mode AttachMode, noTCX bool) error {
	if mode == "" {
		mode = AttachAuto
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
	if err := d.removeLeftovers(nl, l); err != nil {
		nl.Close()
		return fmt.Errorf("attach %s to %s: %w", mode, iface, err)
	}

	var a *attachment
	switch mode {
	case AttachAuto, AttachTC:
		a, err = d.attachTC(nl, l, noTCX)
	case AttachXDP:
		a, err = d.attachXDP(l, true, true)
	case AttachXDPNative:
		a, err = d.attachXDP(l, true, false)
	case AttachXDPGeneric:
		a, err = d.attachXDP(l, false, true)
	}
	if err != nil {
		nl.Close()
		return err
	}
	a.nl = nl
	d.attachments = append(d.attachments, a)
	d.log.Info("datapath attached", "interface", iface, "hook", a.Hook, "mode", a.Mode)
	return nil
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
			return &attachment{Attachment: Attachment{name, "tc", "tcx"}, ifindex: idx, link: lk}, nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("attach tc (tcx) to %s: %w", name, err)
		}
		d.log.Info("tcx not supported, falling back to clsact", "interface", name)
	}
	return d.attachClsact(nl, l)
}

func (d *Datapath) attachClsact(nl *netlink.Handle, l netlink.Link) (*attachment, error) {
	name, idx := l.Attrs().Name, l.Attrs().Index
	has, err := hasClsact(nl, l)
	if err != nil {
		return nil, fmt.Errorf("attach tc (clsact) to %s: %w", name, err)
	}
	a := &attachment{Attachment: Attachment{name, "tc", "clsact"}, ifindex: idx, nl: nl}
	if !has {
		q := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: idx,
			Handle:    netlink.MakeHandle(0xffff, 0),
			Parent:    netlink.HANDLE_CLSACT,
		}}
		if err := nl.QdiscAdd(q); err != nil {
			return nil, fmt.Errorf("attach tc (clsact) to %s: add clsact qdisc: %w", name, err)
		}
		a.createdQdisc = true
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: idx,
			Parent:    netlink.HANDLE_MIN_INGRESS,
			Protocol:  unix.ETH_P_ALL,
			// Priority and handle 0: the kernel picks free ones, so
			// olcd never collides with a filter already there.
		},
		Fd:           d.objs.OlcdTc.FD(),
		Name:         filterName,
		DirectAction: true,
	}
	if err := nl.FilterAdd(f); err != nil {
		err = fmt.Errorf("attach tc (clsact) to %s: add filter: %w", name, err)
		return nil, errors.Join(err, a.removeQdiscIfEmpty(d.log))
	}
	// Find the numbers the kernel gave the filter, to delete exactly it.
	id, err := progID(d.objs.OlcdTc)
	if err == nil {
		a.filter, err = findFilter(nl, l, func(f *netlink.BpfFilter) bool {
			return f.Name == filterName && f.Id == int(id)
		})
	}
	if err == nil && a.filter == nil {
		err = errors.New("the filter added is not listed")
	}
	if err != nil {
		err = fmt.Errorf("attach tc (clsact) to %s: %w", name, err)
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
			return &attachment{Attachment: Attachment{name, "xdp", "native"}, ifindex: idx, link: lk}, nil
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
	return &attachment{Attachment: Attachment{name, "xdp", "generic"}, ifindex: idx, link: lk}, nil
}

// detach undoes the attachment. A vanished interface took everything with
// it and is not an error.
func (a *attachment) detach(log *slog.Logger) error {
	if a.nl != nil {
		defer a.nl.Close()
	}
	if a.link != nil {
		if err := a.link.Close(); err != nil {
			return fmt.Errorf("detach %s (%s) from %s: %w", a.Hook, a.Mode, a.Interface, err)
		}
		return nil
	}
	if a.filter != nil {
		if err := a.nl.FilterDel(a.filter); err != nil && !gone(err) {
			return fmt.Errorf("detach tc (clsact) from %s: delete filter: %w", a.Interface, err)
		}
	}
	return a.removeQdiscIfEmpty(log)
}

// removeQdiscIfEmpty removes the clsact qdisc if olcd created it and no
// filter is left on it: someone may have added theirs since, and deleting
// the qdisc would take them too.
func (a *attachment) removeQdiscIfEmpty(log *slog.Logger) error {
	if !a.createdQdisc {
		return nil
	}
	l, err := a.nl.LinkByIndex(a.ifindex)
	if err != nil {
		if gone(err) {
			return nil
		}
		return fmt.Errorf("detach tc (clsact) from %s: %w", a.Interface, err)
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
		LinkIndex: a.ifindex,
		Handle:    netlink.MakeHandle(0xffff, 0),
		Parent:    netlink.HANDLE_CLSACT,
	}}
	if err := a.nl.QdiscDel(q); err != nil && !gone(err) {
		return fmt.Errorf("detach tc (clsact) from %s: delete clsact qdisc: %w", a.Interface, err)
	}
	return nil
}

// removeLeftovers deletes cls_bpf ingress filters named with FilterPrefix
// that are not this Datapath's: a killed olcd cannot remove its own, and its
// program would keep running on frozen maps.
func (d *Datapath) removeLeftovers(nl *netlink.Handle, l netlink.Link) error {
	has, err := hasClsact(nl, l)
	if err != nil || !has {
		return err
	}
	own, err := progID(d.objs.OlcdTc)
	if err != nil {
		return err
	}
	fs, err := listFilters(nl, l, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return err
	}
	for _, f := range fs {
		bf, ok := f.(*netlink.BpfFilter)
		if !ok || !strings.HasPrefix(bf.Name, FilterPrefix) || bf.Id == int(own) || bf.Handle == 0 {
			continue
		}
		if err := nl.FilterDel(bf); err != nil && !gone(err) {
			return fmt.Errorf("remove leftover filter %q (program id %d): %w", bf.Name, bf.Id, err)
		}
		d.log.Info("removed a leftover olcd filter", "interface", l.Attrs().Name,
			"filter", bf.Name, "program_id", bf.Id, "priority", bf.Priority)
	}
	return nil
}

func hasClsact(nl *netlink.Handle, l netlink.Link) (bool, error) {
	var qs []netlink.Qdisc
	err := retryDump(func() (err error) { qs, err = nl.QdiscList(l); return err })
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
	err := retryDump(func() (err error) { fs, err = nl.FilterList(l, parent); return err })
	if err != nil {
		return nil, fmt.Errorf("list filters: %w", err)
	}
	return fs, nil
}

func findFilter(nl *netlink.Handle, l netlink.Link, match func(*netlink.BpfFilter) bool) (*netlink.BpfFilter, error) {
	fs, err := listFilters(nl, l, netlink.HANDLE_MIN_INGRESS)
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

// retryDump retries a netlink dump the kernel interrupted (the list changed
// while it was read), a bounded number of times.
func retryDump(fn func() error) error {
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

// gone reports whether err says the interface (and so its qdiscs and
// filters) no longer exists.
func gone(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}
