package loader

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
)

// openLoop is an open-loop connect generator: sources each open new TCP
// connections at their own rate from their own address, whatever became of
// the earlier ones. One thread (in the peer namespace) makes non-blocking
// sockets and polls them; a connect is admitted when its handshake
// completes within giveUp (before the SYN's first retransmit at 1 s, so a
// dropped SYN is one lost connection, not a late one).
type openLoop struct {
	srcs   []netip.Addr
	rates  []float64 // per second
	giveUp time.Duration
}

// run offers the load for d to dst and returns per source the connects
// made and admitted.
func (o openLoop) run(dst netip.AddrPort, d time.Duration) (sent, ok []int, err error) {
	type pending struct {
		fd, src int
		at      time.Time
	}
	sent, ok = make([]int, len(o.srcs)), make([]int, len(o.srcs))
	start := time.Now()
	var open []pending
	sa := &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}
	for {
		now := time.Now()
		el := now.Sub(start)
		if el < d {
			for i, r := range o.rates {
				for float64(sent[i]) < r*el.Seconds() {
					fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
					if err != nil {
						return nil, nil, fmt.Errorf("socket: %w", err)
					}
					if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: o.srcs[i].As4()}); err != nil {
						unix.Close(fd)
						return nil, nil, fmt.Errorf("bind %s: %w", o.srcs[i], err)
					}
					// Close at once with a reset, so that thousands of
					// connects leave no TIME_WAIT behind.
					if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
						unix.Close(fd)
						return nil, nil, fmt.Errorf("linger: %w", err)
					}
					if err := unix.Connect(fd, sa); err != nil && err != unix.EINPROGRESS {
						unix.Close(fd)
						return nil, nil, fmt.Errorf("connect: %w", err)
					}
					sent[i]++
					open = append(open, pending{fd, i, now})
				}
			}
		} else if len(open) == 0 {
			return sent, ok, nil
		}
		pfd := make([]unix.PollFd, len(open))
		for i, p := range open {
			pfd[i] = unix.PollFd{Fd: int32(p.fd), Events: unix.POLLOUT}
		}
		if _, err := unix.Poll(pfd, 1); err != nil && err != unix.EINTR {
			return nil, nil, fmt.Errorf("poll: %w", err)
		}
		kept := open[:0]
		for i, p := range open {
			switch {
			case pfd[i].Revents&(unix.POLLOUT|unix.POLLERR|unix.POLLHUP) != 0:
				if e, err := unix.GetsockoptInt(p.fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && e == 0 {
					ok[p.src]++
				}
				unix.Close(p.fd)
			case time.Since(p.at) > o.giveUp:
				unix.Close(p.fd)
			default:
				kept = append(kept, p)
			}
		}
		open = kept
	}
}

