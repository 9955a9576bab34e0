package loader

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/resptime"
)

// Response-timing tests: crafted segment sequences run through an ingress
// program (XDP or TC) and the TC egress program with BPF_PROG_TEST_RUN, the
// clock injected through olcd_resp_ctl.test_now_ns.

// seg4 is a TCP segment with payload over IPv4.
type tcpData struct {
	src, dst     netip.Addr
	sport, dport uint16
	seq, ack     uint32
	flags        uint8
	payload      int
}

func (s tcpData) l4() []byte {
	b := make([]byte, 20+s.payload)
	binary.BigEndian.PutUint16(b[0:], s.sport)
	binary.BigEndian.PutUint16(b[2:], s.dport)
	binary.BigEndian.PutUint32(b[4:], s.seq)
	binary.BigEndian.PutUint32(b[8:], s.ack)
	b[12] = 5 << 4
	b[13] = s.flags
	binary.BigEndian.PutUint16(b[14:], 0xffff)
	for i := 20; i < len(b); i++ {
		b[i] = 'x'
	}
	return b
}

func (s tcpData) frame() []byte {
	if s.src.Is4() {
		return ipv4Frame(s.src, s.dst, 6, 0, s.l4())
	}
	return ipv6Frame(s.src, s.dst, 6, 0, nil, s.l4())
}

// step is one frame at one time: in (client to server, ingress) or out.
type step struct {
	at    time.Duration
	in    bool
	frame []byte
}

const (
	cport = 40000
	sport = 8080
	cseq0 = 1000
	sseq0 = 5000
	psh   = tcpPSH | tcpACK
)

// c and s build client and server IPv4 segments of the flow under test.
func c(seq, ack uint32, flags uint8, n int) []byte {
	return tcpData{client4, server4, cport, sport, seq, ack, flags, n}.frame()
}

func s(seq, ack uint32, flags uint8, n int) []byte {
	return tcpData{server4, client4, sport, cport, seq, ack, flags, n}.frame()
}

func in(at time.Duration, f []byte) step  { return step{at, true, f} }
func out(at time.Duration, f []byte) step { return step{at, false, f} }

const ms = time.Millisecond

// respCase expects, after its steps, these response times (each checked to
// land in the bucket of its duration), counters and flows left.
type respCase struct {
	name        string
	port        olc.PortKey // default tcp/8080
	steps       []step
	want        []time.Duration
	requests    uint64
	abandoned   uint64
	retransmits uint64
	flows       int // flows left in the table
}

