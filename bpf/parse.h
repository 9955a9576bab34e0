/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The classifier shared by the XDP and TC programs: walks Ethernet, VLAN,
 * IPv4/IPv6 (with extension headers) to the transport header and decides
 * whether the frame is a new inbound connection. Every read is bounds-checked
 * against data_end; anything malformed or cut short is reported, never
 * guessed at, and the caller passes it.
 */
#ifndef OLCD_PARSE_H
#define OLCD_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "olcd.h"
#include "maps.h"

/* In-band 802.1Q/802.1ad tags followed before giving up (deeper: pass). */
#ifndef OLCD_MAX_VLAN
#define OLCD_MAX_VLAN 4
#endif
/* IPv6 extension headers walked before giving up. Six is the most RFC 8200
 * recommends in one packet (HBH, Dest, Routing, Fragment, AH, Dest); two more
 * leave room for repeats without letting a long chain cost unbounded time. */
#ifndef OLCD_MAX_EXTHDR
#define OLCD_MAX_EXTHDR 8
#endif

enum olcd_parse_result {
	OLCD_P_NOT_NEW = 0,      /* well formed, not a new connection: pass */
	OLCD_P_NEW = 1,          /* a new connection candidate: see olcd_pkt */
	OLCD_P_UNCLASSIFIED = 2, /* could carry one but cannot be examined */
	OLCD_P_SHORT = 3,        /* a header ends past the available data */
	OLCD_P_SEGMENT = 4,      /* established TCP with payload, FIN or RST: see resp.h */
};

/* TCP flag bits in byte 13 of the TCP header. */
#define OLCD_TCP_FIN 0x01
#define OLCD_TCP_SYN 0x02
#define OLCD_TCP_RST 0x04
#define OLCD_TCP_ACK 0x10

struct olcd_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

/* The common start of the IPv6 extension headers olcd walks. */
struct olcd_ext_hdr {
	__u8 nexthdr;
	__u8 hdrlen;
	__be16 frag_off; /* Fragment header only: offset << 3 | M */
	__be32 rest;
};

/*
 * A new-connection candidate. The header positions are offsets from the frame
 * start, used only off the hot path (exception prefixes, mark, reject): olcd.c keeps
 * no packet offset or pointer across its map lookups (see olcd_handle there).
 */
struct olcd_pkt {
	/* What the dropped-SYN fingerprint is made of (TCP only), read here
	 * where the headers are known to be in the frame, which spares a
	 * bounds check each later: the ports and the sequence number, and the
	 * addresses (IPv6: their four 64-bit halves xored, a bijection of the
	 * source for a given destination). 64-bit loads from the packet are
	 * unaligned on some paths; the verifier allows that on architectures
	 * with efficient unaligned access (x86-64, arm64). */
	__u64 fpw_tcp;
	__u64 fpw_addr;
	__u32 l3off; /* IPv4 or IPv6 header */
	__u32 l4off; /* TCP header (TCP only) */
	__u32 dport; /* destination port, host byte order */
	__u32 ipv6;  /* 0: IPv4, 1: IPv6 */
	__u32 tcp;   /* 1: TCP, 0: UDP */
	/* Response timing (resp.h). UDP OLCD_P_NEW: the addresses
	 * (olcd_flow_addrs) and the first word of the header (the ports as on
	 * the wire). OLCD_P_SEGMENT: the flow hash of a sampled flow (| 1), the
	 * server port's histogram slot, the sequence and acknowledgment
	 * numbers (host order), payload bytes and flags. */
	__u64 seg_addrs;
	__u64 seg_hash;
	__u32 seg_ports;
	__u32 seg_slot;
	__u32 seg_seq;
	__u32 seg_ack;
	__u32 seg_len;
	__u32 seg_flags;
};

/* Headers are looked for no further than this from the frame start. */
#define OLCD_MAX_HDR_OFF 1024

/*
 * Verifier economy. The IPv6 walk reaches each step along many paths (VLAN
 * depth, the kinds and lengths of the headers before), each with its own
 * header offset. The verifier tracks offsets used in pointer arithmetic
 * exactly, so without care it would verify each step, and all that follows
 * it, once per path: exponential in the walk length (a million instructions
 * and a refused program at 4 tags and 8 headers).
 *
 * olcd_blur returns off unchanged at run time, but computed so that the
 * verifier only knows it as "some value in 0..OLCD_BLUR_MASK": zero is
 * (a | ~b) + 1 with a == b, which is always 0, but a passes through an empty
 * asm statement so that neither the compiler nor the verifier can tell.
 * Paths that meet then have the same state and each step is verified once.
 * Every use of an offset checks the bounds against data_end, so safety does
 * not rest on this. The value must be below OLCD_BLUR_MASK + 1, which
 * OLCD_MAX_HDR_OFF guarantees.
 */
