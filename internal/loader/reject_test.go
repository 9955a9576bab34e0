package loader

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/olc"
)

// Return codes of an answered SYN.
const (
	xdpTX          = 3
	tcActRedirect  = 7
	portReject     = 8443
	portRejectUDP  = 5353
	rejectISN      = 0x01020304
	rejectSrcPort  = 40000
	rejectTestRate = 1 // per second: the burst is all a test run gets
)

// runRaw runs frame through the hook's program and returns the return code
// and the frame as the program left it (its length included).
func runRaw(t testing.TB, d *Datapath, h hook, frame []byte) (uint32, []byte) {
	t.Helper()
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	ret, err := d.prog(h).Run(opts)
	if err != nil {
		t.Fatalf("run %s program: %v", h, err)
	}
	return ret, opts.DataOut
}

// rejectDatapath loads a datapath whose portReject (TCP and UDP) sheds
// everything with the reject action, in enforce mode.
func rejectDatapath(t *testing.T, cfg Config) *Datapath {
	t.Helper()
	d := loadTest(t, cfg)
	must(t, d.SetPolicies([]PortPolicy{
		{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: portReject}, Mode: olc.ModeEnforce, Action: olc.ActionReject, DropProbability: 1},
		{Key: olc.PortKey{Proto: olc.ProtoUDP, Port: portRejectUDP}, Mode: olc.ModeEnforce, Action: olc.ActionReject, DropProbability: 1},
	}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	return d
}

func rejectSYN(flags uint8) []byte {
	return tcpSeg{rejectSrcPort, portReject, rejectISN, flags}.bytes()
}

// destOpts is an 8-byte Destination Options header (PadN) followed by next.
func destOpts(next uint8) []byte { return []byte{next, 0, 1, 4, 0, 0, 0, 0} }

// TestRejectReply runs SYNs to a port with the reject action through both
// programs and decodes the reply with gopacket: a RST|ACK from the SYN's
// destination to its source (MACs, addresses and ports swapped), seq 0,
// ack ISN+1, no options, no payload, IPv4 and TCP checksums right, VLAN
// tags kept, IPv6 extension headers and IPv4 options gone (at XDP the
// frame keeps its length: the rest is padding after the IP packet, which
// the decoder, like every receiver, leaves out); the verdict is XDP_TX or
// a redirect. Each answered SYN counts as dropped and rejected.
func TestRejectReply(t *testing.T) {
	d := rejectDatapath(t, Config{})
	cases := []struct {
		name  string
		frame []byte
		vlans []uint16 // TPIDs of the in-band tags, outer first
		ipv6  bool
	}{
		{"ipv4", ipv4Frame(client4, server4, 6, 0x10, rejectSYN(tcpSYN)), nil, false},
		{"ipv4-options", ipv4OptionsFrame(6, tcpSeg{rejectSrcPort, portReject, rejectISN, tcpSYN}.bytes()), nil, false},
		{"ipv4-ecn-setup", ipv4Frame(client4, server4, 6, 0, rejectSYN(tcpSYN|0xc0)), nil, false},
		{"ipv6", ipv6Frame(client6, server6, 6, 0, nil, rejectSYN(tcpSYN)), nil, true},
		{"ipv6-hbh-dstopts", ipv6Frame(client6, server6, 0, 0, append(hopByHop(60), destOpts(6)...), rejectSYN(tcpSYN)), nil, true},
		{"vlan", tagged(0x8100, ipv4Frame(client4, server4, 6, 0, rejectSYN(tcpSYN))), []uint16{0x8100}, false},
		{"qinq", tagged(0x88a8, tagged(0x8100, ipv4Frame(client4, server4, 6, 0, rejectSYN(tcpSYN)))), []uint16{0x88a8, 0x8100}, false},
		{"qinq-ipv6-hbh", tagged(0x88a8, tagged(0x8100, ipv6Frame(client6, server6, 0, 0, hopByHop(6), rejectSYN(tcpSYN)))), []uint16{0x88a8, 0x8100}, true},
	}
	for _, c := range cases {
		for _, h := range hooks {
			t.Run(c.name+"/"+string(h), func(t *testing.T) {
				before := stats(t, d).Ports[olc.PortKey{Proto: olc.ProtoTCP, Port: portReject}]
				ret, out := runRaw(t, d, h, append([]byte(nil), c.frame...))
				want := uint32(xdpTX)
				if h == hookTC {
					want = tcActRedirect
				}
				if ret != want {
					t.Fatalf("%s returned %d, want %d", h, ret, want)
				}
				checkRST(t, c.frame, out, c.vlans, c.ipv6, h == hookXDP)
				delta := stats(t, d).Ports[olc.PortKey{Proto: olc.ProtoTCP, Port: portReject}].sub(before)
				delta.SYNRetransmits = 0
				if wantD := (Counters{NewConns: 1, Dropped: 1, Rejected: 1}); delta != wantD {
					t.Errorf("counters moved by %+v, want %+v", delta, wantD)
				}
			})
		}
	}
}

// checkRST decodes reply and checks it answers syn. padded: the reply
// keeps the SYN's frame length (XDP), the SYN's bytes after the reply's
// IP packet left as link-layer padding; else it ends with its TCP header.
func checkRST(t *testing.T, syn, reply []byte, vlans []uint16, ipv6, padded bool) {
	t.Helper()
	l3 := 14 + 4*len(vlans)
	wantLen := l3 + 20 + 20
	if ipv6 {
		wantLen = l3 + 40 + 20
	}
	switch {
	case padded && (len(reply) != len(syn) || !bytes.Equal(reply[wantLen:], syn[wantLen:])):
		t.Fatalf("reply is %d bytes, want the SYN's %d with its bytes after %d unchanged: % x", len(reply), len(syn), wantLen, reply)
	case !padded && len(reply) != wantLen:
		t.Fatalf("reply is %d bytes, want %d: % x", len(reply), wantLen, reply)
	}
	p := gopacket.NewPacket(reply, layers.LayerTypeEthernet, gopacket.Default)
	if e := p.ErrorLayer(); e != nil {
		t.Fatalf("decode reply: %v", e.Error())
	}
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if !bytes.Equal(eth.DstMAC, syn[6:12]) || !bytes.Equal(eth.SrcMAC, syn[0:6]) {
		t.Errorf("MACs %s -> %s, want the SYN's swapped", eth.SrcMAC, eth.DstMAC)
	}
	var tags []uint16
	for _, l := range p.Layers() {
		if q, ok := l.(*layers.Dot1Q); ok {
			if q.VLANIdentifier != 42 {
				t.Errorf("tag VLAN %d, want 42 as in the SYN", q.VLANIdentifier)
			}
		}
	}
	for i := 12; i+4 <= l3+2 && i < len(reply); i += 4 {
		if tp := binary.BigEndian.Uint16(reply[i:]); tp == 0x8100 || tp == 0x88a8 {
			tags = append(tags, tp)
		}
	}
	if len(tags) != len(vlans) || (len(tags) > 0 && !bytes.Equal(reply[12:l3], syn[12:l3])) {
		t.Errorf("tags %#x, want the SYN's %#x, unchanged", tags, vlans)
	}
	tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if !ok {
		t.Fatalf("no TCP layer in the reply: %v", p)
	}
	var net gopacket.NetworkLayer
	if ipv6 {
		ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if !ip.SrcIP.Equal(server6.AsSlice()) || !ip.DstIP.Equal(client6.AsSlice()) {
			t.Errorf("IPv6 %s -> %s, want %s -> %s", ip.SrcIP, ip.DstIP, server6, client6)
		}
		if ip.NextHeader != layers.IPProtocolTCP || ip.Length != 20 || ip.HopLimit != 64 {
			t.Errorf("IPv6 next header %d, payload length %d, hop limit %d: want TCP, 20, 64", ip.NextHeader, ip.Length, ip.HopLimit)
		}
		net = ip
	} else {
		ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ip.SrcIP.Equal(server4.AsSlice()) || !ip.DstIP.Equal(client4.AsSlice()) {
			t.Errorf("IPv4 %s -> %s, want %s -> %s", ip.SrcIP, ip.DstIP, server4, client4)
		}
		if ip.IHL != 5 || ip.Length != 40 || ip.TTL != 64 || ip.Protocol != layers.IPProtocolTCP || ip.Flags != layers.IPv4DontFragment || ip.TOS != 0 {
			t.Errorf("IPv4 ihl %d, length %d, ttl %d, proto %d, flags %v, tos %#x: want 5, 40, 64, TCP, DF, 0", ip.IHL, ip.Length, ip.TTL, ip.Protocol, ip.Flags, ip.TOS)
		}
		if s := ipv4Checksum(reply[l3 : l3+20]); s != 0 {
			t.Errorf("IPv4 header checksum %#04x is wrong (sum %#04x)", ip.Checksum, s)
		}
		net = ip
	}
	if tcp.SrcPort != portReject || tcp.DstPort != rejectSrcPort {
		t.Errorf("ports %d -> %d, want %d -> %d", tcp.SrcPort, tcp.DstPort, portReject, rejectSrcPort)
	}
	if !tcp.RST || !tcp.ACK || tcp.SYN || tcp.FIN || tcp.PSH || tcp.URG || tcp.ECE || tcp.CWR {
		t.Errorf("flags %s, want RST|ACK only", tcpFlags(tcp))
	}
	if tcp.Seq != 0 || tcp.Ack != rejectISN+1 {
		t.Errorf("seq %d ack %#x, want 0 and ISN+1 = %#x", tcp.Seq, tcp.Ack, rejectISN+1)
	}
	if tcp.DataOffset != 5 || len(tcp.Options) != 0 || len(tcp.Payload) != 0 || tcp.Window != 0 || tcp.Urgent != 0 {
		t.Errorf("data offset %d, %d options, %d payload bytes, window %d, urgent %d: want 5, none, none, 0, 0",
			tcp.DataOffset, len(tcp.Options), len(tcp.Payload), tcp.Window, tcp.Urgent)
	}
	if err := tcp.SetNetworkLayerForChecksum(net); err != nil {
		t.Fatal(err)
	}
	// Over the segment with its checksum in: 0 when the checksum is right.
	if s, err := tcp.ComputeChecksum(); err != nil || s != 0 {
		t.Errorf("TCP checksum %#04x is wrong (residue %#04x, %v)", tcp.Checksum, s, err)
	}
}

func tcpFlags(t *layers.TCP) string {
	var b []byte
	for _, f := range []struct {
		on bool
		c  byte
	}{{t.FIN, 'F'}, {t.SYN, 'S'}, {t.RST, 'R'}, {t.PSH, 'P'}, {t.ACK, 'A'}, {t.URG, 'U'}, {t.ECE, 'E'}, {t.CWR, 'C'}} {
		if f.on {
			b = append(b, f.c)
		}
	}
	return string(b)
}

// TestRejectNeverAnswers: the reject action answers nothing but a SYN it
// sheds. A SYN with data, a SYN from a multicast or broadcast source and a
// UDP datagram are shed but dropped (a SYN with data counted dropped, not
// rejected); SYN+ACK and ACK are not new connections and pass untouched;
// an exempt port, an exempt source, observe mode (counted would-reject)
// and p = 0 pass the SYN unchanged.
func TestRejectNeverAnswers(t *testing.T) {
	d := rejectDatapath(t, Config{})
	synData := ipv4Frame(client4, server4, 6, 0, append(rejectSYN(tcpSYN), []byte("GET / HTTP/1.0\r\n\r\n")...))
	synData6 := ipv6Frame(client6, server6, 6, 0, nil, append(rejectSYN(tcpSYN), 1, 2, 3, 4))
	mcast := ipv4Frame(netip.MustParseAddr("224.0.0.5"), server4, 6, 0, rejectSYN(tcpSYN))
	bcast := ipv4Frame(netip.MustParseAddr("255.255.255.255"), server4, 6, 0, rejectSYN(tcpSYN))
	mcast6 := ipv6Frame(netip.MustParseAddr("ff02::1"), server6, 6, 0, nil, rejectSYN(tcpSYN))
	groupMAC := ipv4Frame(client4, server4, 6, 0, rejectSYN(tcpSYN))
	groupMAC[6] |= 1
	udp := ipv4Frame(client4, server4, 17, 0, func() []byte {
		u := make([]byte, 20)
		binary.BigEndian.PutUint16(u[0:], 40000)
		binary.BigEndian.PutUint16(u[2:], portRejectUDP)
		binary.BigEndian.PutUint16(u[4:], 20)
		return u
	}())
	synAck := ipv4Frame(client4, server4, 6, 0, rejectSYN(tcpSYN|tcpACK))
	ack := ipv4Frame(client4, server4, 6, 0, rejectSYN(tcpACK))
	plain := ipv4Frame(client4, server4, 6, 0, rejectSYN(tcpSYN))

	type step struct {
		name   string
		frame  []byte
		setup  func()
		pass   bool // else dropped
		delta  Counters
		udpKey bool
	}
	enforce := func() {
		must(t, d.SetMode(olc.ModeEnforce))
		must(t, d.SetExceptions(nil, nil))
		must(t, d.SetDropProbabilities(map[olc.PortKey]float64{{Proto: olc.ProtoTCP, Port: portReject}: 1, {Proto: olc.ProtoUDP, Port: portRejectUDP}: 1}))
		must(t, d.Heartbeat())
	}
	steps := []step{
		{"syn-with-data", synData, enforce, false, Counters{NewConns: 1, Dropped: 1}, false},
		{"syn-with-data-ipv6", synData6, enforce, false, Counters{NewConns: 1, Dropped: 1}, false},
		{"multicast-source", mcast, enforce, false, Counters{NewConns: 1, Dropped: 1}, false},
		{"broadcast-source", bcast, enforce, false, Counters{NewConns: 1, Dropped: 1}, false},
		{"multicast-source-ipv6", mcast6, enforce, false, Counters{NewConns: 1, Dropped: 1}, false},
		{"group-source-mac", groupMAC, enforce, false, Counters{NewConns: 1, Dropped: 1}, false},
		{"udp", udp, enforce, false, Counters{NewConns: 1, Dropped: 1}, true},
		{"syn-ack", synAck, enforce, true, Counters{}, false},
		{"ack", ack, enforce, true, Counters{}, false},
		{"exempt-port", plain, func() {
			enforce()
			must(t, d.SetExceptions([]olc.PortKey{{Proto: olc.ProtoTCP, Port: portReject}}, nil))
		}, true, Counters{NewConns: 1, Passed: 1, Exempt: 1}, false},
		{"exempt-source", plain, func() {
			enforce()
			must(t, d.SetExceptions(nil, []netip.Prefix{netip.PrefixFrom(client4, 32)}))
		}, true, Counters{NewConns: 1, Passed: 1, Exempt: 1}, false},
		{"observe", plain, func() {
			enforce()
			must(t, d.SetMode(olc.ModeObserve))
		}, true, Counters{NewConns: 1, Passed: 1, WouldDrop: 1, WouldReject: 1}, false},
		{"p0", plain, func() {
			enforce()
			must(t, d.SetDropProbabilities(map[olc.PortKey]float64{{Proto: olc.ProtoTCP, Port: portReject}: 0}))
		}, true, Counters{NewConns: 1, Passed: 1}, false},
	}
	for _, s := range steps {
		for _, h := range hooks {
			t.Run(s.name+"/"+string(h), func(t *testing.T) {
				s.setup()
				k := olc.PortKey{Proto: olc.ProtoTCP, Port: portReject}
				if s.udpKey {
					k = olc.PortKey{Proto: olc.ProtoUDP, Port: portRejectUDP}
				}
				before := stats(t, d)
				ret, out := runRaw(t, d, h, append([]byte(nil), s.frame...))
				after := stats(t, d)
				got := toVerdict(t, h, ret)
				if want := map[bool]verdict{true: verdictPass, false: verdictDrop}[s.pass]; got != want {
					t.Errorf("verdict %s, want %s", got, want)
				}
				if s.pass && !bytes.Equal(out[:len(s.frame)], s.frame) {
					t.Errorf("a passed frame was changed:\n got % x\nwant % x", out[:len(s.frame)], s.frame)
				}
				delta := after.Ports[k].sub(before.Ports[k])
				delta.SYNRetransmits = 0
				if delta != s.delta {
					t.Errorf("counters moved by %+v, want %+v", delta, s.delta)
				}
			})
		}
	}
}

// TestRejectRateLimit: with a limit of rejectTestRate per second and a
// burst of 5, a run of 40 SYNs on one CPU gets 5 answers (6 if a second
// passes) and the rest are dropped and counted as limited. A SYN dropped
// over the limit is remembered, so its retransmit counts as one; an
// answered SYN is not (it is not retransmitted).
func TestRejectRateLimit(t *testing.T) {
	d := rejectDatapath(t, Config{RejectRate: rejectTestRate, RejectBurst: 5})
	for _, h := range hooks {
		t.Run(string(h), func(t *testing.T) {
			// Fresh buckets for each hook: a new limit keeps the tokens,
			// so wait for none, and use a new datapath instead.
			d := d
			if h == hookTC {
				d = rejectDatapath(t, Config{RejectRate: rejectTestRate, RejectBurst: 5})
			}
			k := olc.PortKey{Proto: olc.ProtoTCP, Port: portReject}
			before := stats(t, d)
			answered, dropped := 0, 0
			start := time.Now()
			for i, ret := range runSYNsOnOneCPU(t, d, h) {
				switch {
				case h == hookXDP && ret == xdpTX, h == hookTC && ret == tcActRedirect:
					answered++
				case h == hookXDP && ret == xdpDrop, h == hookTC && ret == tcActShot:
					dropped++
				default:
					t.Fatalf("SYN %d: return code %d", i, ret)
				}
			}
			maxAnswered := 5
			if time.Since(start) >= time.Second {
				maxAnswered++
			}
			if answered < 5 || answered > maxAnswered || answered+dropped != 40 {
				t.Errorf("%d answered, %d dropped of 40: want 5 answered (at most %d)", answered, dropped, maxAnswered)
			}
			after := stats(t, d)
			if n := after.RejectLimited - before.RejectLimited; n != uint64(dropped) {
				t.Errorf("limited counted %d, want %d", n, dropped)
			}
			delta := after.Ports[k].sub(before.Ports[k])
			if delta.Rejected != uint64(answered) || delta.Dropped != 40 || delta.SYNRetransmits != 0 {
				t.Errorf("counters moved by %+v, want %d rejected, 40 dropped, no retransmit", delta, answered)
			}
			// The SYNs again: the dropped ones are retransmits, the
			// answered ones were not remembered.
			before = after
			runSYNsOnOneCPU(t, d, h)
			delta = stats(t, d).Ports[k].sub(before.Ports[k])
			if delta.SYNRetransmits < uint64(dropped) || delta.SYNRetransmits > 40-5 {
				t.Errorf("%d of the SYNs seen again counted as retransmits, want the %d dropped ones (not the %d answered)",
					delta.SYNRetransmits, dropped, answered)
			}
		})
	}
}

// runSYNsOnOneCPU runs 40 SYNs of distinct clients to portReject through
// the hook's program on a thread pinned to one CPU, so that every run meets
// the same per-CPU bucket, and returns the return codes.
func runSYNsOnOneCPU(t *testing.T, d *Datapath, h hook) []uint32 {
	t.Helper()
	var rets []uint32
	var runErr error
	onOneCPU(t, func() {
		for i := range 40 {
			frame := ipv4Frame(client4, server4, 6, 0, tcpSeg{uint16(20000 + i), portReject, uint32(i), tcpSYN}.bytes())
			ret, err := d.prog(h).Run(&ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)})
			if err != nil {
				runErr = err
				return
			}
			rets = append(rets, ret)
		}
	})
	if runErr != nil {
		t.Fatalf("run %s program: %v", h, runErr)
	}
	return rets
}

