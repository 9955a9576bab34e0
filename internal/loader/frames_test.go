package loader

import (
	"encoding/binary"
	"net/netip"
)

// Frame builders for tests and benchmarks. The packet vectors live in
// testdata; these build the few frames whose fields a test varies.

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpACK = 0x10
)

type tcpSeg struct {
	sport, dport uint16
	seq          uint32
	flags        uint8
}

func (s tcpSeg) bytes() []byte {
	b := make([]byte, 24) // 20-byte header + MSS option, as a real SYN has
	binary.BigEndian.PutUint16(b[0:], s.sport)
	binary.BigEndian.PutUint16(b[2:], s.dport)
	binary.BigEndian.PutUint32(b[4:], s.seq)
	b[12] = 6 << 4
	b[13] = s.flags
	binary.BigEndian.PutUint16(b[14:], 0xffff)
	copy(b[20:], []byte{2, 4, 0x05, 0xb4})
	return b
}

func ethHeader(etherType uint16) []byte {
	b := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0, 0}
	binary.BigEndian.PutUint16(b[12:], etherType)
	return b
}

// ipv4Frame builds Ethernet + IPv4 (TOS tos, valid checksum) + l4.
func ipv4Frame(src, dst netip.Addr, proto uint8, tos uint8, l4 []byte) []byte {
	ip := make([]byte, 20)
	ip[0] = 0x45
	ip[1] = tos
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
	binary.BigEndian.PutUint16(ip[4:], 0x1234)
	ip[8] = 64
	ip[9] = proto
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	return append(append(ethHeader(0x0800), ip...), l4...)
}

// ipv6Frame builds Ethernet + IPv6 (traffic class tc) + exts + l4, where
// exts already carry their next-header chain and first is the IPv6 next header.
func ipv6Frame(src, dst netip.Addr, first uint8, tc uint8, exts, l4 []byte) []byte {
	ip := make([]byte, 40)
	binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(tc)<<20)
	binary.BigEndian.PutUint16(ip[4:], uint16(len(exts)+len(l4)))
	ip[6] = first
	ip[7] = 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	f := append(ethHeader(0x86dd), ip...)
	return append(append(f, exts...), l4...)
}

// hopByHop is an 8-byte Hop-by-Hop header (PadN) followed by next.
func hopByHop(next uint8) []byte { return []byte{next, 0, 1, 4, 0, 0, 0, 0} }

var (
	client4 = netip.MustParseAddr("192.0.2.10")
	server4 = netip.MustParseAddr("198.51.100.20")
	client6 = netip.MustParseAddr("2001:db8::1")
	server6 = netip.MustParseAddr("2001:db8::2")
)

func syn4(dport uint16, seq uint32) []byte {
	return ipv4Frame(client4, server4, 6, 0, tcpSeg{40000, dport, seq, tcpSYN}.bytes())
}

func syn6(dport uint16, seq uint32) []byte {
	return ipv6Frame(client6, server6, 6, 0, nil, tcpSeg{40000, dport, seq, tcpSYN}.bytes())
}

func udp4(dport uint16) []byte {
	u := make([]byte, 20)
	binary.BigEndian.PutUint16(u[0:], 40000)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	return ipv4Frame(client4, server4, 17, 0, u)
}

// tagged inserts an in-band VLAN tag (TPID tpid, VLAN 42) after the MAC
// addresses of frame.
func tagged(tpid uint16, frame []byte) []byte {
	out := append([]byte{}, frame[:12]...)
	out = binary.BigEndian.AppendUint16(out, tpid)
	out = binary.BigEndian.AppendUint16(out, 42)
	return append(out, frame[12:]...)
}

// ipv4OptionsFrame is ipv4Frame with a 60-byte header (ihl 15, NOP options).
func ipv4OptionsFrame(proto uint8, l4 []byte) []byte {
	f := ipv4Frame(client4, server4, proto, 0, l4)
	ip := append([]byte{}, f[14:34]...)
	ip[0] = 0x4f
	binary.BigEndian.PutUint16(ip[2:], uint16(60+len(l4)))
	binary.BigEndian.PutUint16(ip[10:], 0)
	ip = append(ip, make([]byte, 40)...)
	for i := 20; i < 60; i++ {
		ip[i] = 1 // NOP
	}
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	return append(append(ethHeader(0x0800), ip...), l4...)
}

func udp6(dport uint16) []byte {
	u := make([]byte, 20)
	binary.BigEndian.PutUint16(u[0:], 40000)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	return ipv6Frame(client6, server6, 17, 0, nil, u)
}