#define OLCD_BLUR_MASK 0x7ff

static __always_inline __u32 olcd_blur(__u32 off, __u64 any)
{
	__u64 a = any;

	barrier_var(a);
	return (off + ((a | ~any) + 1)) & OLCD_BLUR_MASK;
}

/*
 * Does a packet of l3end bytes from the frame start run past the frame? At
 * XDP (skb NULL) a program without frags support sees the whole frame; at TC
 * the frame is skb->len bytes, of which [data, data_end) is the linear part.
 */
static __always_inline int olcd_past_frame(void *data, void *data_end, struct __sk_buff *skb,
					   __u32 l3end)
{
	if (skb)
		return l3end > skb->len;
	return data + l3end > data_end;
}

/* Odd 64-bit multiplier spreading the ports of an IPv6 flow (splitmix64's). */
#define OLCD_FH_K2 0xbf58476d1ce4e5b9ULL

/* Both addresses of an IP packet in one word for olcd_flow_hash, the same
 * either way round: IPv4 their xor, IPv6 the xor of their four 64-bit
 * halves. addr: the source address; the destination follows it. */
static __always_inline __u64 olcd_flow_addrs(const __u64 *addr, int v6)
{
	if (v6)
		return addr[0] ^ addr[1] ^ addr[2] ^ addr[3];
	return ((const __u32 *)addr)[0] ^ ((const __u32 *)addr)[1];
}

/*
 * Response timing's flow hash, which decides the sample: the same for both
 * directions of a flow, so that the parser decides it without knowing which
 * end is the server. Each field is combined with its twin by an xor (the
 * addresses: olcd_flow_addrs; the ports as on the wire: ports), which does
 * not depend on their order, and the key is hashed by multiply-shift
 * (Dietzfelbinger, Hagerup, Katajainen, Penttonen, "A reliable randomized
 * algorithm for the closest-pair problem", 1997): times a random odd
 * multiplier (olcd_resp_ctl.seed), then murmur3's finaliser, of which the
 * sample compares the high half. IPv4: addresses and ports fit one word
 * exactly, so flows that differ there never share a key; IPv6: the ports
 * are spread by a multiply first, or the folded addresses and the ports
 * would cancel out between neighbours (::1 port p, ::2 port p ^ 1). The
 * flow table's set and tag come from olcd_flow_mix of it, computed for a
 * sampled flow only (resp.h).
 */
static __always_inline __u64 olcd_flow_hash(__u64 addrs, int v6, __u32 ports, __u64 seed)
{
	__u64 h;

	if (v6)
		h = (addrs ^ (__u64)ports * OLCD_FH_K2) * seed;
	else
		h = (addrs | (__u64)ports << 32) * seed;
	/* murmur3's fmix64: the high half of the product alone samples one
	 * client's consecutive ports at a share that depends on the seed (up to
	 * 20 % at 1/16 for some; docs/measurements.md §22). */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	return h ^ (h >> 33);
}

/*
 * A TCP segment that is not a new connection (flags not SYN alone), for
 * response timing: reported as OLCD_P_SEGMENT when its server's port is
 * timed (egress, a constant: the source port, else the destination), its
 * flow sampled and it carries payload, FIN or RST, with what resp.h needs;
 * anything else leaves as OLCD_P_NOT_NEW, in the order that makes the
 * commonest cheapest: a port not timed (the bulk of a node's other
 * traffic) after one load; then, inbound, a pure ACK (the client's
 * acknowledgments of answers, window updates, window and keep-alive probes
 * without data) before the hash; outbound, where the server's answers are
 * the bulk, an unsampled flow before the payload length. The header was
 * checked to lie in the frame; a payload length that does not add up
 * (header past the IP packet) is no payload.
 */