var respCases = []respCase{
	{name: "request-response", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(20*ms, s(sseq0, cseq0+100, psh, 200)),
	}, want: []time.Duration{20 * ms}, requests: 1, flows: 1},
	{name: "multi-segment response: first byte stops", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(3*ms, s(sseq0, cseq0+100, tcpACK, 1448)),
		out(4*ms, s(sseq0+1448, cseq0+100, psh, 1448)),
	}, want: []time.Duration{3 * ms}, requests: 1, flows: 1},
	{name: "keep-alive second request", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(1*ms, s(sseq0, cseq0+100, psh, 200)),
		in(2*ms, c(cseq0+100, sseq0+200, tcpACK, 0)),
		in(5*ms, c(cseq0+100, sseq0+200, psh, 100)),
		out(8*ms, s(sseq0+200, cseq0+200, psh, 200)),
	}, want: []time.Duration{1 * ms, 3 * ms}, requests: 2, flows: 1},
	{name: "pipelined requests: the oldest is timed", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		in(1*ms, c(cseq0+100, sseq0, psh, 100)),
		out(10*ms, s(sseq0, cseq0+200, psh, 200)),
		out(12*ms, s(sseq0+200, cseq0+200, psh, 200)),
	}, want: []time.Duration{10 * ms}, requests: 1, flows: 1},
	{name: "retransmitted request data", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		in(200*ms, c(cseq0, sseq0, psh, 100)), // outstanding: no restart
		out(300*ms, s(sseq0, cseq0+100, psh, 200)),
		in(400*ms, c(cseq0, sseq0, psh, 100)), // answered: no new request
		out(401*ms, s(sseq0+200, cseq0+100, tcpACK, 0)),
	}, want: []time.Duration{300 * ms}, requests: 1, retransmits: 1, flows: 1},
	{name: "retransmit coalesced with the next request starts it", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(1*ms, s(sseq0, cseq0+100, psh, 200)),
		in(10*ms, c(cseq0+50, sseq0+200, psh, 150)), // 50 old bytes, then 100 new
		out(14*ms, s(sseq0+200, cseq0+200, psh, 200)),
	}, want: []time.Duration{1 * ms, 4 * ms}, requests: 2, flows: 1},
	{name: "retransmitted answer data does not stop the next request", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(1*ms, s(sseq0, cseq0+100, psh, 200)),
		in(10*ms, c(cseq0+100, sseq0+200, psh, 100)),
		out(11*ms, s(sseq0, cseq0+200, psh, 200)), // old answer again
		out(30*ms, s(sseq0+200, cseq0+200, psh, 200)),
	}, want: []time.Duration{1 * ms, 20 * ms}, requests: 2, flows: 1},
	{name: "pure ACK", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		in(1*ms, c(cseq0+100, sseq0, tcpACK, 0)),
		out(2*ms, s(sseq0, cseq0+100, tcpACK, 0)),
		out(5*ms, s(sseq0, cseq0+100, psh, 200)),
	}, want: []time.Duration{5 * ms}, requests: 1, flows: 1},
	{name: "window probe", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(5*ms, s(sseq0, cseq0+100, psh, 200)),
		// Zero-window probes of the server: seq snd_una-1 without
		// data, then one byte of the next data, no request waiting.
		out(205*ms, s(sseq0+199, cseq0+100, tcpACK, 0)),
		out(405*ms, s(sseq0+200, cseq0+100, tcpACK, 1)),
		in(500*ms, c(cseq0+100, sseq0+201, psh, 100)),
		out(502*ms, s(sseq0+201, cseq0+200, psh, 200)),
	}, want: []time.Duration{5 * ms, 2 * ms}, requests: 2, flows: 1},
	{name: "keep-alive probe", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(5*ms, s(sseq0, cseq0+100, psh, 200)),
		// TCP keep-alive probes: snd_nxt-1 with no data or one
		// garbage byte; the answers are pure ACKs.
		in(7200*ms, c(cseq0+99, sseq0+200, tcpACK, 0)),
		in(7275*ms, c(cseq0+99, sseq0+200, tcpACK, 1)),
		out(7276*ms, s(sseq0+200, cseq0+100, tcpACK, 0)),
	}, want: []time.Duration{5 * ms}, requests: 1, retransmits: 1, flows: 1},
	{name: "FIN from the client forgets the flow", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(5*ms, s(sseq0, cseq0+100, psh, 200)),
		in(6*ms, c(cseq0+100, sseq0+200, tcpFIN|tcpACK, 0)),
		out(7*ms, s(sseq0+200, cseq0+101, tcpFIN|tcpACK, 0)),
	}, want: []time.Duration{5 * ms}, requests: 1, flows: 0},
	{name: "FIN with the answer", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(5*ms, s(sseq0, cseq0+100, psh|tcpFIN, 200)),
	}, want: []time.Duration{5 * ms}, requests: 1, flows: 0},
	{name: "half-close after the request keeps the timer", steps: []step{
		in(0, c(cseq0, sseq0, psh|tcpFIN, 100)),
		out(9*ms, s(sseq0, cseq0+101, psh|tcpFIN, 200)),
	}, want: []time.Duration{9 * ms}, requests: 1, flows: 0},
	{name: "client gives up: FIN while waiting abandons", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		in(1000*ms, c(cseq0+100, sseq0, tcpFIN|tcpACK, 0)),
		out(1500*ms, s(sseq0, cseq0+101, psh, 200)),
	}, requests: 1, abandoned: 1, flows: 0},
	{name: "RST abandons the outstanding request", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		in(50*ms, c(cseq0+100, 0, tcpRST, 0)),
		out(60*ms, s(sseq0, cseq0+100, psh, 200)),
	}, requests: 1, abandoned: 1, flows: 0},
	{name: "RST from the server", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(50*ms, s(sseq0, cseq0+100, tcpRST|tcpACK, 0)),
	}, requests: 1, abandoned: 1, flows: 0},
	{name: "server-first greeting is not a response", steps: []step{
		out(0, s(sseq0, cseq0, psh, 30)), // 220 smtp.example ESMTP
		in(1*ms, c(cseq0, sseq0+30, psh, 20)),
		out(3*ms, s(sseq0+30, cseq0+20, psh, 60)),
	}, want: []time.Duration{2 * ms}, requests: 1, flows: 1},
	{name: "IPv6 with extension headers", steps: []step{
		in(0, ipv6Frame(client6, server6, 0, 0,
			append(hopByHop(60), []byte{6, 0, 1, 4, 0, 0, 0, 0}...), // HBH, Destination Options
			tcpData{client6, server6, cport, sport, cseq0, sseq0, psh, 100}.l4())),
		out(7*ms, tcpData{server6, client6, sport, cport, sseq0, cseq0 + 100, psh, 300}.frame()),
	}, want: []time.Duration{7 * ms}, requests: 1, flows: 1},
	{name: "VLAN", steps: []step{
		in(0, tagged(0x8100, c(cseq0, sseq0, psh, 100))),
		out(11*ms, tagged(0x8100, s(sseq0, cseq0+100, psh, 200))),
	}, want: []time.Duration{11 * ms}, requests: 1, flows: 1},
	{name: "QinQ", steps: []step{
		in(0, tagged(0x88a8, tagged(0x8100, c(cseq0, sseq0, psh, 100)))),
		out(11*ms, tagged(0x88a8, tagged(0x8100, s(sseq0, cseq0+100, psh, 200)))),
	}, want: []time.Duration{11 * ms}, requests: 1, flows: 1},
	{name: "UDP datagram in, next one out", port: olc.PortKey{Proto: olc.ProtoUDP, Port: 53}, steps: []step{
		in(0, udpFrame(client4, server4, cport, 53)),
		in(1*ms, udpFrame(client4, server4, cport, 53)), // outstanding: oldest timed
		out(4*ms, udpFrame(server4, client4, 53, cport)),
		out(5*ms, udpFrame(server4, client4, 53, cport)),
	}, want: []time.Duration{4 * ms}, requests: 1, flows: 1},
	{name: "unprotected port is not timed", steps: []step{
		in(0, tcpData{client4, server4, cport, 9999, cseq0, sseq0, psh, 100}.frame()),
		out(1*ms, tcpData{server4, client4, 9999, cport, sseq0, cseq0 + 100, psh, 100}.frame()),
	}, flows: 0},
	{name: "answer of a flow to another port does not stop", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(1*ms, tcpData{server4, client4, sport, cport + 1, sseq0, cseq0 + 100, psh, 100}.frame()),
	}, requests: 1, flows: 1},
	{name: "non-first fragment of an answer stops nothing", steps: []step{
		in(0, c(cseq0, sseq0, psh, 100)),
		out(1*ms, fragmentAt(s(sseq0, cseq0+100, psh, 100), 185)),
		out(2*ms, s(sseq0, cseq0+100, psh, 100)),
	}, want: []time.Duration{2 * ms}, requests: 1, flows: 1},
	{name: "malformed: header past the IP packet", steps: []step{
		in(0, truncateIPLen(c(cseq0, sseq0, psh, 100), 30)),
	}, flows: 0},
}