// fairNet is the netns rig with extra client addresses on the peer side.
func fairNet(t *testing.T, extra int) (*testNet, []netip.Addr) {
	t.Helper()
	n := newTestNet(t)
	var addrs []netip.Addr
	a := n.PeerIP
	for range extra {
		a = a.Next()
		addrs = append(addrs, a)
	}
	err := n.InPeer(func() error {
		l, err := netlink.LinkByName(n.PeerIf)
		if err != nil {
			return err
		}
		for _, ad := range addrs {
			if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: ad.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
				return fmt.Errorf("add %s: %w", ad, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("client addresses: %v", err)
	}
	return n, addrs
}

// TestFairRealTraffic: real TCP connects through a veth, the datapath on TC
// ingress of the node side at a fixed drop probability (the controller's
// p stands still here; the overload suite runs the controller). One heavy
// source at 600/s and 20 light ones at 5/s each (100/s together) at
// p = 0.6: fair shedding keeps the light sources' connects (want >= 0.9 of
// them) and takes the shed from the heavy one, the total admitted staying
// 1 - p of the offered (within 0.05); even shedding, same load, admits
// 0.4 of every source's. And the static caps on the same rig: a port cap
// of 150/s under 300/s offered admits 150/s within 5 %; a source prefix
// cap of 60/s, stricter, wins; a port cap above what p admits leaves the
// shedding to p.
func TestFairRealTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("offers load for 40 s")
	}
	requireRoot(t)
	n, addrs := fairNet(t, 21)
	d := loadTest(t, Config{StaleAfter: time.Minute})
	t.Cleanup(func() { n.inServer(t, d.Close) })
	n.listen(t, portShed)
	k := olc.PortKey{Proto: olc.ProtoTCP, Port: portShed}
	must(t, d.SetPolicies([]PortPolicy{{Key: k, Mode: olc.ModeEnforce, Action: olc.ActionDrop}}))
	must(t, d.SetMode(olc.ModeEnforce))
	n.inServer(t, func() error { return d.attach(n.NodeIf, olc.AttachTC, false) })
	dst := netip.AddrPortFrom(n.NodeIP, portShed)
	heartbeat := func(stop chan struct{}) {
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if err := d.Heartbeat(); err != nil {
					t.Errorf("heartbeat: %v", err)
				}
			}
		}
	}
	offer := func(o openLoop, dur time.Duration) (sent, ok []int) {
		stop := make(chan struct{})
		defer close(stop)
		must(t, d.Heartbeat())
		go heartbeat(stop)
		var err error
		must(t, n.InPeer(func() error {
			sent, ok, err = o.run(dst, dur)
			return err
		}))
		return sent, ok
	}

	t.Run("fair", func(t *testing.T) {
		const p = 0.6
		o := openLoop{srcs: addrs, rates: make([]float64, len(addrs)), giveUp: 300 * time.Millisecond}
		o.rates[0] = 600
		for i := 1; i < len(addrs); i++ {
			o.rates[i] = 5
		}
		for _, fair := range []bool{false, true} {
			must(t, d.SetPolicies([]PortPolicy{{Key: k, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: p, Fair: fair}}))
			// A warm second (the fair share settles), then 8 measured.
			offer(o, time.Second)
			sent, ok := offer(o, 8*time.Second)
			heavy, light, total := share(ok, sent, 0, 1), share(ok, sent, 1, len(addrs)), share(ok, sent, 0, len(addrs))
			t.Logf("fair %v: heavy admitted %.3f of %d, light %.3f of %d, total %.3f", fair, heavy, sent[0], light, sum(sent[1:]), total)
			if fair {
				if light < 0.9 {
					t.Errorf("fair: light sources admitted %.3f of their connects, want >= 0.9", light)
				}
				if total < 1-p-0.05 || total > 1-p+0.05 {
					t.Errorf("fair: total admitted %.3f, want 1 - p = %.2f within 0.05", total, 1-p)
				}
			} else if light > 1-p+0.1 {
				t.Errorf("even: light sources admitted %.3f, want about 1 - p = %.2f", light, 1-p)
			}
		}
	})

	t.Run("caps", func(t *testing.T) {
		const dur = 6 * time.Second
		o := openLoop{srcs: addrs[:1], rates: []float64{300}, giveUp: 300 * time.Millisecond}
		pfx := netip.PrefixFrom(addrs[0], 32)
		tests := []struct {
			name       string
			p          float64
			caps       PortCaps
			src        []SourceCap
			want, tolr float64 // admitted per second
		}{
			{"port-cap", 0, PortCaps{Rate: 150}, nil, 150, 0.05},
			{"prefix-cap-stricter", 0, PortCaps{Rate: 150}, []SourceCap{{Prefix: pfx, Rate: 60}}, 60, 0.05},
			{"cap-above-p", 0.5, PortCaps{Rate: 1000}, nil, 150, 0.1}, // p admits 300 × 0.5
		}
		for _, tt := range tests {
			must(t, d.SetPolicies([]PortPolicy{{Key: k, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: tt.p, Caps: tt.caps}}))
			must(t, d.SetSourceCaps(map[olc.PortKey][]SourceCap{k: tt.src}))
			offer(o, time.Second) // the bucket's burst spent
			before := stats(t, d).Ports[k]
			sent, ok := offer(o, dur)
			after := stats(t, d).Ports[k]
			got := float64(ok[0]) / dur.Seconds()
			t.Logf("%s: offered %.0f/s, admitted %.1f/s (want %.0f/s), capped %d, dropped %d", tt.name,
				float64(sent[0])/dur.Seconds(), got, tt.want, after.Capped-before.Capped, after.Dropped-before.Dropped)
			if got < tt.want*(1-tt.tolr) || got > tt.want*(1+tt.tolr) {
				t.Errorf("%s: admitted %.1f/s, want %.0f/s within %.0f %%", tt.name, got, tt.want, tt.tolr*100)
			}
			// A cap above what p admits refuses none but what a burst of
			// arrivals takes beyond its bucket: at most 1 % of them.
			if refused := after.Capped - before.Capped; tt.p > 0 && float64(refused) > 0.01*float64(sent[0]) {
				t.Errorf("%s: a cap above what p admits refused %d of %d", tt.name, refused, sent[0])
			}
		}
	})
}