static __always_inline int olcd_seg_fill(const struct tcphdr *th, __u32 off, __u8 flags, __u32 hlen,
					 __u32 iplen_h, __u32 slot, __u64 h, int v6,
					 struct olcd_pkt *pkt)
{
	pkt->l4off = off; /* the request gate's reset (gate.h) parses again for it */
	pkt->seg_slot = slot;
	pkt->tcp = 1;
	pkt->ipv6 = v6;
	pkt->dport = bpf_ntohs(th->dest);
	pkt->seg_len = iplen_h > hlen ? iplen_h - hlen : 0;
	pkt->seg_flags = flags;
	pkt->seg_seq = bpf_ntohl(th->seq);
	pkt->seg_ack = bpf_ntohl(th->ack_seq);
	pkt->seg_hash = h | 1;
	return OLCD_P_SEGMENT;
}

static __always_inline int olcd_parse_seg(const struct tcphdr *th, __u8 flags, __u32 off,
					  const __be16 *iplen, __u32 l3base, const __u64 *addr,
					  int v6, int egress, struct olcd_pkt *pkt)
{
	__u32 slot, hlen, iplen_h;
	__u64 h;

	slot = olcd_rports.slot[OLCD_INDEX_TCP][bpf_ntohs(egress ? th->source : th->dest)];
	if (!slot)
		return OLCD_P_NOT_NEW;
	/* IP payload bytes before the TCP payload (*iplen counts from l3base). */
	hlen = off - l3base + ((__u32)(((__u8 *)th)[12] >> 4) << 2);
	iplen_h = bpf_ntohs(*iplen);
	if (!egress && iplen_h <= hlen && !(flags & (OLCD_TCP_FIN | OLCD_TCP_RST)))
		return OLCD_P_NOT_NEW;
	h = olcd_flow_hash(olcd_flow_addrs(addr, v6), v6, th->source ^ th->dest, olcd_rctl.seed);
	if ((__u32)(h >> 32) > olcd_rctl.sample_max)
		return OLCD_P_NOT_NEW; /* a flow the sample leaves out */
	/* Or the compiler computes the length before the hash all the same. */
	barrier();
	if (egress && iplen_h <= hlen && !(flags & (OLCD_TCP_FIN | OLCD_TCP_RST)))
		return OLCD_P_NOT_NEW;
	return olcd_seg_fill(th, off, flags, hlen, iplen_h, slot, h, v6, pkt);
}

/*
 * The transport header at off. The IP packet it belongs to ends at
 * l3base + *iplen (IPv4 total length, IPv6 payload length); addr points to
 * its source and destination addresses (v6: IPv6, a constant at each call).
 * checked (a constant): the caller knows the frame holds a TCP header there.
 * The lengths are only read for a candidate, after the flags: a header that
 * does not fit in its IP packet, or an IP packet that the frame cuts short,
 * is one the kernel discards (ip_rcv, tcp_v4_rcv, __udp4_lib_rcv and their
 * IPv6 twins), and its "header" may be Ethernet padding or bytes of the next
 * fragment (RFC 1858).
 */
static __always_inline int olcd_parse_l4(void *data, void *data_end, __u32 off, __u8 proto,
					 const __be16 *iplen, __u32 l3base, const __u64 *addr,
					 int v6, int checked, struct __sk_buff *skb, int egress,
					 struct olcd_pkt *pkt)
{
	__u32 l3end;

	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = data + off;
		__u8 flags, doff;

		if (!checked && (void *)(th + 1) > data_end)
			return OLCD_P_SHORT;
		/* Established traffic leaves here, before any map is touched.
		 * SYN+ACK answers the host's own connects; RST/FIN with SYN is
		 * nonsense; ECE/CWR (ECN setup) and PSH/URG do not matter. */
		flags = ((__u8 *)th)[13];
		if ((flags & (OLCD_TCP_SYN | OLCD_TCP_ACK | OLCD_TCP_RST | OLCD_TCP_FIN)) !=
		    OLCD_TCP_SYN)
			return olcd_parse_seg(th, flags, off, iplen, l3base, addr, v6, egress, pkt);
		doff = ((__u8 *)th)[12] >> 4;
		if (doff < 5)
			return OLCD_P_UNCLASSIFIED; /* data offset below the header */
		/* Options included: the kernel pulls doff*4 bytes or discards. */
		l3end = l3base + bpf_ntohs(*iplen);
		if (off + ((__u32)doff << 2) > l3end)
			return OLCD_P_UNCLASSIFIED;
		pkt->tcp = 1;
		pkt->l4off = off;
		pkt->dport = bpf_ntohs(th->dest);
		pkt->fpw_tcp = *(__u64 *)th; /* ports, sequence number */
		pkt->fpw_addr = v6 ? addr[0] ^ addr[1] ^ addr[2] ^ addr[3] : addr[0];
	} else {
		struct udphdr *uh = data + off;
		__u32 ulen, room;

		if (!checked && (void *)(uh + 1) > data_end)
			return OLCD_P_SHORT;
		l3end = l3base + bpf_ntohs(*iplen);
		if (off + sizeof(*uh) > l3end)
			return OLCD_P_UNCLASSIFIED;
		/* 0 over IPv6 means "to the end of the packet" (RFC 2675; the
		 * kernel takes it so whatever the length). */
		room = l3end - off;
		ulen = bpf_ntohs(uh->len);
		if (ulen == 0 && pkt->ipv6)
			ulen = room;
		if (ulen < sizeof(*uh) || ulen > room)
			return OLCD_P_UNCLASSIFIED;
		pkt->tcp = 0;
		pkt->dport = bpf_ntohs(uh->dest);
		pkt->seg_ports = *(__u32 *)uh;
		pkt->seg_seq = 0;
		pkt->seg_ack = 0;
		pkt->seg_len = 0;
		pkt->seg_flags = 0;
		pkt->seg_addrs = olcd_flow_addrs(addr, v6);
	}
	if (olcd_past_frame(data, data_end, skb, l3end))
		return OLCD_P_UNCLASSIFIED;
	return OLCD_P_NEW;
}

