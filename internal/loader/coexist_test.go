package loader

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/lock"
	"github.com/olcd/olcd/internal/olc"
)

// passCLS is a SCHED_CLS program that lets everything through, standing in
// for another tool's filter.
func passCLS(t *testing.T) *ebpf.Program {
	return schedCLS(t, asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()})
}

// addClsact adds a clsact qdisc to the interface, as another tool would.
func addClsact(ifname string) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	return netlink.QdiscAdd(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT,
	}})
}

// addBPFFilter adds a direct-action cls_bpf ingress filter named name at
// priority prio.
func addBPFFilter(ifname, name string, prio uint16, p *ebpf.Program) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	return netlink.FilterAdd(&netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: l.Attrs().Index, Parent: netlink.HANDLE_MIN_INGRESS,
			Handle: 1, Priority: prio, Protocol: unix.ETH_P_ALL,
		},
		Fd: p.FD(), Name: name, DirectAction: true,
	})
}

// ingressFilterNames lists the names of the bpf ingress filters, and
// whether a clsact qdisc is there at all.
func ingressFilterNames(ifname string) (names []string, clsact bool, err error) {
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, false, err
	}
	defer nl.Close()
	l, err := nl.LinkByName(ifname)
	if err != nil {
		return nil, false, err
	}
	if clsact, err = hasClsact(nl, l); err != nil || !clsact {
		return nil, clsact, err
	}
	fs, err := listFilters(nl, l, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return nil, true, err
	}
	for _, f := range fs {
		if bf, ok := f.(*netlink.BpfFilter); ok {
			names = append(names, bf.Name)
		}
	}
	return names, true, nil
}

// TestCoexistence: a clsact qdisc and a foreign tc filter that were there
// before olcd are still there after its Close, whether olcd attached with tcx
// or through clsact (Close is called from another network namespace than
// Attach, and still finds its filter); a clsact qdisc olcd created is
// removed again only while nobody else uses it.
func TestCoexistence(t *testing.T) {
	for _, noTCX := range []bool{false, true} {
		t.Run(fmt.Sprintf("clsact=%v", noTCX), func(t *testing.T) {
			n := newTestNet(t)
			foreign := passCLS(t)
			n.inServer(t, func() error {
				if err := addClsact(n.NodeIf); err != nil {
					return fmt.Errorf("add foreign clsact: %w", err)
				}
				return addBPFFilter(n.NodeIf, "foreign", 7, foreign)
			})
			d := loadTest(t, Config{})
			n.inServer(t, func() error { return d.attach(n.NodeIf, olc.AttachTC, noTCX) })
			n.inServer(t, func() error {
				names, _, err := ingressFilterNames(n.NodeIf)
				if err != nil {
					return err
				}
				want := 1
				if noTCX {
					want = 2
				}
				if len(names) != want {
					return fmt.Errorf("while attached: filters %q, want %d", names, want)
				}
				return nil
			})
			// Close from the test's own namespace: olcd removes its
			// filter in the namespace it attached in.
			must(t, d.Close())
			n.inServer(t, func() error {
				names, clsact, err := ingressFilterNames(n.NodeIf)
				if err != nil {
					return err
				}
				if !clsact || len(names) != 1 || names[0] != "foreign" {
					return fmt.Errorf("after Close: clsact %v, filters %q; want the foreign clsact and filter", clsact, names)
				}
				return nil
			})
		})
	}

	t.Run("created-clsact", func(t *testing.T) {
		n := newTestNet(t)
		d := loadTest(t, Config{})
		n.inServer(t, func() error { return d.attach(n.NodeIf, olc.AttachTC, true) })
		n.inServer(t, d.Close)
		n.inServer(t, func() error {
			if _, clsact, err := ingressFilterNames(n.NodeIf); err != nil || clsact {
				return fmt.Errorf("clsact olcd created is still there after Close (err %v)", err)
			}
			return nil
		})

		// Someone adds a filter to the clsact olcd created: it stays.
		foreign := passCLS(t)
		d2 := loadTest(t, Config{})
		n.inServer(t, func() error { return d2.attach(n.NodeIf, olc.AttachTC, true) })
		n.inServer(t, func() error { return addBPFFilter(n.NodeIf, "foreign", 7, foreign) })
		n.inServer(t, d2.Close)
		n.inServer(t, func() error {
			names, clsact, err := ingressFilterNames(n.NodeIf)
			if err != nil || !clsact || len(names) != 1 || names[0] != "foreign" {
				return fmt.Errorf("clsact %v, filters %q (err %v): want the foreign filter kept", clsact, names, err)
			}
			return nil
		})
	})
}