// udpFrame is a UDP datagram over IPv4 with 12 bytes of payload.
func udpFrame(src, dst netip.Addr, sp, dp uint16) []byte {
	u := make([]byte, 20)
	binary.BigEndian.PutUint16(u[0:], sp)
	binary.BigEndian.PutUint16(u[2:], dp)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	return ipv4Frame(src, dst, 17, 0, u)
}

// truncateIPLen sets an IPv4 frame's total length to n (checksum fixed).
func truncateIPLen(f []byte, n uint16) []byte {
	binary.BigEndian.PutUint16(f[16:], n)
	binary.BigEndian.PutUint16(f[24:], 0)
	binary.BigEndian.PutUint16(f[24:], ipv4Checksum(f[14:34]))
	return f
}

// fragmentAt makes an IPv4 frame a non-first fragment at offset off (in
// 8-byte units; checksum fixed): its "TCP header" is payload.
func fragmentAt(f []byte, off uint16) []byte {
	binary.BigEndian.PutUint16(f[20:], off&0x1fff)
	binary.BigEndian.PutUint16(f[24:], 0)
	binary.BigEndian.PutUint16(f[24:], ipv4Checksum(f[14:34]))
	return f
}

// setClock sets the datapath's injected clock (ns); 0 gives it back.
func setClock(t testing.TB, d *Datapath, ns uint64) {
	t.Helper()
	d.mu.Lock()
	d.rctl.TestNowNs = ns
	err := d.writeRespControl()
	d.mu.Unlock()
	must(t, err)
}