/* The commonest frame: Ethernet, IPv4 without options, TCP without options. */
#define OLCD_FAST_LEN (ETH_HLEN + 20 + 20)

/*
 * IPv4 at off. fast (a constant): the caller checked that this is the
 * commonest frame's shape (olcd_parse): a version/ihl byte of 0x45 at off =
 * ETH_HLEN and OLCD_FAST_LEN bytes of frame, which leaves nothing to check
 * before the transport header and fixes its offset.
 */
static __always_inline int olcd_parse_ipv4(void *data, void *data_end, struct __sk_buff *skb,
					   __u32 off, int fast, int egress, struct olcd_pkt *pkt)
{
	struct iphdr *iph = data + off;
	__u8 vihl, ihl = 5, proto;

	if (!fast) {
		if ((void *)(iph + 1) > data_end)
			return OLCD_P_SHORT;
		/* Version 4 and ihl 5..15 in one compare: 0x45..0x4f. */
		vihl = *(__u8 *)iph;
		if ((__u32)vihl - 0x45 > 0x0a)
			return OLCD_P_UNCLASSIFIED;
		ihl = vihl & 0x0f;
	}
	proto = iph->protocol;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return OLCD_P_NOT_NEW;
	/* A non-first fragment carries payload where the ports would be. */
	if (iph->frag_off & bpf_htons(0x1fff))
		return OLCD_P_UNCLASSIFIED;
	pkt->l3off = off;
	pkt->ipv6 = 0;
	/* One call per protocol, so that each inlined copy knows its own. */
	if (proto == IPPROTO_TCP)
		return olcd_parse_l4(data, data_end, off + ihl * 4, IPPROTO_TCP, &iph->tot_len, off,
				     (const __u64 *)&iph->saddr, 0, fast, skb, egress, pkt);
	return olcd_parse_l4(data, data_end, off + ihl * 4, IPPROTO_UDP, &iph->tot_len, off,
			     (const __u64 *)&iph->saddr, 0, fast, skb, egress, pkt);
}

static __always_inline int olcd_is_ipv6_ext(__u8 nh)
{
	return nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING || nh == IPPROTO_DSTOPTS ||
	       nh == IPPROTO_FRAGMENT || nh == IPPROTO_AH;
}