// TestLeftoverFilters: a cls_bpf filter named like olcd's that a killed
// instance left, with its lock file (no longer locked), is removed at
// Attach; other filters are not touched.
func TestLeftoverFilters(t *testing.T) {
	n := newTestNet(t)
	stale, foreign := passCLS(t), passCLS(t)
	n.inServer(t, func() error {
		if err := addClsact(n.NodeIf); err != nil {
			return err
		}
		if err := addBPFFilter(n.NodeIf, "olcd_tc", 3, stale); err != nil {
			return err
		}
		path, err := lockPathOf(n.NodeIf)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			return err
		}
		return addBPFFilter(n.NodeIf, "foreign", 4, foreign)
	})
	stale.Close() // like the killed process: only the filter holds it now
	d := loadTest(t, Config{})
	n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
	t.Cleanup(func() { n.inServer(t, d.Close) })
	n.inServer(t, func() error {
		names, _, err := ingressFilterNames(n.NodeIf)
		if err != nil {
			return err
		}
		if len(names) != 1 || names[0] != "foreign" {
			return fmt.Errorf("filters %q after Attach, want only the foreign one", names)
		}
		return nil
	})
	// Attached, it holds the lock; closed, the lock file is gone.
	var path string
	n.inServer(t, func() (err error) { path, err = lockPathOf(n.NodeIf); return err })
	if _, err := lock.TryExclusive(path); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("lock while attached: %v, want ErrLocked", err)
	}
	n.inServer(t, d.Close)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after Close: %v, want removed", err)
	}
}

// TestAnotherInstance: an olcd that is running (it holds the interface's
// lock) is neither mistaken for a leftover nor joined: its clsact filter
// stays, and attaching beside it, or beside its tcx program, is refused.
func TestAnotherInstance(t *testing.T) {
	t.Run("clsact", func(t *testing.T) {
		n := newTestNet(t)
		live := passCLS(t)
		var held *lock.File
		n.inServer(t, func() error {
			if err := addClsact(n.NodeIf); err != nil {
				return err
			}
			// This process holds the program and the lock, as a running
			// olcd would.
			path, err := lockPathOf(n.NodeIf)
			if err != nil {
				return err
			}
			if held, err = lock.TryExclusive(path); err != nil {
				return err
			}
			return addBPFFilter(n.NodeIf, "olcd_tc", 3, live)
		})
		t.Cleanup(func() { held.Release() })
		d := loadTest(t, Config{})
		var err error
		_ = n.InNode(func() error { err = d.Attach(n.NodeIf, olc.AttachTC); return nil })
		if err == nil || !strings.Contains(err.Error(), `another olcd is attached (clsact filter "olcd_tc"`) {
			t.Errorf("attach beside a running olcd's filter: %v", err)
		}
		n.inServer(t, func() error {
			names, _, err := ingressFilterNames(n.NodeIf)
			if err != nil || len(names) != 1 || names[0] != "olcd_tc" {
				return fmt.Errorf("filters %q (err %v), want the running olcd's kept", names, err)
			}
			return nil
		})
	})
	t.Run("lock only", func(t *testing.T) {
		// Another olcd that holds the lock but has attached nothing yet.
		n := newTestNet(t)
		var held *lock.File
		var path string
		n.inServer(t, func() (err error) {
			if path, err = lockPathOf(n.NodeIf); err != nil {
				return err
			}
			held, err = lock.TryExclusive(path)
			return err
		})
		t.Cleanup(func() { held.Release() })
		d := loadTest(t, Config{})
		var err error
		_ = n.InNode(func() error { err = d.Attach(n.NodeIf, olc.AttachTC); return nil })
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("another olcd is attached (pid %d holds %s)", os.Getpid(), path)) {
			t.Errorf("attach beside a locked interface: %v", err)
		}
	})
	t.Run("tcx", func(t *testing.T) {
		n := newTestNet(t)
		first, second := loadTest(t, Config{}), loadTest(t, Config{})
		n.inServer(t, func() error { return first.Attach(n.NodeIf, olc.AttachTC) })
		t.Cleanup(func() { n.inServer(t, first.Close) })
		for _, mode := range []olc.AttachMode{olc.AttachTC, olc.AttachXDP} {
			var err error
			_ = n.InNode(func() error { err = second.Attach(n.NodeIf, mode); return nil })
			if err == nil || !strings.Contains(err.Error(), "another olcd is attached (tcx program olcd_tc") {
				t.Errorf("attach %s beside a running olcd: %v", mode, err)
			}
		}
	})
}

