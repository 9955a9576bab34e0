package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/testutil"
)

const (
	portShed   = 8080 // protected, p goes to 1
	portExempt = 8081 // protected but in the exception list
	portMark   = 8082 // protected, mark action
	markDSCP   = 46   // EF
	markFwmark = 0x4f4c
)

// TestIntegration attaches the datapath to a veth in a network namespace the
// test creates, and makes real TCP connections from the peer namespace: with
// tc (tcx), tc through clsact, and native XDP. At p = 1 connects fail and
// count as drops and retransmits; the exempt port connects; an established
// connection keeps exchanging data; the mark action rewrites the DSCP (seen
// by a raw socket) and, at TC, sets the mark (seen through
// tcp_fwmark_accept). After Close nothing of olcd is left on the interface
// and its programs are gone.
func TestIntegration(t *testing.T) {
	modes := []struct {
		name   string
		mode   olc.AttachMode
		noTCX  bool
		hook   string
		kernel string // attachment mode we expect
	}{
		{"tcx", olc.AttachTC, false, "tc", "tcx"},
		{"clsact", olc.AttachTC, true, "tc", "clsact"},
		{"xdp-native", olc.AttachXDPNative, false, "xdp", "native"},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			n := newTestNet(t)
			d := loadTest(t, Config{MarkDSCP: markDSCP, MarkFwmark: markFwmark, StaleAfter: time.Minute})
			ids := programIDs(t, d)
			closed := false
			t.Cleanup(func() {
				if !closed {
					n.inServer(t, d.Close)
				}
			})

			for _, p := range []uint16{portShed, portExempt} {
				n.listen(t, p)
			}
			must(t, d.SetPolicies([]PortPolicy{
				{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: portShed}, Mode: olc.ModeEnforce, Action: olc.ActionDrop},
				{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: portExempt}, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1},
				{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: portMark}, Mode: olc.ModeEnforce, Action: olc.ActionMark, DropProbability: 1},
			}))
			must(t, d.SetExceptions([]olc.PortKey{{Proto: olc.ProtoTCP, Port: portExempt}}, nil))
			must(t, d.SetMode(olc.ModeEnforce))
			must(t, d.Heartbeat())
			n.inServer(t, func() error { return d.attach(n.NodeIf, m.mode, m.noTCX) })
			if got := d.Attachments(); len(got) != 1 || got[0] != (Attachment{Interface: n.NodeIf, Hook: m.hook, Mode: m.kernel, Ifindex: got[0].Ifindex}) || got[0].Ifindex <= 0 {
				t.Fatalf("attachments %+v, want one %s/%s on %s", got, m.hook, m.kernel, n.NodeIf)
			}

			// p = 0: connects succeed; keep one connection open.
			est, err := n.dial(portShed, 3*time.Second)
			if err != nil {
				t.Fatalf("connect at p=0: %v", err)
			}
			defer est.Close()
			if err := echo(est, "before"); err != nil {
				t.Fatalf("established connection at p=0: %v", err)
			}

			// p = 1: new connections fail, the established one lives.
			must(t, d.SetDropProbabilities(map[olc.PortKey]float64{{Proto: olc.ProtoTCP, Port: portShed}: 1}))
			before := stats(t, d).Ports[olc.PortKey{Proto: olc.ProtoTCP, Port: portShed}]
			if c, err := n.dial(portShed, 2500*time.Millisecond); err == nil {
				c.Close()
				t.Fatal("connect at p=1 succeeded")
			} else if !isTimeout(err) {
				t.Fatalf("connect at p=1: %v, want a timeout", err)
			}
			after := stats(t, d).Ports[olc.PortKey{Proto: olc.ProtoTCP, Port: portShed}]
			delta := after.sub(before)
			// The kernel retransmits the SYN after 1 s, inside the 2.5 s.
			if delta.Dropped < 2 || delta.SYNRetransmits < 1 || delta.NewConns != delta.Dropped {
				t.Errorf("at p=1 counters moved by %+v, want ≥2 dropped SYNs, ≥1 retransmit", delta)
			}
			if err := echo(est, "after p=1"); err != nil {
				t.Errorf("established connection at p=1: %v", err)
			}
			if c, err := n.dial(portExempt, 3*time.Second); err != nil {
				t.Errorf("exempt port at p=1: %v", err)
			} else {
				c.Close()
			}
			if c := stats(t, d).Ports[olc.PortKey{Proto: olc.ProtoTCP, Port: portExempt}]; c.Exempt < 1 || c.Dropped != 0 {
				t.Errorf("exempt port counters %+v", c)
			}

			checkMark(t, n, d, m.hook == "tc")
			if m.hook == "tc" {
				checkVLAN(t, n, d)
			}

			// Close: nothing of olcd left.
			var ifindex int
			n.inServer(t, func() error {
				l, err := netlink.LinkByName(n.NodeIf)
				if err != nil {
					return err
				}
				ifindex = l.Attrs().Index
				return d.Close()
			})
			closed = true
			n.inServer(t, func() error { return nothingLeft(n.NodeIf, ifindex) })
			programsGone(t, ids)
		})
	}
}