// clockBase keeps injected times clear of 0 (which means "no clock").
const clockBase = uint64(1000 * time.Second)

func runSteps(t *testing.T, d *Datapath, ingress hook, steps []step) {
	t.Helper()
	for i, st := range steps {
		setClock(t, d, clockBase+uint64(st.at))
		p := d.objs.OlcdTcEgress
		if st.in {
			p = d.prog(ingress)
		}
		ret, err := p.Run(&ebpf.RunOptions{Data: st.frame})
		if err != nil {
			t.Fatalf("step %d: run: %v", i, err)
		}
		if !st.in && ret != tcActUnspc {
			t.Fatalf("step %d: egress returned %#x, want TC_ACT_UNSPEC", i, ret)
		}
		if st.in && toVerdict(t, ingress, ret) != verdictPass {
			t.Fatalf("step %d: ingress dropped a segment", i)
		}
	}
}

// TestEgressFastPath checks TC egress's fast path for the commonest
// answer (Ethernet, IPv4 without options, TCP: olcd_parse_egress) against
// the general parse it skips: each answer after a request, sent untagged
// (fast path) and behind a VLAN tag (general parse), must leave the same
// counters, histogram and flows. The answers are the ones the fast path
// checks only after the sample: fragments, SYNs, headers past the IP
// packet, empty segments, FIN and RST.
func TestEgressFastPath(t *testing.T) {
	req := c(cseq0, sseq0, psh, 100)
	answers := []struct {
		name  string
		frame []byte
	}{
		{"answer", s(sseq0, cseq0+100, psh, 100)},
		{"non-first fragment", fragmentAt(s(sseq0, cseq0+100, psh, 100), 185)},
		{"first fragment, more to come", fragmentAt(s(sseq0, cseq0+100, psh, 100), 0x2000)},
		{"SYN alone", s(sseq0, 0, tcpSYN, 0)},
		{"SYN+ACK", s(sseq0, cseq0+100, tcpSYN|tcpACK, 0)},
		{"pure ACK", s(sseq0, cseq0+100, tcpACK, 0)},
		{"header past the IP packet", truncateIPLen(s(sseq0, cseq0+100, psh, 100), 30)},
		{"FIN without data", s(sseq0, cseq0+100, tcpFIN|tcpACK, 0)},
		{"FIN with data", s(sseq0, cseq0+100, tcpFIN|psh, 100)},
		{"RST", s(sseq0, cseq0+100, tcpRST|tcpACK, 0)},
		{"data offset 15", func() []byte {
			f := s(sseq0, cseq0+100, psh, 100)
			f[14+20+12] = 15 << 4
			return f
		}()},
	}
	for _, a := range answers {
		t.Run(a.name, func(t *testing.T) {
			var got [2]Response
			var flows [2]int
			for i, wrap := range []func([]byte) []byte{
				func(f []byte) []byte { return f },
				func(f []byte) []byte { return tagged(0x8100, f) },
			} {
				d := loadTimed(t, 1)
				runSteps(t, d, hookTC, []step{
					in(0, wrap(slices.Clone(req))),
					out(3*ms, wrap(slices.Clone(a.frame))),
					out(5*ms, wrap(s(sseq0+100, cseq0+100, psh, 100))),
				})
				got[i] = stats(t, d).Response[tcp8080]
				ft, err := d.FlowTableOccupancy()
				must(t, err)
				flows[i] = ft.Used
			}
			if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) || flows[0] != flows[1] {
				t.Errorf("fast path: %+v, %d flows; general parse: %+v, %d flows",
					summary(got[0]), flows[0], summary(got[1]), flows[1])
			}
		})
	}
}

