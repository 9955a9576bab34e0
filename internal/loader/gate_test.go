package loader

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
)

// Request gate tests (bpf/gate.h): a keep-alive flow is brought to a state
// through an ingress program and TC egress (BPF_PROG_TEST_RUN) with the
// port's drop probability at 0, then p is set to 1 and one more client
// segment is run. A request start on an idle connection becomes, at XDP,
// the client's RST|ACK (XDP_TX) and, at TC, the server's RST (the packet,
// passed on) and the client's RST|ACK (a clone sent out of the interface,
// captured on the veth's other end); both are decoded and
// checksum-verified with gopacket. Everything else passes byte for byte.
// TC runs in the netns rig so that the clone leaves through a veth of its
// own, never the host's.

var (
	gateClient4 = netip.MustParseAddr("203.0.113.10")
	gateServer4 = netip.MustParseAddr("198.51.100.20")
	gateClient6 = netip.MustParseAddr("2001:db8:1::10")
	gateServer6 = netip.MustParseAddr("2001:db8:1::20")
)

// gateFamily is one encapsulation of the flow under test: client segments
// come in with it, server segments leave with the same tags (and no
// extension headers).
type gateFamily struct {
	name  string
	vlans []uint16 // in-band tags, outer first
	ipv6  bool
	exts  bool // client segments carry Hop-by-Hop + Destination Options
}

var gateFamilies = []gateFamily{
	{name: "ipv4"},
	{name: "ipv6-hbh-dstopts", ipv6: true, exts: true},
	{name: "vlan", vlans: []uint16{0x8100}},
	{name: "qinq-ipv6-hbh-dstopts", vlans: []uint16{0x88a8, 0x8100}, ipv6: true, exts: true},
}

func (f gateFamily) addrs(toServer bool) (src, dst netip.Addr) {
	c, s := gateClient4, gateServer4
	if f.ipv6 {
		c, s = gateClient6, gateServer6
	}
	if toServer {
		return c, s
	}
	return s, c
}

// seg builds a segment of the flow: toServer from the client (cport) to
// the server (sport), else back.
func (f gateFamily) seg(toServer bool, seq, ack uint32, flags uint8, n int) []byte {
	src, dst := f.addrs(toServer)
	sp, dp := uint16(cport), uint16(sport)
	if !toServer {
		sp, dp = dp, sp
	}
	l4 := tcpData{src, dst, sp, dp, seq, ack, flags, n}.l4()
	var fr []byte
	switch {
	case !f.ipv6:
		fr = ipv4Frame(src, dst, 6, 0, l4)
	case f.exts && toServer:
		fr = ipv6Frame(src, dst, 0, 0, append(hopByHop(60), destOpts(6)...), l4)
	default:
		fr = ipv6Frame(src, dst, 6, 0, nil, l4)
	}
	for i := len(f.vlans) - 1; i >= 0; i-- {
		fr = tagged(f.vlans[i], fr)
	}
	return fr
}

func (f gateFamily) cli(seq, ack uint32, flags uint8, n int) []byte {
	return f.seg(true, seq, ack, flags, n)
}

func (f gateFamily) srv(seq, ack uint32, flags uint8, n int) []byte {
	return f.seg(false, seq, ack, flags, n)
}

// gateCase: setup runs at p = 0, last at p = 1.
type gateCase struct {
	name    string
	setup   func(f gateFamily) []step
	last    func(f gateFamily) []byte
	reset   bool // last becomes the two resets
	off     bool // the port's mode off
	observe bool // the port's mode observe (default enforce)
	noGate  bool // the port's RequestGate off
	exempt  bool // the client's address is an exception source
	// retxLast puts the port under "retransmits last": a request start is
	// a first attempt, and passes whatever p.
	retxLast bool
	// Counters the last segment moves: request starts on existing
	// connections, observe-mode selections.
	reused, wouldReset uint64
}

// idle: a first request and its answer, acknowledged: a keep-alive
// connection with nothing outstanding, the next request at cseq0+100.
func idle(f gateFamily) []step {
	return []step{
		in(0, f.cli(cseq0, sseq0, psh, 100)),
		out(1*ms, f.srv(sseq0, cseq0+100, psh, 200)),
		in(2*ms, f.cli(cseq0+100, sseq0+200, tcpACK, 0)),
	}
}