// checkMark connects to the mark port at p = 1: the SYN must arrive with the
// configured DSCP and a valid checksum (else the connect fails), and at TC
// the accepted socket carries the configured mark.
func checkMark(t *testing.T, n *testNet, d *Datapath, tc bool) {
	t.Helper()
	var raw int
	n.inServer(t, func() error {
		var err error
		raw, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
		if err != nil {
			return fmt.Errorf("raw socket: %w", err)
		}
		// With tcp_fwmark_accept the accepted socket takes the SYN's mark.
		return os.WriteFile("/proc/sys/net/ipv4/tcp_fwmark_accept", []byte("1"), 0)
	})
	defer unix.Close(raw)
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	must(t, unix.SetsockoptTimeval(raw, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv))

	var ln net.Listener
	n.inServer(t, func() error {
		var err error
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(n.NodeIP, portMark).String())
		return err
	})
	defer ln.Close()

	c, err := n.dial(portMark, 3*time.Second)
	if err != nil {
		t.Fatalf("connect to the mark port: %v", err)
	}
	defer c.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(3 * time.Second))
	sc, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept on the mark port: %v", err)
	}
	defer sc.Close()

	// The raw socket got a copy of every TCP segment since it opened.
	tos, found := -1, false
	buf := make([]byte, 1500)
	for i := 0; i < 200 && !found; i++ {
		k, _, err := unix.Recvfrom(raw, buf, 0)
		if err != nil {
			break // timeout: nothing more queued
		}
		ihl := int(buf[0]&0x0f) * 4
		if k < ihl+14 {
			continue
		}
		dport := int(buf[ihl+2])<<8 | int(buf[ihl+3])
		if dport == portMark && buf[ihl+13]&(tcpSYN|tcpACK) == tcpSYN {
			tos, found = int(buf[1]), true
		}
	}
	if !found {
		t.Fatal("the raw socket saw no SYN to the mark port")
	}
	if tos>>2 != markDSCP {
		t.Errorf("SYN arrived with DSCP %d, want %d", tos>>2, markDSCP)
	}
	if c := stats(t, d).Ports[olc.PortKey{Proto: olc.ProtoTCP, Port: portMark}]; c.Marked != 1 || c.Dropped != 0 {
		t.Errorf("mark port counters %+v, want 1 marked", c)
	}
	if !tc {
		return
	}
	rc, err := sc.(*net.TCPConn).SyscallConn()
	must(t, err)
	var mark int
	var serr error
	must(t, rc.Control(func(fd uintptr) { mark, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK) }))
	must(t, serr)
	if mark != markFwmark {
		t.Errorf("accepted socket mark %#x, want %#x (skb->mark set at TC)", mark, markFwmark)
	}
}

