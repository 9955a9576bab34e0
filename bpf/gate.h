/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The request gate's reset (olcd_gate in olcd.c decides, resp.h finds the
 * moment): the client segment that starts a request on an established
 * connection with nothing outstanding closes the connection at that
 * boundary. Two header-only RST|ACKs are made of it, each with a fresh
 * IPv4 (no options) or IPv6 (no extension headers) header at the same
 * place and the TCP header right after, no options, in-band VLAN tags left
 * where they are (reject.h builds its answer the same way):
 *
 * - toward the server: the segment's own addresses and ports, seq = the
 *   segment's seq, which is exactly the server's rcv_nxt (the gate only
 *   takes a segment that starts at the server's last acknowledgment), so
 *   that the kernel accepts it (RFC 5961 3.2: any other in-window seq only
 *   draws a challenge ACK); ack = the segment's.
 * - toward the client, as the server's host would send it: MACs,
 *   addresses and ports swapped, seq = the segment's acknowledgment (the
 *   client's rcv_nxt: it acknowledged every answer byte), ack = the end of
 *   the segment.
 *
 * XDP makes one frame of one, and the client's is the one that cannot
 * wait: it goes back out (XDP_TX), so that the client sees the reset
 * before any answer and retries on a new connection. The server's socket,
 * idle and with nothing unread, is then closed by its own idle timeout or
 * keep-alive probe, which the client's host answers with a RST. TC makes
 * both: the client's as a clone redirected to the egress of the interface
 * the segment came in on (bpf_clone_redirect), the server's as the packet
 * itself, passed on to the stack.
 *
 * Included by olcd.c after reject.h (its checksum helpers and TTL).
 */
#ifndef OLCD_GATE_H
#define OLCD_GATE_H

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
#include "parse.h"

/*
 * Write a header-only RST|ACK over the segment pkt describes: reply 1
 * toward the segment's sender (MACs, addresses and ports swapped), 0 in
 * its own direction; seq and ack in host order. The IPv4 checksum is
 * written; the TCP one is left 0 and its parts returned in sums (reject.h),
 * for the caller to write as its hook needs. Returns the frame's length up
 * to the end of the TCP header, or 0 (frame unchanged) when the headers are
 * not where pkt says.
 */
static __always_inline __u32 olcd_gate_build(void *data, void *data_end, const struct olcd_pkt *pkt,
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

/* Write the whole TCP checksum of a reset olcd_gate_build made (len: its
 * return). */
static __always_inline void olcd_gate_csum(void *data, void *data_end, __u32 len,
					   const struct olcd_reject_sums *sums)
{
	struct tcphdr *rt = data + ((len - sizeof(*rt)) & 0x7f);

	if ((void *)(rt + 1) <= data_end)
		rt->check = ~olcd_fold16((__u64)sums->pseudo + sums->hdr) & 0xffff;
}

/* XDP: the client's RST|ACK in place of the segment in ctx (XDP_TX); the
 * frame keeps its length, as reject.h's answer does (what follows the IP
 * length is padding to every receiver). */
static __always_inline int olcd_gate_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct olcd_reject_sums sums;
	struct olcd_pkt pkt;
	__u32 len;

	if (olcd_parse(data, data_end, NULL, &pkt) != OLCD_P_SEGMENT)
		return XDP_PASS;
	len = olcd_gate_build(data, data_end, &pkt, 1, pkt.seg_ack, pkt.seg_seq + pkt.seg_len,
			      &sums);
	if (!len)
		return XDP_PASS;
	olcd_gate_csum(data, data_end, len, &sums);
	return XDP_TX;
}

/* The most bytes from the IP header to the end of a reset: IPv6 and TCP. */
#define OLCD_GATE_HDRS 60

/*
 * TC: the client's RST|ACK as a clone to the egress of the interface the
 * segment came in on, then the segment itself as the server's RST, passed
 * on to the stack (TC_ACT_UNSPEC). The request's bytes are cut off first
 * (bpf_skb_change_tail), so that a failure there passes the segment
 * untouched. The client's checksum is written as reject.h's (whole, or the
 * pseudo header's part for CHECKSUM_PARTIAL; a PARTIAL segment whose TCP
 * header moved gets no answer, only the server's reset). The server's is
 * written whole (a PARTIAL skb coming in is not verified), and a
 * CHECKSUM_COMPLETE skb's sum is brought up to the bytes that changed
 * since the cut (bpf_csum_update, an error otherwise), so that the stack
 * verifies it without a "hw csum failure".
 */
static __always_inline int olcd_gate_tc(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 before[OLCD_GATE_HDRS / 4], after[OLCD_GATE_HDRS / 4];
	struct olcd_reject_sums sums;
	__u32 len, l3, n, cut, coff, pseudo;
	struct olcd_pkt pkt;
	int answer = 1;

	if (olcd_parse(data, data_end, skb, &pkt) != OLCD_P_SEGMENT)
		return TC_ACT_UNSPEC;
	l3 = pkt.l3off & 0x3f;
	n = pkt.ipv6 ? OLCD_GATE_HDRS : OLCD_GATE_HDRS - 20;
	len = l3 + n;
	/* Cut the request off, keeping the segment's own TCP header (past
	 * len when IPv4 options or IPv6 extension headers go), which the
	 * build reads; the rest goes after it. */
	cut = pkt.l4off + sizeof(struct tcphdr) > len ? pkt.l4off + sizeof(struct tcphdr) : len;
	if (skb->len > cut && bpf_skb_change_tail(skb, cut, 0))
		return TC_ACT_UNSPEC;
	if (bpf_skb_load_bytes(skb, l3, before, n))
		return TC_ACT_UNSPEC;
	/* From here on the request is cut: a failure drops what is left. */
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (data + cut > data_end) {
		bpf_skb_pull_data(skb, cut);
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
	}
	len = olcd_gate_build(data, data_end, &pkt, 1, pkt.seg_ack, pkt.seg_seq + pkt.seg_len,
			      &sums);
	if (!len)
		return TC_ACT_SHOT;
	if (cut > len && bpf_skb_change_tail(skb, len, 0))
		return TC_ACT_SHOT;
	pseudo = sums.pseudo;
	coff = len - sizeof(struct tcphdr) + 16; /* offsetof(struct tcphdr, check) */
	if (bpf_l4_csum_replace(skb, coff, 0, sums.pseudo, BPF_F_PSEUDO_HDR))
		return TC_ACT_SHOT;
	if (pkt.l4off != len - sizeof(struct tcphdr)) {
		__u16 *c;

		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		c = data + (coff & 0x7f);
		if ((void *)(c + 1) > data_end)
			return TC_ACT_SHOT;
		answer = *c != sums.pseudo; /* PARTIAL: the device would sum the wrong bytes */
	}
	if (answer) {
		if (bpf_l4_csum_replace(skb, coff, 0, sums.hdr, 0))
			return TC_ACT_SHOT;
		bpf_clone_redirect(skb, skb->ifindex, 0);
	}

	/* The frame is the client's reset now: turn it back toward the
	 * server. */
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	pkt.l4off = len - sizeof(struct tcphdr);
	len = olcd_gate_build(data, data_end, &pkt, 1, pkt.seg_seq, pkt.seg_ack, &sums);
	if (!len)
		return TC_ACT_SHOT;
	olcd_gate_csum(data, data_end, len, &sums);
	/* The first bpf_l4_csum_replace took the pseudo header's sum out of
	 * a COMPLETE skb's: the seed puts it back. */
	if (!bpf_skb_load_bytes(skb, l3, after, n))
		bpf_csum_update(skb, bpf_csum_diff(before, n, after, n, pseudo));
	return TC_ACT_UNSPEC;
}

#endif /* OLCD_GATE_H */
