// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * olcd datapath: counts new inbound connections per protected port and sheds
 * them with the probability the daemon writes, at XDP or TC ingress.
 *
 * Both entry points share one inlined classifier (parse.h) and one decision
 * (olcd_handle, olcd_decide). The hot path is ordered by frequency:
 * established TCP leaves inside the parser before any map lookup; a SYN to a
 * port without a policy costs one load from the port index and one per-CPU
 * counter; a SYN to a protected port adds the policy, the dropped-SYN table
 * and, only when p is strictly between 0 and 1, the random draw. The clock is
 * read only when something would be dropped or marked, and then at most once
 * per jiffy. All array lookups are inlined by the verifier; the only helper
 * calls on the path are the draw and, once per jiffy, the clock.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "olcd.h"
#include "maps.h"
#include "parse.h"

char __license[] SEC("license") = "Dual MIT/GPL";

/* The enums are only used as constants, which leaves them out of BTF; these
 * never-read pointers put them there so that bpf2go can export them (-type). */
const enum olcd_mode *olcd_btf_mode __attribute__((unused));
const enum olcd_action *olcd_btf_action __attribute__((unused));
const enum olcd_class *olcd_btf_class __attribute__((unused));
const enum olcd_proto *olcd_btf_proto __attribute__((unused));
const enum olcd_policy_flag *olcd_btf_policy_flag __attribute__((unused));
const enum olcd_geometry *olcd_btf_geometry __attribute__((unused));
const enum olcd_syn_table *olcd_btf_syn_table __attribute__((unused));
const enum olcd_dscp *olcd_btf_dscp __attribute__((unused));

/* Bytes pulled into the linear area at TC when the headers are not there yet:
 * enough for 4 VLAN tags, IPv6 and a few extension headers and TCP. */
#define OLCD_PULL_MAX 256

enum olcd_verdict {
	OLCD_V_PASS = 0,
	OLCD_V_DROP = 1,
	OLCD_V_MARK = 2,
};

/* What the mark action writes, filled by olcd_decide for OLCD_V_MARK. */
struct olcd_mark {
	__u32 fwmark;
	__u8 dscp;
};

static __always_inline void olcd_count_unclassified(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&olcd_unclass, &zero);

	if (n)
		*n += 1;
}

/*
 * What olcd_decide needs from the packet beyond the parser's result, read
 * beforehand so that olcd_decide holds no packet pointer. The parser reaches a
 * candidate along many paths (0-4 VLAN tags, IPv4 options, IPv6 extension
 * headers), each with its own header offsets; the verifier tracks offsets used
 * with pointers exactly, so anything that kept one alive would be verified
 * once per path. Holding only values, olcd_decide is verified once per
 * protocol and family.
 */
struct olcd_cand {
	__u64 fp; /* dropped-SYN fingerprint; 0 when the SYN is not tracked */
	union {   /* source address, when an exception prefix is configured */
		struct olcd_lpm4_key k4;
		struct olcd_lpm6_key k6;
	} src;
	__u32 has_src;
};

/* Copy the source address into an exception-trie key. */
static __always_inline void olcd_read_source(const struct olcd_pkt *pkt, void *data,
					     void *data_end, struct olcd_cand *cand)
{
	if (pkt->ipv6) {
		struct ipv6hdr *ip6 = data + pkt->l3off;

		if ((void *)(ip6 + 1) > data_end)
			return;
		cand->src.k6.prefixlen = 128;
		__builtin_memcpy(cand->src.k6.addr, &ip6->saddr, sizeof(cand->src.k6.addr));
	} else {
		struct iphdr *iph = data + pkt->l3off;

		if ((void *)(iph + 1) > data_end)
			return;
		cand->src.k4.prefixlen = 32;
		__builtin_memcpy(cand->src.k4.addr, &iph->saddr, sizeof(cand->src.k4.addr));
	}
	cand->has_src = 1;
}

/* Is the source in an exception prefix? Only called when a trie is not
 * empty: an LPM walk is the dearest lookup here. */