static __always_inline int olcd_parse_ipv6(void *data, void *data_end, struct __sk_buff *skb,
					   __u32 off, int egress, struct olcd_pkt *pkt)
{
	struct ipv6hdr *ip6 = data + off;
	__u32 l3base;
	__u8 nh;

	if ((void *)(ip6 + 1) > data_end)
		return OLCD_P_SHORT;
	if ((*(__u8 *)ip6 >> 4) != 6)
		return OLCD_P_UNCLASSIFIED;
	pkt->l3off = off;
	pkt->ipv6 = 1;
	nh = ip6->nexthdr;
	off += sizeof(*ip6);
	/* A payload length of 0 (a jumbogram, RFC 2675) leaves no room for a
	 * transport header: olcd does not walk the jumbo option. */
	l3base = off;

#pragma unroll
	for (int i = 0; i <= OLCD_MAX_EXTHDR; i++) {
		struct olcd_ext_hdr *ext;
		__u32 len;

		if (nh == IPPROTO_TCP || nh == IPPROTO_UDP)
			return olcd_parse_l4(data, data_end, off, nh, &ip6->payload_len, l3base,
					     (const __u64 *)&ip6->saddr, 1, 0, skb, egress, pkt);
		if (!olcd_is_ipv6_ext(nh))
			/* ESP hides the transport header; anything else
			 * (ICMPv6, No Next Header, ...) is not TCP or UDP. */
			return nh == IPPROTO_ESP ? OLCD_P_UNCLASSIFIED : OLCD_P_NOT_NEW;
		if (i == OLCD_MAX_EXTHDR)
			return OLCD_P_UNCLASSIFIED; /* chain longer than the walk */
		/* Hop-by-Hop is only valid first (RFC 8200 4.1); the kernel
		 * discards it anywhere else. */
		if (i > 0 && nh == IPPROTO_HOPOPTS)
			return OLCD_P_UNCLASSIFIED;
		/* One verifier state per step, whatever came before. The
		 * first step's offset differs only by the VLAN depth. */
		if (i > 0) {
			off = olcd_blur(off, nh);
			barrier_var(off);
		}
		ext = data + off;
		/* Every header walked is at least 8 octets long. */
		if ((void *)(ext + 1) > data_end)
			return OLCD_P_SHORT;
		if (nh == IPPROTO_FRAGMENT) {
			if (ext->frag_off & bpf_htons(0xfff8))
				return OLCD_P_UNCLASSIFIED; /* non-first fragment */
			len = 8;
		} else if (nh == IPPROTO_AH) {
			len = ((__u32)ext->hdrlen + 2) << 2; /* 4-octet units, minus 2 */
		} else {
			len = ((__u32)ext->hdrlen + 1) << 3; /* 8-octet units, minus 1 */
		}
		nh = ext->nexthdr;
		off += len;
		if (off > OLCD_MAX_HDR_OFF)
			return OLCD_P_UNCLASSIFIED;
	}
	return OLCD_P_UNCLASSIFIED; /* not reached: the last step returns */
}

/*
 * Classify the frame in [data, data_end): at XDP (skb NULL) all of it; at TC
 * the linear part of skb's frame. On OLCD_P_NEW, pkt describes the
 * candidate: a TCP SYN (ACK, RST, FIN clear) or a UDP datagram whose header
 * lies inside its IP packet, itself inside the frame.
 *
 * Only the bytes are trusted, never skb->protocol: at TC a VLAN tag the NIC
 * stripped into skb metadata is simply absent from the data, and an in-band tag
 * is walked here, so both give the same answer; only the depth limit counts
 * the stripped tag (skb->vlan_present).
 *
 * egress (a constant): the frame leaves the host (TC egress), so the
 * server's port of a TCP segment (response timing) is its source, not its
 * destination.
 */
static __always_inline int olcd_parse_dir(void *data, void *data_end, struct __sk_buff *skb,
					  int egress, struct olcd_pkt *pkt)
{
	__u32 off = ETH_HLEN;
	__be16 proto;

	/* The commonest frame first, with one bounds check for all its
	 * headers (a TCP header, or a UDP header and 12 bytes more); any other
	 * takes the general path below. Not struct ethhdr: it is packed, which
	 * costs two byte loads. */
	if (data + OLCD_FAST_LEN <= data_end) {
		proto = *(__be16 *)(data + ETH_ALEN * 2);
		if (proto == bpf_htons(ETH_P_IP) && *(__u8 *)(data + ETH_HLEN) == 0x45)
			return olcd_parse_ipv4(data, data_end, skb, ETH_HLEN, 1, egress, pkt);
		/* Untagged IPv6 next, without looking at the length again. */
		if (proto == bpf_htons(ETH_P_IPV6))
			return olcd_parse_ipv6(data, data_end, skb, ETH_HLEN, egress, pkt);
	}

	if (data + ETH_HLEN > data_end)
		return OLCD_P_SHORT;
	proto = *(__be16 *)(data + ETH_ALEN * 2);
	/* Untagged IP first: the common case skips the VLAN checks. */
	if (proto == bpf_htons(ETH_P_IP))
		return olcd_parse_ipv4(data, data_end, skb, off, 0, egress, pkt);
	if (proto == bpf_htons(ETH_P_IPV6))
		return olcd_parse_ipv6(data, data_end, skb, off, egress, pkt);

#pragma unroll
	for (int i = 0; i < OLCD_MAX_VLAN; i++) {
		struct olcd_vlan_hdr *vh = data + off;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(vh + 1) > data_end)
			return OLCD_P_SHORT;
		proto = vh->proto;
		off += sizeof(*vh);
	}
	/* At TC the kernel has usually taken the outer tag into skb metadata
	 * (skb_vlan_untag) before the program runs. It counts towards the
	 * limit, so that a stack deeper than the walk is passed at TC as it
	 * is at XDP, whatever the NIC or the stack stripped. */
	if (skb && off == ETH_HLEN + OLCD_MAX_VLAN * sizeof(struct olcd_vlan_hdr) &&
	    skb->vlan_present)
		return OLCD_P_UNCLASSIFIED;

	if (proto == bpf_htons(ETH_P_IP))
		return olcd_parse_ipv4(data, data_end, skb, off, 0, egress, pkt);
	if (proto == bpf_htons(ETH_P_IPV6))
		return olcd_parse_ipv6(data, data_end, skb, off, egress, pkt);
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD))
		return OLCD_P_UNCLASSIFIED; /* more tags than OLCD_MAX_VLAN */
	return OLCD_P_NOT_NEW;              /* ARP, LLDP, ...: not IP */
}

