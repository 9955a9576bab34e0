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

/* Write the whole TCP checksum of a reset olcd_rst_build made (len: its
 * return). */
static __always_inline void olcd_gate_csum(void *data, void *data_end, __u32 len,
					   const struct olcd_reject_sums *sums)
{
	struct tcphdr *rt = data + ((len - sizeof(*rt)) & 0x7f);

	if ((void *)(rt + 1) <= data_end)
		rt->check = ~olcd_fold16((__u64)sums->pseudo + sums->hdr) & 0xffff;
}

/*
 * Count a reset the hook made: resets (which the controller reads as shed
 * work) counts connections reset, not resets decided, so a segment the
 * hook cannot turn into one passes uncounted.
 */
static __always_inline void olcd_gate_count(const struct olcd_pkt *pkt)
{
	struct olcd_resp_hist *h = olcd_rhist_of(pkt->seg_slot);

	if (h)
		h->resets += 1;
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
	len = olcd_rst_build(data, data_end, &pkt, 1, pkt.seg_ack, pkt.seg_seq + pkt.seg_len,
			     &sums);
	if (!len)
		return XDP_PASS;
	olcd_gate_csum(data, data_end, len, &sums);
	olcd_gate_count(&pkt);
	return XDP_TX;
}

/* The most bytes from the IP header to the end of a reset: IPv6 and TCP. */
#define OLCD_GATE_HDRS 60

/*
 * TC: the client's RST|ACK as a clone to the egress of the interface the
 * segment came in on, then the segment itself as the server's RST, passed
 * on to the stack (TC_ACT_UNSPEC), and counted (olcd_gate_count). Every
 * step that can fail comes before the segment changes, and a failure there
 * passes it untouched: the headers pulled into the linear part, the bytes
 * the checksum update starts from read, and the frame cut to the reset's
 * length (bpf_skb_change_tail) at once, the TCP header's ports kept aside
 * when it moves up (IPv4 options, IPv6 extension headers go). The kernel
 * refuses that cut for a CHECKSUM_PARTIAL segment whose TCP header moves
 * (its checksum start would lie past the end; the stack's own trim to the
 * IP length would drop it as well): such a segment passes. After the cut
 * nothing fails (the frame is linear, writable and long enough); the
 * checks the verifier needs pass what the frame is then, uncounted. The
 * client's checksum is written as reject.h's (whole, or the pseudo
 * header's part for CHECKSUM_PARTIAL); the server's is written whole (a
 * PARTIAL skb coming in is not verified), and a CHECKSUM_COMPLETE skb's
 * sum is brought up to the bytes that changed (bpf_csum_update, an error
 * otherwise), so that the stack verifies it without a "hw csum failure".
 * A failed clone (bpf_clone_redirect) leaves the client without its
 * reset, which its next segment then draws from the server's closed
 * socket.
 */
static __always_inline int olcd_gate_tc(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 before[OLCD_GATE_HDRS / 4], after[OLCD_GATE_HDRS / 4];
	struct olcd_reject_sums sums;
	__u32 len, l3, l4, n, cut, coff, pseudo, ports;
	struct olcd_pkt pkt;

	if (olcd_parse(data, data_end, skb, &pkt) != OLCD_P_SEGMENT)
		return TC_ACT_UNSPEC;
	l3 = pkt.l3off & 0x3f;
	n = pkt.ipv6 ? OLCD_GATE_HDRS : OLCD_GATE_HDRS - 20;
	len = l3 + n;
	l4 = len - sizeof(struct tcphdr); /* where the reset's TCP header goes */
	/* The segment's own TCP header may lie past len. */
	cut = pkt.l4off + sizeof(struct tcphdr) > len ? pkt.l4off + sizeof(struct tcphdr) : len;
	if (data + cut > data_end) {
		bpf_skb_pull_data(skb, cut);
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		if (data + cut > data_end)
			return TC_ACT_UNSPEC;
	}
	{
		__u32 *p = data + (pkt.l4off & OLCD_BLUR_MASK);

		if ((void *)(p + 1) > data_end)
			return TC_ACT_UNSPEC;
		ports = *p; /* source and destination, as the header has them */
	}
	if (bpf_skb_load_bytes(skb, l3, before, n))
		return TC_ACT_UNSPEC;
	if (skb->len > len && bpf_skb_change_tail(skb, len, 0))
		return TC_ACT_UNSPEC;

	/* Cut: the segment is the reset from here on. */
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (pkt.l4off != l4) {
		__u32 *p = data + (l4 & 0x7f);

		if ((void *)(p + 1) > data_end)
			return TC_ACT_UNSPEC;
		*p = ports;
		pkt.l4off = l4;
	}
	len = olcd_rst_build(data, data_end, &pkt, 1, pkt.seg_ack, pkt.seg_seq + pkt.seg_len,
			     &sums);
	if (!len)
		return TC_ACT_UNSPEC;
	pseudo = sums.pseudo;
	coff = len - sizeof(struct tcphdr) + 16; /* offsetof(struct tcphdr, check) */
	/* Unlike reject.h's SYN, no PARTIAL segment gets here with its TCP
	 * header moved (the cut refused it): the device sums from the
	 * reset's own header. */
	if (bpf_l4_csum_replace(skb, coff, 0, sums.pseudo, BPF_F_PSEUDO_HDR) ||
	    bpf_l4_csum_replace(skb, coff, 0, sums.hdr, 0))
		return TC_ACT_UNSPEC;
	bpf_clone_redirect(skb, skb->ifindex, 0);

	/* The frame is the client's reset now: turn it back toward the
	 * server. */
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	len = olcd_rst_build(data, data_end, &pkt, 1, pkt.seg_seq, pkt.seg_ack, &sums);
	if (!len)
		return TC_ACT_UNSPEC;
	olcd_gate_csum(data, data_end, len, &sums);
	/* The first bpf_l4_csum_replace took the pseudo header's sum out of
	 * a COMPLETE skb's: the seed puts it back. */
	if (!bpf_skb_load_bytes(skb, l3, after, n))
		bpf_csum_update(skb, bpf_csum_diff(before, n, after, n, pseudo));
	olcd_gate_count(&pkt);
	return TC_ACT_UNSPEC;
}

#endif /* OLCD_GATE_H */