// lockPathOf is the attachment lock of the interface named ifname in the
// calling thread's network namespace.
func lockPathOf(ifname string) (string, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return "", err
	}
	return attachLockPath(currentNetns(), l.Attrs().Index), nil
}

// currentNetns names the namespace as /proc does (the inode of
// /proc/thread-self/ns/net), without reading /proc.
func TestCurrentNetns(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Skipf("no /proc to compare with: %v", err)
	}
	if got := currentNetns(); got != st.Ino {
		t.Errorf("currentNetns() = %d, /proc/thread-self/ns/net has inode %d", got, st.Ino)
	}
}

// TestAttachErrors: a foreign XDP program is refused with its id; errors
// name the interface and mode; attaching twice is refused.
func TestAttachErrors(t *testing.T) {
	n := newTestNet(t)
	d := loadTest(t, Config{})
	t.Cleanup(func() { n.inServer(t, d.Close) })

	foreign, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()}, License: "MIT",
	})
	must(t, err)
	defer foreign.Close()
	fid, err := progID(foreign)
	must(t, err)
	n.inServer(t, func() error {
		l, err := netlink.LinkByName(n.NodeIf)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(l, foreign.FD(), int(link.XDPGenericMode))
	})

	tests := []struct {
		iface string
		mode  olc.AttachMode
		want  []string
	}{
		{n.NodeIf, olc.AttachXDP, []string{"attach xdp (native) to " + n.NodeIf, fmt.Sprintf("program id %d", fid)}},
		{n.NodeIf, olc.AttachXDPGeneric, []string{"attach xdp (generic) to " + n.NodeIf, fmt.Sprintf("program id %d", fid)}},
		{"olcd-no-such", olc.AttachTC, []string{"attach tc to olcd-no-such"}},
		{n.NodeIf, "ebpf", []string{"attach ebpf to " + n.NodeIf, "unknown attach mode"}},
	}
	for _, tt := range tests {
		var err error
		_ = n.InNode(func() error { err = d.Attach(tt.iface, tt.mode); return nil })
		if err == nil {
			t.Errorf("attach %s to %s succeeded", tt.mode, tt.iface)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("attach %s to %s: %q does not contain %q", tt.mode, tt.iface, err, w)
			}
		}
	}
	// The foreign program is still there.
	n.inServer(t, func() error {
		l, err := netlink.LinkByName(n.NodeIf)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x == nil || x.ProgId != uint32(fid) {
			return fmt.Errorf("foreign XDP program gone: %+v", x)
		}
		return nil
	})

	n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
	var err2 error
	_ = n.InNode(func() error { err2 = d.Attach(n.NodeIf, olc.AttachTC); return nil })
	if err2 == nil || !strings.Contains(err2.Error(), "already attached") {
		t.Errorf("second attach: %v", err2)
	}
}