/*
 * An outbound frame (TC egress): see olcd_parse_dir. The commonest answer
 * (Ethernet, IPv4 without options, TCP) is decided in the order of what
 * leaves most often: a port not timed after the port load, an unsampled
 * flow after the hash, each before the fragment and flag checks, which
 * only a sampled flow's segment needs. Until then nothing is decided on
 * what was read: a non-first fragment's "ports" are payload bytes, and
 * lead at most to those checks (egress acts on OLCD_P_SEGMENT and a UDP
 * OLCD_P_NEW alone, so every other result is the same to it). Other frames
 * take the general parse.
 */
static __always_inline int olcd_parse_egress(void *data, void *data_end, struct __sk_buff *skb,
					     struct olcd_pkt *pkt)
{
	struct iphdr *iph;
	struct tcphdr *th;
	__u32 slot, hlen, iplen_h;
	__u8 flags;
	__u64 h;

	if (data + OLCD_FAST_LEN > data_end ||
	    *(__be16 *)(data + ETH_ALEN * 2) != bpf_htons(ETH_P_IP) ||
	    *(__u8 *)(data + ETH_HLEN) != 0x45 ||
	    *(__u8 *)(data + ETH_HLEN + offsetof(struct iphdr, protocol)) != IPPROTO_TCP)
		return olcd_parse_dir(data, data_end, skb, 1, pkt);
	iph = data + ETH_HLEN;
	th = data + ETH_HLEN + sizeof(*iph);
	slot = olcd_rports.slot[OLCD_INDEX_TCP][bpf_ntohs(th->source)];
	if (!slot)
		return OLCD_P_NOT_NEW;
	h = olcd_flow_hash(olcd_flow_addrs((const __u64 *)&iph->saddr, 0), 0, th->source ^ th->dest,
			   olcd_rctl.seed);
	if ((__u32)(h >> 32) > olcd_rctl.sample_max)
		return OLCD_P_NOT_NEW;
	/* Or the compiler moves the checks below before the hash. */
	barrier();
	if (iph->frag_off & bpf_htons(0x1fff))
		return OLCD_P_UNCLASSIFIED;
	flags = ((__u8 *)th)[13];
	if ((flags & (OLCD_TCP_SYN | OLCD_TCP_ACK | OLCD_TCP_RST | OLCD_TCP_FIN)) == OLCD_TCP_SYN)
		return OLCD_P_NOT_NEW; /* the host's own connect */
	hlen = sizeof(*iph) + ((__u32)(((__u8 *)th)[12] >> 4) << 2);
	iplen_h = bpf_ntohs(iph->tot_len);
	if (iplen_h <= hlen && !(flags & (OLCD_TCP_FIN | OLCD_TCP_RST)))
		return OLCD_P_NOT_NEW;
	return olcd_seg_fill(th, ETH_HLEN + sizeof(*iph), flags, hlen, iplen_h, slot, h, 0, pkt);
}

/* An inbound frame (XDP, TC ingress): see olcd_parse_dir. */
static __always_inline int olcd_parse(void *data, void *data_end, struct __sk_buff *skb,
				      struct olcd_pkt *pkt)
{
	return olcd_parse_dir(data, data_end, skb, 0, pkt);
}

#endif /* OLCD_PARSE_H */
