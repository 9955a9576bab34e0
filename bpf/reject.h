/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The reject action: a SYN that policy chose to shed is answered with the
 * RST|ACK the kernel would send for a closed port (RFC 9293 3.10.7.1: seq 0,
 * ack = ISN + 1), built in place over the SYN and sent back out of the
 * interface it came in on: XDP_TX at XDP, a redirect to the same
 * interface's egress at TC. The client's connect() fails at once with
 * ECONNREFUSED instead of waiting out its SYN retransmit timeout.
 *
 * Only a SYN gets here (the parser passes SYN+ACK, ACK, RST and FIN before
 * any lookup), and only one that carries no data, from a unicast source, and
 * within the rate limit: a token bucket per CPU (olcd_rej). Anything else
 * that policy shed is dropped as with the drop action, and remembered in the
 * dropped-SYN table so that its retransmit counts as one.
 *
 * Included by olcd.c after its helpers (it uses olcd_parse, the control
 * record and the dropped-SYN table's functions).
 */
#ifndef OLCD_REJECT_H
#define OLCD_REJECT_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "olcd.h"
#include "maps.h"
#include "parse.h"

/* The rate limit, written by the loader (a .bss global like olcd_ctl). */
struct olcd_reject_conf olcd_rej;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct olcd_reject_bucket);
} olcd_rej_tokens SEC(".maps");

/* The reply's TTL / hop limit: Linux's default (sysctl ip_default_ttl). */
#define OLCD_REJECT_TTL 64

/*
 * Take a token from this CPU's bucket. An empty bucket is refilled from the
 * time since its last refill, looked at no more than once per jiffy: the
 * clock (a helper call) is read once per refill, not per reply. Over the
 * limit the SYN is dropped and counted in the bucket (limited).
 */
static __always_inline int olcd_reject_token(void)
{
	struct olcd_reject_bucket *b;
	__u64 now, add, per;
	__u32 zero = 0, j;

	b = bpf_map_lookup_elem(&olcd_rej_tokens, &zero);
	if (!b)
		return 0;
	if (b->tokens) {
		b->tokens -= 1;
		return 1;
	}
	/* The jiffy of the heartbeat verdict, which olcd_decide brought up
	 * to date for this very packet: no helper call to know it. */
	j = olcd_ctl.fresh_jiffies;
	per = olcd_rej.ns_per_token;
	if (b->jiffy == j || per == 0)
		goto limited;
	b->jiffy = j;
	now = bpf_ktime_get_ns();
	add = (now - b->stamp_ns) / per;
	if (add == 0)
		goto limited;
	if (add >= olcd_rej.burst) {
		add = olcd_rej.burst;
		b->stamp_ns = now;
	} else {
		b->stamp_ns += add * per;
	}
	if (add == 0)
		goto limited;
	b->tokens = (__u32)add - 1;
	return 1;
limited:
	b->limited += 1;
	return 0;
}

/* Fold a 64-bit sum of 32-bit words to the 16-bit one's complement sum. */
static __always_inline __u32 olcd_fold16(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u32)s;
}

/* The sums a reply's TCP checksum is made of (RFC 1071, over raw words:
 * byte-order independent). */
struct olcd_reject_sums {
	__u32 pseudo; /* pseudo header: addresses, protocol, TCP length */
	__u32 hdr;    /* the TCP header, its checksum field 0 */
};

/*
 * Write a header-only RST|ACK over the segment pkt describes: reply 1
 * toward the segment's sender (MACs, addresses and ports swapped), 0 in
 * its own direction; seq and ack in host order. The IPv4 checksum is
 * written; the TCP one is left 0 and its parts returned in sums , for the
 * caller to write as its hook needs. The SYN reject (below) and the
 * request gate (gate.h) both answer with it. Returns the frame's length up
 * to the end of the TCP header, or 0 (frame unchanged) when the headers are
 * not where pkt says.
 */
static __always_inline __u32 olcd_rst_build(void *data, void *data_end, const struct olcd_pkt *pkt,
					    int reply, __u32 seq, __u32 ack,
					    struct olcd_reject_sums *sums)
{
	/* Bounded for the verifier: Ethernet + 4 tags is 30 bytes. */
	__u32 l3 = pkt->l3off & 0x3f;
	__u32 l4 = pkt->l4off & OLCD_BLUR_MASK;
	struct tcphdr *th = data + l4, *rt;
	__u8 *eth = data;
	__be16 sport, dport, t16;
	__u32 iphl, *w;
	__u64 sum, t;
	__u16 tmac[3];

	if ((void *)(th + 1) > data_end || (void *)(eth + ETH_HLEN) > data_end)
		return 0;
	/* Read before the new headers may overwrite them (IPv4 options,
	 * IPv6 extension headers: the TCP header moves up). */
	sport = th->source;
	dport = th->dest;
	if (reply)
		t16 = sport, sport = dport, dport = t16;