// checkVLAN sends the SYNs with a VLAN tag in skb metadata, as a NIC that
// strips tags delivers them: a tcx egress program on the client end pushes
// tag 42 (bpf_skb_vlan_push keeps it out of band), veth carries it across,
// and at the server's TC ingress the data is untagged while the skb says
// VLAN 42. An observer program in front of olcd records the tag it saw, so
// the test knows the case really happened. This kernel has no 802.1Q devices,
// so nothing accepts the frames afterwards: the check is on olcd's counters.
func checkVLAN(t *testing.T, n *testNet, d *Datapath) {
	t.Helper()
	seen, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	must(t, err)
	defer seen.Close()
	htons := func(v uint16) int32 { return int32(binary.NativeEndian.Uint16([]byte{byte(v >> 8), byte(v)})) }
	pusher := schedCLS(t, asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.Mov.Imm(asm.R2, htons(0x8100)),
		asm.Mov.Imm(asm.R3, 42),
		asm.FnSkbVlanPush.Call(),
		asm.Mov.Imm(asm.R0, -1), // TCX_NEXT
		asm.Return(),
	})
	observer := schedCLS(t, asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 24, asm.Word), // __sk_buff.vlan_tci
		asm.LoadMem(asm.R7, asm.R1, 20, asm.Word), // __sk_buff.vlan_present
		asm.JEq.Imm(asm.R7, 0, "out"),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.R10, -4, asm.R1, asm.Word),
		asm.LoadMapPtr(asm.R1, seen.FD()),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.StoreMem(asm.R0, 0, asm.R6, asm.Word),
		asm.Mov.Imm(asm.R0, -1).WithSymbol("out"), // TCX_NEXT
		asm.Return(),
	})
	var lp, lo link.Link
	if err := n.InPeer(func() error {
		l, err := netlink.LinkByName(n.PeerIf)
		if err != nil {
			return err
		}
		lp, err = link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: pusher, Attach: ebpf.AttachTCXEgress})
		return err
	}); err != nil {
		t.Fatalf("attach the tag pusher: %v", err)
	}
	defer lp.Close()
	n.inServer(t, func() error {
		l, err := netlink.LinkByName(n.NodeIf)
		if err != nil {
			return err
		}
		lo, err = link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: observer,
			Attach: ebpf.AttachTCXIngress, Anchor: link.Head()})
		return err
	})
	defer lo.Close()

	before := stats(t, d).Ports
	for _, p := range []uint16{portShed, portExempt} {
		if c, err := n.dial(p, 500*time.Millisecond); err == nil {
			c.Close() // nothing should answer: the server has no VLAN 42
		}
	}
	var tci uint32
	must(t, seen.Lookup(uint32(0), &tci))
	if tci&0xfff != 42 {
		t.Fatalf("the SYNs did not reach TC with VLAN 42 in metadata (saw tci %#x)", tci)
	}
	after := stats(t, d).Ports
	if delta := after[olc.PortKey{Proto: olc.ProtoTCP, Port: portShed}].sub(before[olc.PortKey{Proto: olc.ProtoTCP, Port: portShed}]); delta.Dropped < 1 {
		t.Errorf("SYNs with a stripped tag moved the protected port's counters by %+v, want drops", delta)
	}
	if delta := after[olc.PortKey{Proto: olc.ProtoTCP, Port: portExempt}].sub(before[olc.PortKey{Proto: olc.ProtoTCP, Port: portExempt}]); delta.Exempt < 1 {
		t.Errorf("SYNs with a stripped tag moved the exempt port's counters by %+v, want exempt", delta)
	}
}

// schedCLS loads a small SCHED_CLS program for the test.
func schedCLS(t *testing.T, insns asm.Instructions) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, Instructions: insns, License: "Dual MIT/GPL"})
	if err != nil {
		t.Fatalf("load test program: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func programIDs(t *testing.T, d *Datapath) []ebpf.ProgramID {
	t.Helper()
	var ids []ebpf.ProgramID
	for _, p := range []*ebpf.Program{d.objs.OlcdXdp, d.objs.OlcdTc} {
		id, err := progID(p)
		must(t, err)
		ids = append(ids, id)
	}
	return ids
}

// nothingLeft checks, in the current netns, that the interface has no tc
// filter, no tcx program and no XDP program left by olcd.
func nothingLeft(ifname string, ifindex int) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return fmt.Errorf("%s still has XDP program id %d", ifname, x.ProgId)
	}
	if err := olcdFilterLeft(ifname); err != nil {
		return err
	}
	for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
		res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: at})
		if err != nil {
			return fmt.Errorf("query tcx programs: %w", err)
		}
		if len(res.Programs) != 0 {
			return fmt.Errorf("%s still has %d tcx programs", ifname, len(res.Programs))
		}
	}
	return nil
}

// programsGone waits (bounded) for the kernel to free the programs: a
// cls_bpf filter releases its program after an RCU grace period.
func programsGone(t *testing.T, ids []ebpf.ProgramID) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range ids {
		var name string
		testutil.Eventually(t, time.Until(deadline), 20*time.Millisecond, func() (bool, error) {
			p, err := ebpf.NewProgramFromID(id)
			if err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("look up program %d: %v", id, err)
				}
				return true, nil
			}
			if info, err := p.Info(); err == nil {
				name = info.Name
			}
			p.Close()
			return false, fmt.Errorf("program %d (%s) still exists", id, name)
		}, "programs freed after Close")
	}
}