static __always_inline int olcd_source_exempt(const struct olcd_pkt *pkt,
					      const struct olcd_cand *cand,
					      const struct olcd_control *ctl)
{
	if (!cand->has_src)
		return 0;
	if (pkt->ipv6)
		return ctl->prefixes6 && bpf_map_lookup_elem(&olcd_exempt6, &cand->src.k6);
	return ctl->prefixes4 && bpf_map_lookup_elem(&olcd_exempt4, &cand->src.k4);
}

/*
 * Is the daemon's heartbeat within stale-after at jiffy j? Reads the clock at
 * most once per jiffy and per heartbeat value (see struct olcd_freshness). A heartbeat
 * ahead of the clock is fresh; 0 (never written) is stale. Concurrent updates
 * from several CPUs write the same verdict give or take one jiffy.
 */
static __always_inline __u32 olcd_heartbeat_fresh(const struct olcd_control *ctl, __u64 j)
{
	struct olcd_freshness *f = &olcd_fresh;
	__u64 hb = ctl->heartbeat_ns, now;
	__u32 fresh;

	if (f->jiffies == j && f->heartbeat_ns == hb)
		return f->fresh;
	now = bpf_ktime_get_ns();
	fresh = hb != 0 && (__s64)(now - hb) <= (__s64)ctl->stale_after_ns;
	f->fresh = fresh;
	f->heartbeat_ns = hb;
	f->jiffies = j;
	return fresh;
}

/* Odd 64-bit multipliers of the fingerprint hash (the golden ratio and
 * splitmix64's). */
#define OLCD_K1 0x9e3779b97f4a7c15ULL
#define OLCD_K2 0xbf58476d1ce4e5b9ULL
#define OLCD_K3 0x94d049bb133111ebULL

/*
 * The dropped-SYN fingerprint: a seeded hash of the addresses, ports and
 * initial sequence number, never 0. Each 64-bit word is multiplied by its own
 * odd constant and the products are combined, so that the multiplies run in
 * parallel. Not cryptographic: with a per-load random seed, good enough that
 * a SYN flood cannot aim at one set, and a false match (63 bits compared in
 * four ways: about 2^-61 per lookup) only miscounts one SYN as a retransmit.
 *
 * 64-bit loads from the packet are unaligned on some paths; the verifier
 * allows that on architectures with efficient unaligned access (x86-64,
 * arm64). Returns 0 if the headers are not readable (the parser checked them;
 * this only satisfies the verifier).
 */
static __always_inline __u64 olcd_syn_fp(const struct olcd_pkt *pkt, void *data, void *data_end,
					 __u64 seed)
{
	__u64 *th = data + pkt->l4off; /* ports, then the sequence number */
	__u64 h;

	if ((void *)(th + 1) > data_end)
		return 0;
	h = (th[0] ^ seed) * OLCD_K1;
	if (pkt->ipv6) {
		__u64 *a = data + pkt->l3off + 8; /* saddr, daddr */

		if ((void *)(a + 4) > data_end)
			return 0;
		/* Destination words are rotated into the source words: a
		 * server has few destination addresses, and two multiplies
		 * fewer matter on the IPv6 path. */
		h ^= ((a[0] ^ ((a[2] << 29) | (a[2] >> 35)) ^ seed) * OLCD_K2) ^
		     ((a[1] ^ ((a[3] << 29) | (a[3] >> 35)) ^ seed) * OLCD_K3);
	} else {
		__u64 *a = data + pkt->l3off + 12; /* saddr, daddr */

		if ((void *)(a + 1) > data_end)
			return 0;
		h ^= (a[0] ^ seed) * OLCD_K2;
	}
	/* The set index takes the high half, where every input bit has
	 * reached through the multiplies; fold it down for the low half. */
	return (h ^ (h >> 29)) | 1;
}

/*
 * Look a fingerprint up in its set. A hit is a use: its stamp is refreshed,
 * so that a SYN still being retried stays in the table. Returns whether it
 * was found.
 */