func nextRequest(f gateFamily) []byte { return f.cli(cseq0+100, sseq0+200, psh, 100) }

var gateCases = []gateCase{
	{name: "request start on an idle keep-alive connection", setup: idle, last: nextRequest, reset: true, reused: 1},
	{name: "request start under retransmits last", setup: idle, last: nextRequest, retxLast: true, reused: 1},
	{name: "continuation of a request", setup: func(f gateFamily) []step {
		return append(idle(f), in(3*ms, f.cli(cseq0+100, sseq0+200, tcpACK, 1448)))
	}, last: func(f gateFamily) []byte { return f.cli(cseq0+1548, sseq0+200, psh, 100) }},
	{name: "pipelined request while one is outstanding", setup: func(f gateFamily) []step {
		return append(idle(f), in(3*ms, f.cli(cseq0+100, sseq0+200, psh, 100)))
	}, last: func(f gateFamily) []byte { return f.cli(cseq0+200, sseq0+200, psh, 100) }},
	{name: "server data unacknowledged", setup: func(f gateFamily) []step {
		return []step{
			in(0, f.cli(cseq0, sseq0, psh, 100)),
			out(1*ms, f.srv(sseq0, cseq0+100, tcpACK, 1000)),
			out(1*ms, f.srv(sseq0+1000, cseq0+100, psh, 1000)),
			in(2*ms, f.cli(cseq0+100, sseq0+1000, tcpACK, 0)),
		}
	}, last: func(f gateFamily) []byte { return f.cli(cseq0+100, sseq0+1000, psh, 100) }, reused: 1},
	{name: "request after bytes the server has not acknowledged", setup: func(f gateFamily) []step {
		return append(idle(f), in(3*ms, f.cli(cseq0+100, sseq0+200, tcpACK, 50)),
			out(4*ms, f.srv(sseq0+200, cseq0+150, psh, 10)))
	}, last: func(f gateFamily) []byte { return f.cli(cseq0+160, sseq0+210, psh, 100) }, reused: 1},
	{name: "retransmit of an answered request", setup: idle,
		last: func(f gateFamily) []byte { return f.cli(cseq0, sseq0, psh, 100) }},
	{name: "pure ACK", setup: idle, last: func(f gateFamily) []byte { return f.cli(cseq0+100, sseq0+200, tcpACK, 0) }},
	{name: "FIN", setup: idle, last: func(f gateFamily) []byte { return f.cli(cseq0+100, sseq0+200, tcpFIN|tcpACK, 0) }},
	{name: "first request of a connection", setup: func(gateFamily) []step { return nil },
		last: func(f gateFamily) []byte { return f.cli(cseq0, sseq0, psh, 100) }},
	{name: "exempt source", setup: idle, last: nextRequest, exempt: true, reused: 1},
	{name: "gate off for the port", setup: idle, last: nextRequest, noGate: true, reused: 1},
	{name: "observe mode counts would_reset", setup: idle, last: nextRequest, observe: true, reused: 1, wouldReset: 1},
	{name: "off mode", setup: idle, last: nextRequest, off: true, reused: 1},
}

// gateDatapath loads a datapath timing every flow whose tcp/8080 has the
// request gate (unless noGate) in the case's mode, at p = 0.
func gateDatapath(t *testing.T, tc gateCase) *Datapath {
	t.Helper()
	d := loadTest(t, Config{StaleAfter: time.Hour, ResponseSample: 1, FlowTableSize: 64})
	mode := olc.ModeEnforce
	switch {
	case tc.off:
		mode = olc.ModeOff
	case tc.observe:
		mode = olc.ModeObserve
	}
	must(t, d.SetPolicies([]PortPolicy{
		{Key: tcp8080, Mode: mode, Action: olc.ActionDrop, RequestGate: !tc.noGate},
		{Key: olc.PortKey{Proto: olc.ProtoUDP, Port: 8080}, Mode: olc.ModeEnforce, Action: olc.ActionDrop, RequestGate: true},
	}))
	if tc.exempt {
		must(t, d.SetExceptions(nil, []netip.Prefix{
			netip.PrefixFrom(gateClient4, 32), netip.PrefixFrom(gateClient6, 128)}))
	}
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	return d
}