// onOneCPU runs fn on a thread pinned to the first CPU it may use
// (onCPU); the thread is not reused.
func onOneCPU(t *testing.T, fn func()) {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatalf("affinity: %v", err)
	}
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			if !onCPU(t, c, fn) {
				t.Errorf("pin to CPU %d failed", c)
			}
			return
		}
	}
	t.Error("no CPU in the affinity mask")
}

// TestRejectedSplit: the datapath counts answered SYNs (enforce) and
// observed ones (observe) in one counter, and the loader tells them apart
// by the port's mode and action: exact across mode and action changes,
// with or without a read between them, two kinds in one fold's interval
// and three kinds between two reads included.
func TestRejectedSplit(t *testing.T) {
	type step struct {
		global, port olc.Mode
		action       olc.Action
		syns         int
		read         bool // read the counters after this step
	}
	const e, o = olc.ModeEnforce, olc.ModeObserve
	const r, dr, mk = olc.ActionReject, olc.ActionDrop, olc.ActionMark
	tests := []struct {
		name  string
		steps []step
		want  Counters // Rejected, WouldReject, Dropped, WouldDrop, Marked
	}{
		{"enforce then observe", []step{{e, e, r, 3, false}, {o, e, r, 2, false}},
			Counters{Rejected: 3, WouldReject: 2, Dropped: 3, WouldDrop: 2}},
		{"observe then enforce, read between", []step{{o, o, r, 2, true}, {e, e, r, 3, false}},
			Counters{Rejected: 3, WouldReject: 2, Dropped: 3, WouldDrop: 2}},
		{"observe drop then observe reject", []step{{o, o, dr, 2, false}, {o, o, r, 3, false}},
			Counters{WouldReject: 3, WouldDrop: 5}},
		{"three kinds between reads", []step{{e, e, r, 3, false}, {e, o, r, 2, false}, {e, o, dr, 4, false}},
			Counters{Rejected: 3, WouldReject: 2, Dropped: 3, WouldDrop: 6}},
		{"three kinds, other order", []step{{o, o, dr, 4, false}, {o, o, r, 2, false}, {e, e, r, 3, false}, {o, e, mk, 1, false}},
			Counters{Rejected: 3, WouldReject: 2, Dropped: 3, WouldDrop: 7}},
		{"mark then reject in enforce", []step{{e, e, mk, 2, false}, {e, e, r, 3, false}, {o, o, r, 1, true}},
			Counters{Rejected: 3, WouldReject: 1, Dropped: 3, WouldDrop: 1, Marked: 2}},
	}
	k := olc.PortKey{Proto: olc.ProtoTCP, Port: portReject}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := loadTest(t, Config{StaleAfter: time.Hour})
			must(t, d.Heartbeat())
			seq := uint32(1)
			var pol PortPolicy
			for _, s := range tt.steps {
				// SetPolicies folds the counters, SetMode does not: a
				// global mode change leaves two kinds in one interval.
				if p := (PortPolicy{Key: k, Mode: s.port, Action: s.action, DropProbability: 1}); p != pol {
					must(t, d.SetPolicies([]PortPolicy{p}))
					pol = p
				}
				must(t, d.SetMode(s.global))
				for range s.syns {
					if _, err := d.prog(hookXDP).Run(&ebpf.RunOptions{Data: syn4(portReject, seq)}); err != nil {
						t.Fatal(err)
					}
					seq++
				}
				if s.read {
					stats(t, d)
				}
			}
			c := stats(t, d).Ports[k]
			got := Counters{Rejected: c.Rejected, WouldReject: c.WouldReject, Dropped: c.Dropped, WouldDrop: c.WouldDrop, Marked: c.Marked}
			if got != tt.want {
				t.Errorf("counters %+v, want %+v", got, tt.want)
			}
		})
	}
}