static __always_inline int olcd_syn_seen(struct olcd_syn_set *set, __u64 fp, __u32 now)
{
#pragma unroll
	for (int w = 0; w < OLCD_SYN_WAYS; w++) {
		if (set->fp[w] == fp) {
			if (set->stamp[w] != now)
				set->stamp[w] = now;
			return 1;
		}
	}
	return 0;
}

/*
 * Remember a dropped SYN that is not in its set: take an empty way or evict
 * the least recently used. Races between CPUs can lose an entry, which only
 * makes a later retransmit count as new demand.
 */
static __always_inline void olcd_syn_insert(struct olcd_syn_set *set, __u64 fp, __u32 now)
{
	__u32 victim = 0, oldest = 0;

#pragma unroll
	for (int w = 0; w < OLCD_SYN_WAYS; w++) {
		__u32 age = now - set->stamp[w]; /* wrap-safe */

		if (set->fp[w] == 0) {
			victim = w;
			break;
		}
		if (age >= oldest) {
			oldest = age;
			victim = w;
		}
	}
	set->fp[victim & (OLCD_SYN_WAYS - 1)] = fp;
	set->stamp[victim & (OLCD_SYN_WAYS - 1)] = now;
}

/*
 * Decide what to do with a new-connection candidate to a port with a policy.
 * Counts it in the policy's stats slot, applies exceptions, the effective
 * mode, the dropped-SYN table, the random draw and the heartbeat. Returns an
 * olcd_verdict.
 *
 * The draw is random by design, so a branch on it would be mispredicted half
 * the time at p = 0.5 (several ns): its outcome is computed as 0 or 1 and
 * used arithmetically, and everything that branches is either configuration
 * (mode, action, exceptions) or nearly always the same (heartbeat fresh, SYN
 * seen before or not).
 */
static __always_inline int olcd_decide(const struct olcd_pkt *pkt, const struct olcd_policy *pol,
				       const struct olcd_cand *cand, struct olcd_mark *mark)
{
	struct olcd_control *ctl = &olcd_ctl;
	struct olcd_syn_set *set = NULL;
	struct olcd_counters *st;
	__u32 slot = pol->stats_slot, prob, sidx, act = 0, jnow = 0;
	__u64 j = 0;
	__u8 flags = pol->flags, mode;
	int seen = 0;

	if (__builtin_expect(flags != OLCD_POLICY_PROTECTED, 0)) {
		/* Exempt, with or without a policy of its own. A UDP port
		 * without a policy is not protected: not a request. */
		if (!(flags & OLCD_POLICY_PROTECTED) && !pkt->tcp)
			return OLCD_V_PASS;
		st = bpf_map_lookup_elem(&olcd_stats, &slot);
		if (st) {
			st->new_conns += 1;
			st->exempt += !!(flags & OLCD_POLICY_EXEMPT);
		}
		return OLCD_V_PASS;
	}
	if (__builtin_expect(ctl->prefixes4 | ctl->prefixes6, 0) && olcd_source_exempt(pkt, cand, ctl)) {
		st = bpf_map_lookup_elem(&olcd_stats, &slot);
		if (st) {
			st->new_conns += 1;
			st->exempt += 1;
		}
		return OLCD_V_PASS;
	}
	mode = ctl->mode < pol->mode ? ctl->mode : pol->mode;

	/* The draw: act = draw < prob, without a branch (the borrow of the
	 * 64-bit difference); 0 never, 0xffffffff always, exactly. It comes
	 * before the counters and the table only because few values are live
	 * yet, so the helper call spills nothing. */
	prob = pol->drop_prob;
	if (prob == 0xffffffff) {
		act = 1;
	} else if (prob != 0 && mode != OLCD_MODE_OFF) {
		__u64 diff = (__u64)bpf_get_prandom_u32() - prob;

		/* Hide the subtraction's origin, or the compiler turns the
		 * borrow back into a compare and branch. */
		barrier_var(diff);
		act = diff >> 63;
	}

	st = bpf_map_lookup_elem(&olcd_stats, &slot);
	if (!st)
		return OLCD_V_PASS;
	st->new_conns += 1;
	if (__builtin_expect(mode == OLCD_MODE_OFF, 0))
		return OLCD_V_PASS;

	/* One clock read serves the dropped-SYN table's stamps and the
	 * heartbeat check: a helper call is a good share of the budget. */
	if (cand->fp || (prob != 0 && mode == OLCD_MODE_ENFORCE))
		j = bpf_jiffies64();

	/* Only the drop action makes clients retransmit. The table is checked
	 * whatever p is now: a SYN dropped a second ago still comes back. */
	if (cand->fp) {
		jnow = (__u32)j;
		sidx = (__u32)(cand->fp >> 32) & ctl->syn_sets_mask;
		set = bpf_map_lookup_elem(&olcd_syns, &sidx);
		if (set && olcd_syn_seen(set, cand->fp, jnow)) {
			st->syn_retransmits += 1;
			seen = 1;
		}
	}
	if (prob == 0)
		return OLCD_V_PASS;

	if (mode == OLCD_MODE_OBSERVE) {
		st->would_drop += act;
		return OLCD_V_PASS;
	}

	/* Fail open when the daemon has stopped writing the heartbeat. */
	if (__builtin_expect(!olcd_heartbeat_fresh(ctl, j), 0)) {
		st->stale += act;
		return OLCD_V_PASS;
	}

	if (pol->action == OLCD_ACTION_MARK) {
		if (!act)
			return OLCD_V_PASS;
		st->marked += 1;
		mark->dscp = ctl->mark_dscp;
		mark->fwmark = ctl->mark_fwmark;
		return OLCD_V_MARK;
	}
	st->dropped += act;
	if (act & !seen && set)
		olcd_syn_insert(set, cand->fp, jnow);
	return act; /* OLCD_V_DROP or OLCD_V_PASS */
}