// skbCtx is the start of struct __sk_buff up to ifindex, the one field a
// test run sets: the device the packet came in on, which bpf_clone_redirect
// sends the client's reset out of.
type skbCtx struct {
	_       [10]uint32
	Ifindex uint32
}

// TestRequestGate runs every case in every family through XDP and TC.
func TestRequestGate(t *testing.T) {
	// The netns rig only for TC, where the client's reset leaves through
	// an interface.
	var n *testNet
	var nodeIf, peerIf int
	top := t
	rig := func(t *testing.T) {
		if n != nil {
			return
		}
		n = newTestNet(top) // removed when the whole test ends
		n.inServer(t, func() error {
			l, err := net.InterfaceByName(n.NodeIf)
			if l != nil {
				nodeIf = l.Index
			}
			return err
		})
		must(t, n.InPeer(func() error {
			l, err := net.InterfaceByName(n.PeerIf)
			if l != nil {
				peerIf = l.Index
			}
			return err
		}))
	}
	for _, f := range gateFamilies {
		for _, tc := range gateCases {
			for _, h := range hooks {
				t.Run(f.name+"/"+tc.name+"/"+string(h), func(t *testing.T) {
					d := gateDatapath(t, tc)
					var ret uint32
					var outFrame, clone []byte
					runSteps(t, d, h, tc.setup(f))
					must(t, d.SetDropProbabilities(map[olc.PortKey]float64{tcp8080: 1, {Proto: olc.ProtoUDP, Port: 8080}: 1}))
					if tc.retxLast {
						must(t, d.SetRetransmits(map[olc.PortKey]olc.Retransmits{tcp8080: olc.RetransmitsLast}))
					}
					last := tc.last(f)
					r0 := stats(t, d).Response[tcp8080]
					if h == hookXDP {
						ret, outFrame = runRaw(t, d, h, append([]byte(nil), last...))
					} else {
						rig(t)
						ret, outFrame, clone = runTCCaptured(t, n, d, nodeIf, peerIf, last, tc.reset)
					}
					r := stats(t, d).Response[tcp8080]
					r.Reused -= r0.Reused
					r.Resets -= r0.Resets
					r.WouldReset -= r0.WouldReset
					if r.Reused != tc.reused || r.WouldReset != tc.wouldReset {
						t.Errorf("reused %d would_reset %d, want %d %d", r.Reused, r.WouldReset, tc.reused, tc.wouldReset)
					}
					if !tc.reset {
						if want := verdictPass; toVerdict(t, h, ret) != want || !bytes.Equal(outFrame, last) {
							t.Fatalf("returned %#x, frame changed %v: want passed untouched", ret, !bytes.Equal(outFrame, last))
						}
						if r.Resets != 0 {
							t.Errorf("resets %d, want 0", r.Resets)
						}
						return
					}
					if r.Resets != 1 {
						t.Errorf("resets %d, want 1", r.Resets)
					}
					// The client's: seq = its rcv_nxt (every answer byte
					// acknowledged), ack = the end of the request.
					toClient := gateRST{f: f, toClient: true, seq: sseq0 + 200, ack: cseq0 + 200}
					toServer := gateRST{f: f, seq: cseq0 + 100, ack: sseq0 + 200}
					if h == hookXDP {
						if ret != xdpTX {
							t.Fatalf("XDP returned %d, want XDP_TX", ret)
						}
						toClient.check(t, last, outFrame, true)
						return
					}
					if ret != tcActUnspc {
						t.Fatalf("TC returned %#x, want TC_ACT_UNSPEC (the server's reset passed on)", ret)
					}
					toServer.check(t, last, outFrame, false)
					if clone == nil {
						t.Fatal("no RST|ACK left through the interface toward the client")
					}
					// The peer's stack takes the outer tag into metadata
					// before a packet socket sees the frame.
					cf, cseg := f, last
					if len(f.vlans) > 0 {
						cf.vlans = f.vlans[1:]
						cseg = append(append([]byte(nil), last[:12]...), last[16:]...)
					}
					gateRST{f: cf, toClient: true, seq: toClient.seq, ack: toClient.ack}.check(t, cseg, clone, false)
					ft, err := d.FlowTableOccupancy()
					must(t, err)
					if ft.Used != 0 {
						t.Errorf("flows in the table after the reset: %d, want 0", ft.Used)
					}
				})
			}
		}
	}
}

