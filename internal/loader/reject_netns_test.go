package loader

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
)

// refuseWithin is how soon after its SYN a rejected connect must fail.
const refuseWithin = 5 * time.Millisecond

// TestRejectRealTraffic attaches the datapath with the reject action to a
// veth in a namespace (tcx, clsact and native XDP) and connects from the
// peer namespace: at p = 1 every connect() fails with ECONNREFUSED, the
// 90th percentile of 20 within refuseWithin of the call (which sends the
// SYN), while a connection established before keeps exchanging data. The
// kernel's own TCP stack on the client side checks the reply: a reset with
// a wrong checksum, sequence or ports would be ignored and the connect
// would time out instead. Over a veth the client's SYN carries a partial
// checksum (CHECKSUM_PARTIAL) that TC's reply keeps, and the peer trusts
// it; the full-checksums run turns the client's checksum offload off, so
// that the reply carries a whole checksum the client verifies (at XDP the
// reply is always a new frame, verified).
func TestRejectRealTraffic(t *testing.T) {
	modes := []struct {
		name  string
		mode  olc.AttachMode
		noTCX bool
		txOff bool
	}{
		{"tcx", olc.AttachTC, false, false},
		{"tcx-full-checksums", olc.AttachTC, false, true},
		{"clsact", olc.AttachTC, true, false},
		{"xdp-native", olc.AttachXDPNative, false, false},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			n := newTestNet(t)
			d := loadTest(t, Config{StaleAfter: time.Minute})
			t.Cleanup(func() { n.inServer(t, d.Close) })
			n.listen(t, portShed)
			k := olc.PortKey{Proto: olc.ProtoTCP, Port: portShed}
			must(t, d.SetPolicies([]PortPolicy{{Key: k, Mode: olc.ModeEnforce, Action: olc.ActionReject}}))
			must(t, d.SetMode(olc.ModeEnforce))
			must(t, d.Heartbeat())
			n.inServer(t, func() error { return d.attach(n.NodeIf, m.mode, m.noTCX) })
			if m.txOff {
				if err := n.InPeer(func() error { return setTxChecksum(n.PeerIf, false) }); err != nil {
					t.Fatalf("turn off checksum offload on %s: %v", n.PeerIf, err)
				}
			}
			if m.mode == olc.AttachXDPNative {
				// XDP_TX on a veth needs NAPI on the peer: an XDP program
				// there (it passes everything).
				passXDPOnClient(t, n)
			}

			est, err := n.dial(portShed, 3*time.Second)
			if err != nil {
				t.Fatalf("connect at p=0: %v", err)
			}
			defer est.Close()
			must(t, echo(est, "before"))

			must(t, d.SetDropProbabilities(map[olc.PortKey]float64{k: 1}))
			before := stats(t, d).Ports[k]
			var took []time.Duration
			for i := range 20 {
				start := time.Now()
				c, err := n.dial(portShed, 2*time.Second)
				el := time.Since(start)
				if err == nil {
					c.Close()
					t.Fatalf("connect %d at p=1 succeeded", i)
				}
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("connect %d at p=1: %v after %v, want ECONNREFUSED", i, err, el)
				}
				took = append(took, el)
			}
			slices.Sort(took)
			t.Logf("refused after: median %v, p90 %v, max %v", took[10], took[17], took[19])
			if took[17] > refuseWithin {
				t.Errorf("p90 of the time to ECONNREFUSED is %v, want ≤ %v (all: %v)", took[17], refuseWithin, took)
			}
			delta := stats(t, d).Ports[k].sub(before)
			if delta.Rejected != 20 || delta.Dropped != 20 || delta.NewConns != 20 || delta.SYNRetransmits != 0 {
				t.Errorf("counters moved by %+v, want 20 new, dropped and rejected, no retransmit", delta)
			}
			if err := echo(est, "after p=1"); err != nil {
				t.Errorf("established connection at p=1: %v", err)
			}
		})
	}
}

// passXDPOnClient attaches an XDP program that passes everything to the
// client end of n's veth, for the life of the test.
func passXDPOnClient(t *testing.T, n *testNet) {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "Dual MIT/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()}})
	must(t, err)
	t.Cleanup(func() { p.Close() })
	var l link.Link
	if err := n.InPeer(func() error {
		ifc, err := netlink.LinkByName(n.PeerIf)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: p, Interface: ifc.Attrs().Index, Flags: link.XDPDriverMode})
		return err
	}); err != nil {
		t.Fatalf("attach XDP to the client veth: %v", err)
	}
	t.Cleanup(func() { l.Close() })
}

// setTxChecksum turns the transmit checksum offload of ifname on or off
// (the ETHTOOL_STXCSUM ioctl: this machine has no ethtool binary).
func setTxChecksum(ifname string, on bool) error {
	const ethtoolSTxCsum = 0x17
	val := &struct{ cmd, data uint32 }{cmd: ethtoolSTxCsum}
	if on {
		val.data = 1
	}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte
	}
	copy(ifr.name[:], ifname)
	ifr.data = unsafe.Pointer(val)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return fmt.Errorf("SIOCETHTOOL STXCSUM %s: %w", ifname, errno)
	}
	// Read it back (ETHTOOL_GTXCSUM): the kernel may keep a feature on.
	want := val.data
	val.cmd, val.data = ethtoolSTxCsum-1, 2
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return fmt.Errorf("SIOCETHTOOL GTXCSUM %s: %w", ifname, errno)
	}
	if val.data != want {
		return fmt.Errorf("%s: transmit checksum offload is %d, want %d", ifname, val.data, want)
	}
	return nil
}