/*
 * Everything after a successful parse. A SYN to a port without a policy
 * costs one load from the port index and one per-CPU counter; for a port with
 * one, the packet is read once more (fingerprint, source address) and the rest
 * is olcd_decide.
 */
static __always_inline int olcd_handle(const struct olcd_pkt *pkt, void *data, void *data_end,
				       struct olcd_mark *mark)
{
	struct olcd_cand cand;
	struct olcd_policy *pol;
	struct olcd_counters *st;
	__u32 pi, slot;

	/* One flat index keeps the offset provably inside the variable. */
	pi = ((__u16 *)olcd_ports.idx)[((pkt->tcp ^ 1) & 1) << 16 | (pkt->dport & 0xffff)];
	if (pi == 0) {
		/* No policy: a SYN is still a new connection, counted in
		 * "other"; a UDP datagram is only a request to a UDP-protected
		 * port. */
		if (!pkt->tcp)
			return OLCD_V_PASS;
		slot = OLCD_SLOT_OTHER;
		st = bpf_map_lookup_elem(&olcd_stats, &slot);
		if (st)
			st->new_conns += 1;
		return OLCD_V_PASS;
	}
	pol = bpf_map_lookup_elem(&olcd_policies, &pi);
	if (!pol)
		return OLCD_V_PASS;
	cand.fp = 0;
	cand.has_src = 0;
	if (pol->flags == OLCD_POLICY_PROTECTED) {
		if (pkt->tcp && pol->action == OLCD_ACTION_DROP)
			cand.fp = olcd_syn_fp(pkt, data, data_end, olcd_ctl.syn_seed);
		if (olcd_ctl.prefixes4 | olcd_ctl.prefixes6)
			olcd_read_source(pkt, data, data_end, &cand);
	}
	return olcd_decide(pkt, pol, &cand, mark);
}

/* Fold a 32-bit one's complement sum to 16 bits. */
static __always_inline __u16 olcd_csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/*
 * Rewrite the DSCP, keeping the ECN bits. IPv4: the TOS byte, with the header
 * checksum updated incrementally (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')).
 * The sum is over raw 16-bit words, which one's complement arithmetic makes
 * byte-order independent. IPv6: the traffic class, which has no checksum.
 */