	if (pkt->ipv6) {
		struct ipv6hdr *ip6 = data + l3;
		__u64 *a;

		iphl = sizeof(*ip6);
		if ((void *)(ip6 + 1) > data_end)
			return 0;
		*(__be32 *)ip6 = bpf_htonl(0x60000000); /* version 6, class 0, flow 0 */
		ip6->payload_len = bpf_htons(sizeof(struct tcphdr));
		ip6->nexthdr = IPPROTO_TCP;
		ip6->hop_limit = OLCD_REJECT_TTL;
		a = (__u64 *)&ip6->saddr;
		if (reply) {
			t = a[0], a[0] = a[2], a[2] = t;
			t = a[1], a[1] = a[3], a[3] = t;
		}
		w = (__u32 *)a;
		sum = (__u64)w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + w[6] + w[7];
	} else {
		struct iphdr *iph = data + l3;
		__u32 s, d;

		iphl = sizeof(*iph);
		if ((void *)(iph + 1) > data_end)
			return 0;
		s = iph->saddr;
		d = iph->daddr;
		if (reply)
			t = s, s = d, d = (__u32)t;
		((__u8 *)iph)[0] = 0x45;
		iph->tos = 0;
		iph->tot_len = bpf_htons(sizeof(*iph) + sizeof(struct tcphdr));
		iph->id = 0;
		iph->frag_off = bpf_htons(0x4000); /* DF */
		iph->ttl = OLCD_REJECT_TTL;
		iph->protocol = IPPROTO_TCP;
		iph->check = 0;
		iph->saddr = s;
		iph->daddr = d;
		w = (__u32 *)iph;
		iph->check = ~olcd_fold16((__u64)w[0] + w[1] + w[2] + w[3] + w[4]) & 0xffff;
		sum = (__u64)s + d;
	}
	sum += bpf_htons(IPPROTO_TCP) + bpf_htons(sizeof(struct tcphdr));
	sums->pseudo = olcd_fold16(sum);

	rt = data + l3 + iphl;
	if ((void *)(rt + 1) > data_end)
		return 0;
	rt->source = sport;
	rt->dest = dport;
	rt->seq = bpf_htonl(seq);
	rt->ack_seq = bpf_htonl(ack);
	((__u8 *)rt)[12] = 5 << 4;
	((__u8 *)rt)[13] = OLCD_TCP_RST | OLCD_TCP_ACK;
	rt->window = 0;
	rt->check = 0;
	rt->urg_ptr = 0;
	w = (__u32 *)rt;
	sums->hdr = olcd_fold16((__u64)w[0] + w[1] + w[2] + w[3] + w[4]);

	if (reply) {
		__builtin_memcpy(tmac, eth, ETH_ALEN);
		__builtin_memcpy(eth, eth + ETH_ALEN, ETH_ALEN);
		__builtin_memcpy(eth + ETH_ALEN, tmac, ETH_ALEN);
	}
	return l3 + iphl + sizeof(struct tcphdr);
}

/*
 * Turn the SYN pkt describes into its RST|ACK in place: MACs, addresses and
 * ports swapped, a fresh IPv4 (no options) or IPv6 (no extension headers)
 * header at the same place, the TCP header right after it, in-band VLAN tags
 * left where they are. Returns the reply's length up to the end of its TCP
 * header (no longer than the SYN's frame), or 0 when the SYN must not be answered: it carries data (a reply
 * would have to acknowledge it), comes from a group, broadcast or
 * unspecified address, or this CPU is over the rate limit; the frame is
 * unchanged then. The IPv4 checksum is written; the TCP one is left 0
 * and its parts returned in sums, for the caller to write as its hook needs.
 */
static __always_inline __u32 olcd_reject_build(void *data, void *data_end,
					       const struct olcd_pkt *pkt,
					       struct olcd_reject_sums *sums)
{
	/* Bounded for the verifier: Ethernet + 4 tags is 30 bytes. */
	__u32 l3 = pkt->l3off & 0x3f;
	__u32 l4 = pkt->l4off & OLCD_BLUR_MASK;
	struct tcphdr *th = data + l4;
	__u8 *eth = data;
	__u8 doff;

	if ((void *)(th + 1) > data_end || (void *)(eth + ETH_HLEN) > data_end)
		return 0;
	/* A group source MAC is never a host's: nothing to answer. */
	if (eth[ETH_ALEN] & 1)
		return 0;
	doff = ((__u8 *)th)[12] >> 4;

	if (pkt->ipv6) {
		struct ipv6hdr *ip6 = data + l3;
		__u64 *a;

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		/* No data: the TCP header ends the IPv6 packet. */
		if (l3 + sizeof(*ip6) + bpf_ntohs(ip6->payload_len) != l4 + ((__u32)doff << 2))
			return 0;
		a = (__u64 *)&ip6->saddr;
		/* Multicast (ff00::/8) either way, or an unspecified source. */
		if (((__u8 *)ip6)[8] == 0xff || ((__u8 *)ip6)[24] == 0xff || (a[0] | a[1]) == 0)
			return 0;
	} else {
		struct iphdr *iph = data + l3;
		__u32 s, d;

		if ((void *)(iph + 1) > data_end)
			return 0;
		if (l3 + bpf_ntohs(iph->tot_len) != l4 + ((__u32)doff << 2))
			return 0;
		s = iph->saddr;
		d = iph->daddr;
		/* 0.0.0.0, 224.0.0.0/4 and above (multicast, reserved,
		 * broadcast), as source or destination. */
		if (s == 0 || (((__u8 *)&s)[0] & 0xf0) >= 0xe0 || (((__u8 *)&d)[0] & 0xf0) >= 0xe0)
			return 0;
	}
	if (!olcd_reject_token())
		return 0;
	/* RFC 9293 3.10.7.1: a SYN in LISTEN is answered <SEQ=0><ACK=SEG.SEQ+1>. */
	return olcd_rst_build(data, data_end, pkt, 1, 0, bpf_ntohl(th->seq) + 1, sums);
}