// summary is a Response without its empty buckets, for messages.
func summary(r Response) string {
	var b strings.Builder
	fmt.Fprintf(&b, "req %d resp %d abandoned %d retransmits %d buckets", r.Requests, r.Responses, r.Abandoned, r.Retransmits)
	for i, n := range r.Buckets {
		if n != 0 {
			fmt.Fprintf(&b, " %d:%d", i, n)
		}
	}
	return b.String()
}

// TestCorpusEgress runs every frame of the packet corpus through TC
// egress with its ports timed and every flow sampled: a malformed frame
// is passed (TC_ACT_UNSPEC), whatever it is.
func TestCorpusEgress(t *testing.T) {
	cases := loadPacketCases(t)
	d := loadTest(t, Config{StaleAfter: time.Hour, ResponseSample: 1, FlowTableSize: 64})
	seen := map[olc.PortKey]bool{}
	var pols []PortPolicy
	for _, c := range cases {
		for _, k := range c.ports() {
			if !seen[k] {
				seen[k] = true
				pols = append(pols, PortPolicy{Key: k, Mode: olc.ModeEnforce, Action: olc.ActionDrop})
			}
		}
	}
	must(t, d.SetPolicies(pols))
	for _, c := range cases {
		ret, err := d.objs.OlcdTcEgress.Run(&ebpf.RunOptions{Data: c.frame})
		if err != nil {
			if len(c.frame) < 14 {
				continue // shorter than Ethernet: the test run refuses it
			}
			t.Fatalf("%s/%s: run: %v", filepath.Base(c.file), c.Name, err)
		}
		if ret != tcActUnspc {
			t.Errorf("%s/%s: egress returned %#x, want TC_ACT_UNSPEC", filepath.Base(c.file), c.Name, ret)
		}
	}
}

func loadTimed(t *testing.T, sample uint32) *Datapath {
	t.Helper()
	d := loadTest(t, Config{StaleAfter: time.Hour, ResponseSample: sample, FlowTableSize: 64})
	must(t, d.SetPolicies([]PortPolicy{
		{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop},
		{Key: olc.PortKey{Proto: olc.ProtoUDP, Port: 53}, Mode: olc.ModeEnforce, Action: olc.ActionDrop},
	}))
	must(t, d.SetMode(olc.ModeEnforce))
	must(t, d.Heartbeat())
	return d
}