// TestXDPFallback: loopback has no native XDP, so "xdp" falls back to
// generic mode and "xdp-native" is an error naming the mode.
func TestXDPFallback(t *testing.T) {
	n := newTestNet(t)
	d := loadTest(t, Config{})
	n.inServer(t, func() error { return d.Attach("lo", olc.AttachXDP) })
	if got := d.Attachments(); len(got) != 1 || got[0] != (Attachment{Interface: "lo", Hook: "xdp", Mode: "generic", Ifindex: 1}) {
		t.Errorf("attachments %+v, want xdp/generic on lo", got)
	}
	must(t, d.Close())

	d2 := loadTest(t, Config{})
	var err error
	_ = n.InNode(func() error { err = d2.Attach("lo", olc.AttachXDPNative); return nil })
	if err == nil || !strings.Contains(err.Error(), "attach xdp (native) to lo") {
		t.Errorf("native XDP on lo: %v, want an error naming the mode", err)
	}
}

// TestAttachInterfaceKinds: an L3 device (a tun here; WireGuard, IP-in-IP
// and GRE are the same) is refused, because its frames start with the IP
// header and the parser would read address bytes as an EtherType; the same
// interface under its altname is refused as already attached; an interface
// deleted while attached is detached by Close without an error.
func TestAttachInterfaceKinds(t *testing.T) {
	n := newTestNet(t)
	tun, alt := n.NodeIf+"t", n.NodeIf+"a"
	n.inServer(t, func() error {
		if err := netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: tun}, Mode: netlink.TUNTAP_MODE_TUN}); err != nil {
			return fmt.Errorf("add tun: %w", err)
		}
		l, err := netlink.LinkByName(n.NodeIf)
		if err != nil {
			return err
		}
		return netlink.LinkAddAltName(l, alt)
	})
	d := loadTest(t, Config{})
	t.Cleanup(func() { n.inServer(t, d.Close) })

	for _, mode := range []olc.AttachMode{olc.AttachTC, olc.AttachXDP} {
		var err error
		_ = n.InNode(func() error { err = d.Attach(tun, mode); return nil })
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("attach %s to %s: link type \"none\" has no Ethernet header", mode, tun)) {
			t.Errorf("attach %s to a tun device: %v, want a refusal naming the link type", mode, err)
		}
	}
	if got := d.Attachments(); len(got) != 0 {
		t.Fatalf("refused attachments left %+v", got)
	}

	n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
	var err error
	_ = n.InNode(func() error { err = d.Attach(alt, olc.AttachTC); return nil })
	if err == nil || !strings.Contains(err.Error(), "already attached as "+n.NodeIf) {
		t.Errorf("attach to the altname of an attached interface: %v, want already attached", err)
	}

	// The interface goes away under the attachment: Close still succeeds.
	n.inServer(t, func() error {
		l, err := netlink.LinkByName(n.NodeIf)
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	})
	if err := d.Close(); err != nil {
		t.Errorf("close after the interface was deleted: %v", err)
	}
}

// TestClsactDeletedUnderneath: another tool deletes the clsact qdisc (and
// so olcd's filter) while olcd is attached through it; Close then has
// nothing left to remove and says so without an error, whether olcd or
// someone else had created the qdisc.
func TestClsactDeletedUnderneath(t *testing.T) {
	for _, ours := range []bool{true, false} {
		t.Run(fmt.Sprintf("created-by-olcd=%v", ours), func(t *testing.T) {
			n := newTestNet(t)
			if !ours {
				n.inServer(t, func() error { return addClsact(n.NodeIf) })
			}
			d := loadTest(t, Config{})
			n.inServer(t, func() error { return d.attach(n.NodeIf, olc.AttachTC, true) })
			n.inServer(t, func() error {
				l, err := netlink.LinkByName(n.NodeIf)
				if err != nil {
					return err
				}
				return netlink.QdiscDel(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{
					LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT,
				}})
			})
			if err := d.Close(); err != nil {
				t.Errorf("close after the qdisc was deleted: %v", err)
			}
			n.inServer(t, func() error {
				if names, clsact, err := ingressFilterNames(n.NodeIf); err != nil || clsact || len(names) != 0 {
					return fmt.Errorf("after Close: clsact %v, filters %q (err %v)", clsact, names, err)
				}
				return nil
			})
		})
	}
}