/*
 * A SYN shed but not answered (not answerable, or over the rate limit) is
 * dropped: remembered in the dropped-SYN table like any dropped SYN, so
 * that its retransmit is counted as one. (An answered SYN is not: it is not
 * retransmitted.)
 */
static __always_inline void olcd_reject_remember(const struct olcd_pkt *pkt)
{
	struct olcd_control *ctl = &olcd_ctl;
	struct olcd_syn_set *set;
	__u64 fp = olcd_syn_fp(pkt, ctl->syn_seed);
	__u32 sidx = (__u32)(fp >> 32) & ctl->syn_sets_mask;

	set = bpf_map_lookup_elem(&olcd_syns, &sidx);
	if (set && !olcd_syn_seen(set, fp, olcd_syn_clock(ctl)))
		olcd_syn_insert(set, fp, olcd_syn_clock(ctl));
}

/* XDP: answer the shed SYN in ctx (XDP_TX) or drop it. st: its port's
 * counters. */
static __always_inline int olcd_reject_xdp(struct xdp_md *ctx, struct olcd_counters *st)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct olcd_reject_sums sums;
	struct olcd_pkt pkt;
	__u32 len;

	if (olcd_parse(data, data_end, NULL, &pkt) != OLCD_P_NEW || !pkt.tcp)
		return XDP_DROP;
	len = olcd_reject_build(data, data_end, &pkt, &sums);
	if (!len)
		goto drop;
	{
		struct tcphdr *rt = data + ((len - sizeof(*rt)) & 0x7f);

		if ((void *)(rt + 1) > data_end)
			goto drop;
		rt->check = ~olcd_fold16((__u64)sums.pseudo + sums.hdr) & 0xffff;
	}
	/* The frame keeps the SYN's length: what follows the reply (the SYN's
	 * TCP options, IPv6 extension headers, Ethernet padding, all the
	 * client's own bytes) is link-layer padding, which every receiver
	 * drops by the IP length (ip_rcv, ipv6_rcv). Shortening the frame with
	 * bpf_xdp_adjust_tail would cost a large share of the reject path
	 * (docs/datapath.md, "Reject"). */
	st->rejected += 1;
	return XDP_TX;
drop:
	olcd_reject_remember(&pkt);
	return XDP_DROP;
}

/*
 * TC: answer the shed SYN in skb (a redirect to the egress of the interface
 * it came in on) or drop it. The TCP checksum goes through
 * bpf_l4_csum_replace, which writes it as the skb's checksum state needs:
 * whole, or for CHECKSUM_PARTIAL (a SYN from a local veth or virtio peer)
 * only the pseudo header's part, the device adding the rest from the
 * SYN's csum_start. That start is the SYN's TCP header, so a PARTIAL SYN
 * whose TCP header moves (IPv4 options, IPv6 extension headers) is
 * dropped instead: the first call tells the states apart (the field reads
 * the pseudo sum itself only under PARTIAL).
 */
static __always_inline int olcd_reject_tc(struct __sk_buff *skb, struct olcd_counters *st)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct olcd_reject_sums sums;
	struct olcd_pkt pkt;
	__u32 len, coff, moved;

	if (olcd_parse(data, data_end, skb, &pkt) != OLCD_P_NEW || !pkt.tcp)
		return TC_ACT_SHOT;
	len = olcd_reject_build(data, data_end, &pkt, &sums);
	if (!len)
		goto drop;
	/* From here on the frame is the reply: a failure just drops it. */
	moved = pkt.l4off != len - sizeof(struct tcphdr);
	coff = len - sizeof(struct tcphdr) + 16; /* offsetof(struct tcphdr, check) */
	if (bpf_l4_csum_replace(skb, coff, 0, sums.pseudo, BPF_F_PSEUDO_HDR))
		return TC_ACT_SHOT;
	if (moved) {
		__u16 *c;

		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		c = data + (coff & 0x7f);
		if ((void *)(c + 1) > data_end || *c == sums.pseudo)
			return TC_ACT_SHOT;
	}
	if (bpf_l4_csum_replace(skb, coff, 0, sums.hdr, 0))
		return TC_ACT_SHOT;
	if (skb->len > len && bpf_skb_change_tail(skb, len, 0))
		return TC_ACT_SHOT;
	st->rejected += 1;
	return bpf_redirect(skb->ifindex, 0);
drop:
	olcd_reject_remember(&pkt);
	return TC_ACT_SHOT;
}

#endif /* OLCD_REJECT_H */
