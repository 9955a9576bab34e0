package loader

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/testutil"
)

// portMarker is a protected port at p = 0 whose SYNs the test sends after
// each corpus frame: when its count moves, the frame before it has been
// through the program.
const portMarker = 9

// TestCorpusSameVerdict runs every frame of the packet corpus through the
// XDP program (BPF_PROG_TEST_RUN) and through the TC program as the kernel
// delivers it: sent from a packet socket on the peer of a veth, so that the
// receive path strips the outer VLAN tag into skb metadata (skb_vlan_untag)
// before TC ingress, as it does on every host. The verdicts must be the
// same: a frame with more tags than the parser walks passes at both hooks,
// never dropped at one of them. The TC test run is compared too.
func TestCorpusSameVerdict(t *testing.T) {
	cases := loadPacketCases(t)
	n := newTestNet(t)
	d := loadTest(t, Config{StaleAfter: time.Minute})
	t.Cleanup(func() { n.inServer(t, d.Close) })

	seen := map[olc.PortKey]bool{}
	pols := []PortPolicy{{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: portMarker}, Mode: olc.ModeEnforce, Action: olc.ActionDrop}}
	for _, c := range cases {
		for _, k := range c.ports() {
			if !seen[k] && k != pols[0].Key {
				seen[k] = true
				pols = append(pols, PortPolicy{Key: k, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1})
			}
		}
	}
	must(t, d.SetPolicies(pols))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	// Jumbo frames of the corpus must not be refused by the veth.
	for _, side := range []struct {
		ns  netns.NsHandle
		if_ string
	}{{n.NodeNS, n.NodeIf}, {n.PeerNS, n.PeerIf}} {
		if err := testutil.InNetns(side.ns, func() error {
			l, err := netlink.LinkByName(side.if_)
			if err != nil {
				return err
			}
			return netlink.LinkSetMTU(l, 9000)
		}); err != nil {
			t.Fatalf("set mtu of %s: %v", side.if_, err)
		}
	}
	n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })

	xdp := make([]verdict, len(cases))
	tcRun := make([]verdict, len(cases))
	for i, c := range cases {
		xdp[i], _ = run(t, d, hookXDP, c.frame)
		tcRun[i], _ = run(t, d, hookTC, c.frame)
	}
	real, skipped, err := injectCorpus(d, n, cases)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		name := fmt.Sprintf("%s/%s", filepath.Base(c.file), c.Name)
		if skipped[i] {
			t.Logf("%s: %d bytes, shorter than an Ethernet header: no link delivers it, test run only", name, len(c.frame))
		} else if real[i] != xdp[i] {
			t.Errorf("%s: XDP %s, TC as delivered by the kernel %s (%s)", name, xdp[i], real[i], c.Note)
		}
		if tcRun[i] != xdp[i] {
			t.Errorf("%s: XDP %s, TC test run %s (%s)", name, xdp[i], tcRun[i], c.Note)
		}
	}
}

// injectCorpus sends each frame from the client side of n and returns the
// verdict the TC program gave it, read from the counters: a drop moves a
// port's dropped count, anything else passed. Each frame is followed by a
// SYN to portMarker, awaited before the counters are read; the sender is
// pinned to one CPU so that the veth delivers the two in order.
func injectCorpus(d *Datapath, n *testNet, cases []packetCase) ([]verdict, []bool, error) {
	out := make([]verdict, len(cases))
	skipped := make([]bool, len(cases))
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked: it dies with the goroutine, so its
		// namespace and CPU mask go with it.
		runtime.LockOSThread()
		errc <- func() error {
			if err := netns.Set(n.PeerNS); err != nil {
				return fmt.Errorf("enter client netns: %w", err)
			}
			var set unix.CPUSet
			set.Set(0)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				return fmt.Errorf("pin sender: %w", err)
			}
			l, err := netlink.LinkByName(n.PeerIf)
			if err != nil {
				return err
			}
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
			if err != nil {
				return fmt.Errorf("packet socket: %w", err)
			}
			defer unix.Close(fd)
			to := &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index}
			marker := olc.PortKey{Proto: olc.ProtoTCP, Port: portMarker}
			for i, c := range cases {
				if len(c.frame) < 14 {
					skipped[i] = true
					continue
				}
				before, err := d.Stats()
				if err != nil {
					return err
				}
				if err := unix.Sendto(fd, c.frame, 0, to); err != nil {
					return fmt.Errorf("send %s: %w", c.Name, err)
				}
				if err := unix.Sendto(fd, syn4(portMarker, uint32(i)), 0, to); err != nil {
					return fmt.Errorf("send marker: %w", err)
				}
				var after Stats
				if err := testutil.WaitFor(2*time.Second, time.Millisecond, func() (bool, error) {
					var err error
					after, err = d.Stats()
					return err == nil && after.Ports[marker].NewConns > before.Ports[marker].NewConns, err
				}); err != nil {
					return fmt.Errorf("the marker SYN did not reach the TC program: %w", err)
				}
				out[i] = verdictPass
				for k, cur := range after.Ports {
					if cur.Dropped > before.Ports[k].Dropped {
						out[i] = verdictDrop
					}
				}
			}
			return nil
		}()
	}()
	return out, skipped, <-errc
}