// TestDetach: one interface is detached and can be attached again; an
// interface deleted and created again under its name is detached without
// error (the kernel took the program with the old device) and attached
// anew, on each TC rung.
func TestDetach(t *testing.T) {
	for _, noTCX := range []bool{false, true} {
		t.Run(fmt.Sprintf("noTCX=%v", noTCX), func(t *testing.T) {
			n := newTestNet(t)
			d := loadTest(t, Config{})
			h, err := netlink.NewHandleAt(n.NodeNS)
			must(t, err)
			defer h.Close()
			onTC := func(name string) int {
				t.Helper()
				var ids []uint32
				n.inServer(t, func() error {
					l, err := h.LinkByName(name)
					if err != nil {
						return err
					}
					q, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: ebpf.AttachTCXIngress})
					if err == nil {
						for _, p := range q.Programs {
							ids = append(ids, uint32(p.ID))
						}
					}
					fs, err := h.FilterList(l, netlink.HANDLE_MIN_INGRESS)
					if err != nil && !errors.Is(err, unix.EINVAL) {
						return err
					}
					for _, f := range fs {
						if bf, ok := f.(*netlink.BpfFilter); ok && bf.Id != 0 {
							ids = append(ids, uint32(bf.Id))
						}
					}
					return nil
				})
				return len(ids)
			}
			attach := func(name string) Attachment {
				t.Helper()
				n.inServer(t, func() error { return d.attach(name, olc.AttachTC, noTCX) })
				for _, a := range d.Attachments() {
					if a.Interface == name {
						return a
					}
				}
				t.Fatalf("%s missing from %+v", name, d.Attachments())
				return Attachment{}
			}

			attach(n.NodeIf)
			must(t, d.Detach(n.NodeIf))
			if got := d.Attachments(); len(got) != 0 {
				t.Errorf("after Detach: %+v", got)
			}
			if c := onTC(n.NodeIf); c != 0 {
				t.Errorf("%d programs left on %s after Detach", c, n.NodeIf)
			}
			if err := d.Detach(n.NodeIf); err == nil || !strings.Contains(err.Error(), "not attached") {
				t.Errorf("second Detach: %v", err)
			}
			attach(n.NodeIf)
			if c := onTC(n.NodeIf); c != 1 {
				t.Errorf("%d programs on %s after attaching again, want 1", c, n.NodeIf)
			}

			const dummy = "oldetach"
			// A veth pair inside the server namespace (this kernel may lack dummy).
			mk := func() {
				must(t, h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: dummy}, PeerName: dummy + "p"}))
			}
			mk()
			first := attach(dummy)
			l, err := h.LinkByName(dummy)
			must(t, err)
			must(t, h.LinkDel(l))
			mk()
			if c := onTC(dummy); c != 0 {
				t.Fatalf("a new %s has %d programs", dummy, c)
			}
			must(t, d.Detach(dummy))
			second := attach(dummy)
			if second.Ifindex == first.Ifindex || onTC(dummy) != 1 {
				t.Errorf("re-created %s: ifindex %d then %d, %d programs", dummy, first.Ifindex, second.Ifindex, onTC(dummy))
			}
			must(t, d.Close())
			if onTC(dummy) != 0 || onTC(n.NodeIf) != 0 {
				t.Error("programs left after Close")
			}
		})
	}
}