// runTCCaptured runs frame through TC ingress as if it came in on the
// node's veth (in the node namespace) and returns what the
// program returned, the frame it left, and the first TCP frame from the
// server's address that reached the peer's end (nil unless want: then
// nothing is waited for).
func runTCCaptured(t *testing.T, n *testNet, d *Datapath, nodeIf, peerIf int, frame []byte, want bool) (uint32, []byte, []byte) {
	t.Helper()
	var fd int
	must(t, n.InPeer(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: peerIf})
	}))
	defer unix.Close(fd)
	ctx := skbCtx{Ifindex: uint32(nodeIf)}
	opts := &ebpf.RunOptions{Data: append([]byte(nil), frame...), DataOut: make([]byte, len(frame)+256),
		Context: ctx}
	var ret uint32
	err := n.InNode(func() error {
		var err error
		ret, err = d.objs.OlcdTc.Run(opts)
		return err
	})
	if err != nil {
		t.Fatalf("run tc program: %v", err)
	}
	if !want {
		return ret, opts.DataOut, nil
	}
	// Bounded in time, not in frames: the fresh veth's neighbour
	// discovery may come first, and a loaded machine late.
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	must(t, unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv))
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		m, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		must(t, err)
		p := gopacket.NewPacket(buf[:m], layers.LayerTypeEthernet, gopacket.Default)
		if p.Layer(layers.LayerTypeTCP) == nil {
			continue
		}
		if nl := p.NetworkLayer(); nl != nil {
			src := nl.NetworkFlow().Src().Raw()
			if bytes.Equal(src, gateServer4.AsSlice()) || bytes.Equal(src, gateServer6.AsSlice()) {
				return ret, opts.DataOut, append([]byte(nil), buf[:m]...)
			}
		}
	}
	return ret, opts.DataOut, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// gateRST is the reset expected in one direction.
type gateRST struct {
	f        gateFamily
	toClient bool
	seq, ack uint32
}