// TestResponseTiming runs every case through XDP + TC egress and TC ingress
// + TC egress.
func TestResponseTiming(t *testing.T) {
	for _, ingress := range hooks {
		for _, tc := range respCases {
			t.Run(string(ingress)+"/"+tc.name, func(t *testing.T) {
				d := loadTimed(t, 1)
				runSteps(t, d, ingress, tc.steps)
				port := tc.port
				if port == (olc.PortKey{}) {
					port = tcp8080
				}
				r := stats(t, d).Response[port]
				var got []int
				for b, n := range r.Buckets {
					for range n {
						got = append(got, b)
					}
				}
				if len(got) != len(tc.want) || r.Responses != uint64(len(tc.want)) {
					t.Fatalf("responses: %d in buckets %v (counter %d), want %v", len(got), got, r.Responses, tc.want)
				}
				// Buckets ascend; so do the wanted times once sorted.
				want := sortedBuckets(tc.want)
				for i := range got {
					if got[i] != want[i] {
						lo, hi := resptime.Bounds(got[i])
						t.Errorf("response %d in bucket %d [%.6f, %.6f) s, want bucket %d", i, got[i], lo, hi, want[i])
					}
				}
				if r.Requests != tc.requests || r.Abandoned != tc.abandoned || r.Retransmits != tc.retransmits {
					t.Errorf("requests %d abandoned %d retransmits %d, want %d %d %d",
						r.Requests, r.Abandoned, r.Retransmits, tc.requests, tc.abandoned, tc.retransmits)
				}
				ft, err := d.FlowTableOccupancy()
				must(t, err)
				if ft.Used != tc.flows {
					t.Errorf("flows in the table: %d, want %d", ft.Used, tc.flows)
				}
			})
		}
	}
}