static __always_inline void olcd_set_dscp(const struct olcd_pkt *pkt, void *data, void *data_end,
					  __u8 dscp)
{
	if (pkt->ipv6) {
		__u8 *b = data + pkt->l3off;
		__u8 tc;

		if ((void *)(b + 2) > data_end)
			return;
		tc = (__u8)(b[0] << 4) | (b[1] >> 4);
		tc = (__u8)(dscp << 2) | (tc & 0x03);
		b[0] = (b[0] & 0xf0) | (tc >> 4);
		b[1] = (__u8)(tc << 4) | (b[1] & 0x0f);
	} else {
		struct iphdr *iph = data + pkt->l3off;
		__u16 *w = (__u16 *)iph, old, new;

		if ((void *)(iph + 1) > data_end)
			return;
		old = w[0];
		((__u8 *)iph)[1] = (__u8)(dscp << 2) | (((__u8 *)iph)[1] & 0x03);
		new = w[0];
		iph->check = ~olcd_csum_fold((__u16)~iph->check + (__u16)~old + new);
	}
}

SEC("xdp")
int olcd_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct olcd_mark mark = {};
	struct olcd_pkt pkt;
	int r, v;

	r = olcd_parse(data, data_end, NULL, &pkt);
	if (r == OLCD_P_NOT_NEW)
		return XDP_PASS;
	if (r != OLCD_P_NEW) {
		olcd_count_unclassified();
		return XDP_PASS;
	}
	v = olcd_handle(&pkt, data, data_end, &mark);
	if (v == OLCD_V_MARK) {
		/* Parse again rather than keep the header offsets alive
		 * through olcd_decide (see struct olcd_cand). */
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (mark.dscp <= OLCD_DSCP_MAX &&
		    olcd_parse(data, data_end, NULL, &pkt) == OLCD_P_NEW)
			olcd_set_dscp(&pkt, data, data_end, mark.dscp);
		return XDP_PASS;
	}
	/* Without a branch on the draw: see olcd_decide. */
	return XDP_PASS - (v & OLCD_V_DROP);
}

/*
 * TC ingress, direct action. Passing returns TC_ACT_UNSPEC so that the next
 * tcx program or cls_bpf filter still runs: olcd only ever takes packets away.
 */
SEC("tc")
int olcd_tc(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct olcd_mark mark = {};
	struct olcd_pkt pkt;
	int r, v;

	r = olcd_parse(data, data_end, skb, &pkt);
	if (r == OLCD_P_SHORT && skb->len > (__u32)(data_end - data)) {
		/* The headers may sit in paged data: pull them and look again. */
		bpf_skb_pull_data(skb, skb->len < OLCD_PULL_MAX ? skb->len : OLCD_PULL_MAX);
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		r = olcd_parse(data, data_end, skb, &pkt);
	}
	if (r == OLCD_P_NOT_NEW)
		return TC_ACT_UNSPEC;
	if (r != OLCD_P_NEW) {
		olcd_count_unclassified();
		return TC_ACT_UNSPEC;
	}
	v = olcd_handle(&pkt, data, data_end, &mark);
	if (v == OLCD_V_MARK) {
		/* Parse again: see olcd_xdp. */
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		if (mark.dscp <= OLCD_DSCP_MAX &&
		    olcd_parse(data, data_end, skb, &pkt) == OLCD_P_NEW)
			olcd_set_dscp(&pkt, data, data_end, mark.dscp);
		if (mark.fwmark)
			skb->mark = mark.fwmark;
		return TC_ACT_UNSPEC;
	}
	/* TC_ACT_UNSPEC (-1) or TC_ACT_SHOT (2), without a branch. */
	return TC_ACT_UNSPEC + (v & OLCD_V_DROP) * (TC_ACT_SHOT - TC_ACT_UNSPEC);
}