// check decodes got and checks it against seg, the client segment it was
// made of. padded: got keeps seg's frame length (XDP), else it ends with
// its TCP header.
func (w gateRST) check(t *testing.T, seg, got []byte, padded bool) {
	t.Helper()
	l3 := 14 + 4*len(w.f.vlans)
	wantLen := l3 + 40
	if w.f.ipv6 {
		wantLen = l3 + 60
	}
	switch {
	case padded && len(got) != len(seg):
		t.Fatalf("frame is %d bytes, want the segment's %d", len(got), len(seg))
	case !padded && len(got) < wantLen, !padded && len(got) > wantLen && !bytes.Equal(got[wantLen:], make([]byte, len(got)-wantLen)):
		t.Fatalf("frame is %d bytes, want %d (or padded with zeros): % x", len(got), wantLen, got)
	}
	if !bytes.Equal(got[12:l3], seg[12:l3]) {
		t.Errorf("tags % x, want the segment's % x", got[12:l3], seg[12:l3])
	}
	p := gopacket.NewPacket(got[:wantLen], layers.LayerTypeEthernet, gopacket.Default)
	if e := p.ErrorLayer(); e != nil {
		t.Fatalf("decode: %v", e.Error())
	}
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	dmac, smac := seg[0:6], seg[6:12]
	if w.toClient {
		dmac, smac = smac, dmac
	}
	if !bytes.Equal(eth.DstMAC, dmac) || !bytes.Equal(eth.SrcMAC, smac) {
		t.Errorf("MACs %s -> %s, want %x -> %x", eth.SrcMAC, eth.DstMAC, smac, dmac)
	}
	src, dst := w.f.addrs(!w.toClient)
	var nl gopacket.NetworkLayer
	if w.f.ipv6 {
		ip, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if !ok {
			t.Fatalf("no IPv6 layer: %v", p)
		}
		if !ip.SrcIP.Equal(src.AsSlice()) || !ip.DstIP.Equal(dst.AsSlice()) || ip.NextHeader != layers.IPProtocolTCP || ip.Length != 20 {
			t.Errorf("IPv6 %s -> %s next %d length %d, want %s -> %s, TCP, 20 (no extension headers)", ip.SrcIP, ip.DstIP, ip.NextHeader, ip.Length, src, dst)
		}
		nl = ip
	} else {
		ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ok {
			t.Fatalf("no IPv4 layer: %v", p)
		}
		if !ip.SrcIP.Equal(src.AsSlice()) || !ip.DstIP.Equal(dst.AsSlice()) || ip.IHL != 5 || ip.Length != 40 || ip.Protocol != layers.IPProtocolTCP {
			t.Errorf("IPv4 %s -> %s ihl %d length %d proto %d, want %s -> %s, 5, 40, TCP", ip.SrcIP, ip.DstIP, ip.IHL, ip.Length, ip.Protocol, src, dst)
		}
		if s := ipv4Checksum(got[l3 : l3+20]); s != 0 {
			t.Errorf("IPv4 header checksum %#04x is wrong (sum %#04x)", ip.Checksum, s)
		}
		nl = ip
	}
	tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if !ok {
		t.Fatalf("no TCP layer: %v", p)
	}
	sp, dp := layers.TCPPort(cport), layers.TCPPort(sport)
	if w.toClient {
		sp, dp = dp, sp
	}
	if tcp.SrcPort != sp || tcp.DstPort != dp {
		t.Errorf("ports %d -> %d, want %d -> %d", tcp.SrcPort, tcp.DstPort, sp, dp)
	}
	if !tcp.RST || !tcp.ACK || tcp.SYN || tcp.FIN || tcp.PSH {
		t.Errorf("flags %s, want RST|ACK", tcpFlags(tcp))
	}
	if tcp.Seq != w.seq || tcp.Ack != w.ack {
		t.Errorf("seq %d ack %d, want %d %d", tcp.Seq, tcp.Ack, w.seq, w.ack)
	}
	if tcp.DataOffset != 5 || len(tcp.Payload) != 0 {
		t.Errorf("data offset %d, %d payload bytes: want 5, none", tcp.DataOffset, len(tcp.Payload))
	}
	must(t, tcp.SetNetworkLayerForChecksum(nl))
	if s, err := tcp.ComputeChecksum(); err != nil || s != 0 {
		t.Errorf("TCP checksum %#04x is wrong (residue %#04x, %v)", tcp.Checksum, s, err)
	}
}

// TestRequestGateUDP: a datagram to a UDP port whose policy asks for the
// gate at p = 1 is dropped as a UDP request always was, never turned into
// anything; one to the gated TCP port's number over UDP (no policy) passes
// untouched.
func TestRequestGateUDP(t *testing.T) {
	d := gateDatapath(t, gateCase{})
	must(t, d.SetDropProbabilities(map[olc.PortKey]float64{tcp8080: 1, {Proto: olc.ProtoUDP, Port: 8080}: 1}))
	u := udpFrame(gateClient4, gateServer4, cport, 8080)
	for _, h := range hooks {
		if v, out := run(t, d, h, append([]byte(nil), u...)); v != verdictDrop || !bytes.Equal(out[:len(u)], u) {
			t.Errorf("%s: udp/8080 at p = 1: %s, changed %v; want dropped unchanged", h, v, !bytes.Equal(out[:len(u)], u))
		}
		u53 := udpFrame(gateClient4, gateServer4, cport, 9999)
		if v, out := run(t, d, h, append([]byte(nil), u53...)); v != verdictPass || !bytes.Equal(out[:len(u53)], u53) {
			t.Errorf("%s: udp/9999: %s; want passed untouched", h, v)
		}
	}
	if r := stats(t, d).Response[tcp8080]; r.Resets != 0 || r.Reused != 0 {
		t.Errorf("tcp/8080 resets %d reused %d, want 0", r.Resets, r.Reused)
	}
}