func sortedBuckets(ds []time.Duration) []int {
	var out []int
	for _, d := range ds {
		out = append(out, resptime.Bucket(d))
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// flowHash mirrors olcd_flow_hash (bpf/parse.h) for IPv4 flows on a
// little-endian machine (the loads the program makes), so that a test can
// tell which flows the sample takes. It is the same either way round.
func flowHash(seed uint64, cli, srv netip.Addr, cp, sp uint16) uint64 {
	c4, s4 := cli.As4(), srv.As4()
	addrs := uint64(binary.LittleEndian.Uint32(c4[:]) ^ binary.LittleEndian.Uint32(s4[:]))
	loaded := func(port uint16) uint64 { return uint64(port>>8 | port<<8) } // a big-endian u16 read little-endian
	h := (addrs | (loaded(cp)^loaded(sp))<<32) * seed
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	return h ^ h>>33
}

// TestSampleShareOverSeeds: the sample takes about its share of one
// client's consecutive source ports whatever the seed drawn at load (the
// seeds from a fixed generator: the test cannot flake). A multiply-shift
// alone does not: over these seeds 55 sampled a share off by more than
// 0.02, up to 20 % (docs/measurements.md §22).
func TestSampleShareOverSeeds(t *testing.T) {
	const n, ports = 16, 8000
	max := sampleMax(n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		seed := rng.Uint64() | 1
		c := 0
		for p := uint16(20000); p < 20000+ports; p++ {
			if uint32(flowHash(seed, client4, server4, p, sport)>>32) <= max {
				c++
			}
		}
		if share := float64(c) / ports; math.Abs(share-1.0/n) > 0.02 {
			t.Errorf("seed %#x: sampled share %.3f of %d consecutive ports, want 1/%d ± 0.02", seed, share, ports, n)
		}
	}
}

// TestResponseSample: with one flow in 16 sampled, exactly the flows whose
// hash the sample takes are timed, and an unsampled flow leaves no trace
// in the flow table (it never reached it) while a sampled one is in it.
func TestResponseSample(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("flowHash mirrors the little-endian loads")
	}
	const n = 16
	d := loadTimed(t, n)
	max := sampleMax(n)
	var sampled, unsampled []uint16
	for p := uint16(20000); p < 20000+8000; p++ {
		h := flowHash(d.rctl.Seed, client4, server4, p, sport)
		if uint32(h>>32) <= max {
			sampled = append(sampled, p)
		} else {
			unsampled = append(unsampled, p)
		}
	}
	share := float64(len(sampled)) / 8000
	if math.Abs(share-1.0/n) > 0.02 {
		t.Errorf("sampled share %.3f, want 1/%d ± 0.02", share, n)
	}
	for i, p := range []uint16{unsampled[0], unsampled[1], sampled[0]} {
		runSteps(t, d, hookXDP, []step{
			in(time.Duration(i)*time.Second, tcpData{client4, server4, p, sport, cseq0, sseq0, psh, 100}.frame()),
			out(time.Duration(i)*time.Second+ms, tcpData{server4, client4, sport, p, sseq0, cseq0 + 100, psh, 100}.frame()),
		})
	}
	st := stats(t, d)
	if r := st.Response[tcp8080]; r.Requests != 1 || r.Responses != 1 {
		t.Errorf("requests %d responses %d, want 1 1 (the sampled flow only)", r.Requests, r.Responses)
	}
	if st.Flows.Inserts != 1 {
		t.Errorf("flow table inserts %d, want 1", st.Flows.Inserts)
	}
}

// TestResponseTimingOff: with Config.ResponseSample 0 nothing is timed.
func TestResponseTimingOff(t *testing.T) {
	d := loadTimed(t, 0)
	runSteps(t, d, hookTC, respCases[0].steps)
	st := stats(t, d)
	if st.Response != nil || st.Flows.Inserts != 0 {
		t.Errorf("timing off: response %v, flows %+v", st.Response, st.Flows)
	}
}

// TestFlowTableBounded: a table full of stale flows takes new ones (idle
// ways are replaced first, their unanswered requests abandoned), a server
// that never answers leaves at most the table's capacity outstanding, and
// the table never holds more than its capacity.
func TestFlowTableBounded(t *testing.T) {
	d := loadTimed(t, 1) // 64 flows
	var steps []step
	for p := uint16(0); p < 500; p++ {
		steps = append(steps, in(time.Duration(p)*ms, tcpData{client4, server4, 30000 + p, sport, cseq0, sseq0, psh, 100}.frame()))
	}
	runSteps(t, d, hookXDP, steps)
	ft, err := d.FlowTableOccupancy()
	must(t, err)
	if ft.Capacity != 64 || ft.Used > 64 || ft.Outstanding > 64 {
		t.Fatalf("flow table %+v, want capacity 64, at most 64 used", ft)
	}
	st := stats(t, d)
	r := st.Response[tcp8080]
	if r.Outstanding() > 64 {
		t.Errorf("outstanding %d, want at most the table's 64", r.Outstanding())
	}
	if r.Requests != 500 || r.Abandoned < 500-64 {
		t.Errorf("requests %d abandoned %d, want 500 and >= %d", r.Requests, r.Abandoned, 500-64)
	}
	// Much later every way is idle: new flows replace them as expired, and
	// a request on one is timed.
	late := 10 * time.Minute
	runSteps(t, d, hookXDP, []step{
		in(late, c(cseq0, sseq0, psh, 100)),
		out(late+2*ms, s(sseq0, cseq0+100, psh, 200)),
	})
	ft, err = d.FlowTableOccupancy()
	must(t, err)
	if ft.Used != 1 {
		t.Errorf("after idle: %d flows not idle, want 1", ft.Used)
	}
	st = stats(t, d)
	if st.Flows.Expired == 0 {
		t.Errorf("flow counters %+v: want an idle flow replaced", st.Flows)
	}
	if got := st.Response[tcp8080].Responses; got != 1 {
		t.Errorf("responses %d, want 1", got)
	}
}

// TestHistogramGeometry checks the Go mirror of the C geometry and the
// datapath's bucket choice at bucket edges.
func TestHistogramGeometry(t *testing.T) {
	if resptime.Buckets != HistBuckets || resptime.UnitShift != int(olcdOlcdRespGeometryOLCD_HIST_UNIT_SHIFT) ||
		resptime.SubBits != int(olcdOlcdRespGeometryOLCD_HIST_SUB_BITS) || resptime.MaxLog2 != int(olcdOlcdRespGeometryOLCD_HIST_MAX_LOG2) {
		t.Fatalf("resptime geometry differs from enum olcd_resp_geometry")
	}
	d := loadTimed(t, 1)
	durs := []time.Duration{0, 15 * time.Microsecond, 50 * time.Microsecond, 999 * time.Microsecond,
		ms, 20 * ms, 200 * ms, time.Second, 30 * time.Second, 2 * time.Minute}
	for i, dur := range durs {
		p := uint16(41000 + i)
		runSteps(t, d, hookTC, []step{
			in(0, tcpData{client4, server4, p, sport, cseq0, sseq0, psh, 10}.frame()),
			out(dur, tcpData{server4, client4, sport, p, sseq0, cseq0 + 10, psh, 10}.frame()),
		})
	}
	r := stats(t, d).Response[tcp8080]
	for _, dur := range durs {
		b := resptime.Bucket(dur)
		if r.Buckets[b] == 0 {
			t.Errorf("%s: nothing in bucket %d", dur, b)
		}
		if dur >= 50*time.Microsecond && dur <= 30*time.Second {
			if v := resptime.Value(b); math.Abs(v-dur.Seconds())/dur.Seconds() > 0.05 {
				t.Errorf("%s reads as %.6f s: more than 5 %% off", dur, v)
			}
		}
	}
}

// TestResponseTimingVeth times real requests over a veth: a server in one
// namespace answers each line after 20 ms, a client in the other sends 40
// requests over 4 keep-alive connections, and the p50 olcd measured is the
// client's within 5 % or 0.5 ms. Through tcx, clsact (both directions) and
// native XDP ingress beside TC egress; after Close no olcd filter is left.
func TestResponseTimingVeth(t *testing.T) {
	modes := []struct {
		name   string
		mode   olc.AttachMode
		noTCX  bool
		egress string
	}{
		{"tcx", olc.AttachTC, false, "tcx"},
		{"clsact", olc.AttachTC, true, "clsact"},
		{"xdp-native", olc.AttachXDPNative, false, "tcx"},
	}
	const delay = 20 * time.Millisecond
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			n := newTestNet(t)
			d := loadTest(t, Config{StaleAfter: time.Minute, ResponseSample: 1})
			must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop}}))
			must(t, d.SetMode(olc.ModeEnforce))
			must(t, d.Heartbeat())
			n.inServer(t, func() error { return d.attach(n.NodeIf, m.mode, m.noTCX) })
			if got := d.Attachments(); len(got) != 1 || got[0].Egress != m.egress {
				t.Fatalf("attachments %+v, want egress %s", got, m.egress)
			}
			slowServer(t, n, 8080, delay)
			var client []time.Duration
			for range 4 {
				c, err := n.dial(8080, 3*time.Second)
				must(t, err)
				for range 10 {
					t0 := time.Now()
					must(t, echo(c, "GET /\n"))
					client = append(client, time.Since(t0))
				}
				c.Close()
			}
			r := stats(t, d).Response[tcp8080]
			if r.Responses != uint64(len(client)) {
				t.Errorf("olcd timed %d responses, the client %d", r.Responses, len(client))
			}
			got, ok := resptime.Quantile(r.Buckets, 0.5)
			want := quantileOf(client, 0.5).Seconds()
			if !ok || math.Abs(got-want) > math.Max(0.05*want, 0.0005) {
				t.Errorf("p50: olcd %.6f s, client %.6f s: more than 5 %% or 0.5 ms apart", got, want)
			}
			t.Logf("p50 olcd %.6f s, client %.6f s (%d samples)", got, want, r.Responses)
			n.inServer(t, d.Close)
			n.inServer(t, func() error { return olcdFilterLeft(n.NodeIf) })
		})
	}
}

// slowServer answers each read on port after delay, echoing it.
func slowServer(t *testing.T, n *testNet, port uint16, delay time.Duration) {
	t.Helper()
	n.listenDelay(t, port, delay)
}

func quantileOf(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}
