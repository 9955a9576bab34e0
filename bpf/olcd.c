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
 * and, only when p is not 0, the draw. The clock is read only when something
 * could be dropped or marked, and then at most once per jiffy. All map
 * lookups on the path are array lookups the verifier inlines, and the draw
 * is computed in the program: no helper call is made per packet but, once
 * per jiffy, the clock's.
 *
 * Register economy. The compiler sees every map lookup as a helper call that
 * clobbers r1-r5, so a value kept across one needs one of the four
 * callee-saved registers r6-r9 or goes through the stack. The code is
 * arranged so that few values live across lookups: the packet is read (the
 * fingerprint) before the first one, the context waits in the stack, and
 * the random draw is computed here rather than by a helper.
 * docs/datapath.md ("Per-packet cost") has the measurements.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "olcd.h"
#include "maps.h"
#include "parse.h"
#include "resp.h"

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
const enum olcd_selection *olcd_btf_selection __attribute__((unused));
const enum olcd_resp_geometry *olcd_btf_resp_geometry __attribute__((unused));
const enum olcd_cap_flag *olcd_btf_cap_flag __attribute__((unused));
const enum olcd_fair_geometry *olcd_btf_fair_geometry __attribute__((unused));

/* Bytes pulled into the linear area at TC when the headers are not there yet:
 * enough for 4 VLAN tags, IPv6 and a few extension headers and TCP. */
#define OLCD_PULL_MAX 256

enum olcd_verdict {
	OLCD_V_PASS = 0,
	OLCD_V_DROP = 1,
	OLCD_V_MARK = 2,
	OLCD_V_REJECT = 3, /* answer with a RST|ACK (reject.h), or drop */
	OLCD_V_RESET = 4,  /* the request gate: reset the connection (gate.h) */
};

/* What the mark and reject actions need after the decision, filled by
 * olcd_handle_policy and olcd_decide. */
struct olcd_mark {
	void *ctx;                /* the program's context, parked here while olcd_handle runs */
	struct olcd_counters *st; /* OLCD_V_REJECT: the port's counters */
	__u32 fwmark;
	__u8 dscp;
	__u8 reject; /* the port's action is reject */
};

/*
 * Park the context in the stack while olcd_handle runs, and take it back.
 * Only the mark action needs it after the parse; kept in a callee-saved
 * register instead, it would push a value of the decision to the stack
 * (see "Register economy" above). Volatile, so that the compiler does not
 * keep it in a register all the same.
 */
#define olcd_stash_ctx(m, c) (*(void *volatile *)&(m)->ctx = (c))
#define olcd_unstash_ctx(m) (*(void *volatile *)&(m)->ctx)

static __always_inline void olcd_count_unclassified(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&olcd_unclass, &zero);

	if (n)
		*n += 1;
}

/* The source address as an exception-trie key, read only when a trie is
 * not empty (see olcd_handle_policy). */
struct olcd_src {
	union {
		struct olcd_lpm4_key k4;
		struct olcd_lpm6_key k6;
	};
	__u32 valid;
	__u32 ipv6;
};

/* Copy the source address of the IP header at l3off (ipv6: IPv6, else
 * IPv4) into an exception-trie key. */
static __always_inline void olcd_read_source(__u32 ipv6, __u32 l3off, void *data, void *data_end,
					     struct olcd_src *src)
{
	/* The offset may come back from the stack: bound it for the verifier. */
	l3off &= OLCD_BLUR_MASK;
	if (ipv6) {
		struct ipv6hdr *ip6 = data + l3off;

		if ((void *)(ip6 + 1) > data_end)
			return;
		src->k6.prefixlen = 128;
		__builtin_memcpy(src->k6.addr, &ip6->saddr, sizeof(src->k6.addr));
	} else {
		struct iphdr *iph = data + l3off;

		if ((void *)(iph + 1) > data_end)
			return;
		src->k4.prefixlen = 32;
		__builtin_memcpy(src->k4.addr, &iph->saddr, sizeof(src->k4.addr));
	}
	src->ipv6 = ipv6;
	src->valid = 1;
}

/* Is the source in an exception prefix? Only called when a trie is not
 * empty: an LPM walk is the dearest lookup here. */
static __always_inline int olcd_source_exempt(const struct olcd_src *src,
					      const struct olcd_control *ctl)
{
	if (src->ipv6)
		return ctl->prefixes6 && bpf_map_lookup_elem(&olcd_exempt6, &src->k6);
	return ctl->prefixes4 && bpf_map_lookup_elem(&olcd_exempt4, &src->k4);
}

/*
 * Is the daemon's heartbeat within stale-after? Reads the clock at most once
 * per jiffy (see olcd_control.fresh). A heartbeat ahead of the clock is
 * fresh; 0 (never written) is stale. Concurrent updates from several CPUs
 * write the same verdict give or take one jiffy.
 */
static __always_inline __u32 olcd_heartbeat_fresh(struct olcd_control *ctl)
{
	__u32 j = (__u32)bpf_jiffies64();
	__u64 hb, now;
	__u8 fresh;

	if (ctl->fresh_jiffies == j)
		return ctl->fresh;
	now = bpf_ktime_get_ns();
	hb = ctl->heartbeat_ns;
	fresh = hb != 0 && (__s64)(now - hb) <= (__s64)ctl->stale_after_ns;
	ctl->fresh = fresh;
	ctl->fresh_jiffies = j;
	ctl->fresh_ns = now;
	return fresh;
}

/* Odd 64-bit multipliers of the fingerprint hash (the golden ratio and
 * splitmix64's). */
#define OLCD_K1 0x9e3779b97f4a7c15ULL
#define OLCD_K2 0xbf58476d1ce4e5b9ULL

/*
 * The dropped-SYN fingerprint: a seeded hash of the addresses, ports and
 * initial sequence number (the two words the parser read, see struct
 * olcd_pkt), never 0. Each word is multiplied by its own odd constant and
 * the products are combined, so that the multiplies run in parallel. Not
 * cryptographic: with a per-load random seed, good enough that a SYN flood
 * cannot aim at one set, and a false match (63 bits compared in four ways:
 * about 2^-61 per lookup) only miscounts one SYN as a retransmit. For a
 * given address word the map from ports and sequence number is a bijection,
 * so two SYNs of one client never match falsely.
 */
static __always_inline __u64 olcd_syn_fp(const struct olcd_pkt *pkt, __u64 seed)
{
	__u64 h = ((pkt->fpw_tcp ^ seed) * OLCD_K1) ^ ((pkt->fpw_addr ^ seed) * OLCD_K2);

	/* The set index takes the high half, where every input bit has
	 * reached through the multiplies; the compare takes all 64 bits. */
	return h | 1;
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

/* Count a new connection that nothing is done to in a slot, and pass it;
 * exempt: whether an exception (port or source) is why. */
static __always_inline int olcd_count_pass(__u32 slot, __u32 exempt)
{
	struct olcd_counters *st = bpf_map_lookup_elem(&olcd_stats, &slot);

	if (st) {
		st->new_conns += 1;
		if (exempt)
			st->exempt += 1;
	}
	return OLCD_V_PASS;
}

/*
 * The draw: a uniform 32-bit value, the slot's new-connection count on this
 * CPU through a bijective 32-bit hash, "lowbias32" (C. Wellons,
 * hash-prospector, 2018: xorshift-multiply, two rounds). olcd_decide counts
 * every new connection before it draws, so a draw never hashes a count
 * hashed before on this CPU (within 2^32) and every 32-bit value comes once
 * per 2^32 draws; the loader starts the count at a random value per CPU
 * when the slot gets its port, so CPUs and ports draw independently. In
 * the program rather than bpf_get_prandom_u32(), a helper call the verifier
 * does not inline, which would cost the SYN path its budget, and with no
 * state of its own: the count is already in the slot (docs/datapath.md,
 * "The draw").
 */
static __always_inline __u32 olcd_draw(__u32 x)
{
	x ^= x >> 16;
	x *= 0x7feb352dU;
	x ^= x >> 15;
	x *= 0x846ca68bU;
	return x ^ (x >> 16);
}

#include "fair.h"

/* Effective mode of a stale heartbeat in enforce mode: nothing is dropped
 * or marked, what would have been is counted as stale. */
#define OLCD_MODE_STALE 3

/*
 * The clock of the dropped-SYN table's stamps: the daemon's heartbeat, in
 * units of 2^20 ns (about 1 ms). Only the order of the stamps matters (least
 * recently used goes first), and SYNs are only dropped, so only inserted,
 * while the heartbeat is fresh: it advances with every tick of the daemon
 * whenever the table gets new entries. A plain load, where bpf_jiffies64()
 * would be a helper call to the compiler (see "Register economy").
 */
static __always_inline __u32 olcd_syn_clock(const struct olcd_control *ctl)
{
	return (__u32)(ctl->heartbeat_ns >> 20);
}

/*
 * Whether the draw selects this packet, 0 or 1, for a drop probability p > 0
 * (always at 0xffffffff), by the control record's selection (enum
 * olcd_selection). n: the draw's input, a count that moves by one per
 * candidate on this CPU (see olcd_draw). The random draw is random by design, so a branch on it
 * would be mispredicted half the time at p = 0.5: the outcome is the borrow
 * of the 64-bit difference, used arithmetically. The branch on the
 * selection is taken the same way for every packet.
 */
static __always_inline __u32 olcd_select(__u32 n, __u32 *slot, __u32 p, __u8 selection)
{
	__u64 diff;
	__u32 *acc;

	if (p == 0xffffffff)
		return 1;
	if (selection == OLCD_SELECT_EVEN) {
		/* Error diffusion: the slot's accumulator on this CPU adds p
		 * per new connection and selects on each carry, so exactly
		 * p / 2^32 of them are selected, evenly spaced, from the
		 * random phase the loader started it at. */
		acc = bpf_map_lookup_elem(&olcd_even, slot);
		if (!acc)
			return 0;
		diff = (__u64)*acc + p;
		*acc = (__u32)diff;
		return diff >> 32;
	}
	diff = (__u64)olcd_draw(n) - p;
	/* Hide the subtraction's origin, or the compiler turns the borrow
	 * back into a compare and branch. */
	barrier_var(diff);
	return diff >> 63;
}

/*
 * The selection of olcd_decide: the draw first, a fair port with a source
 * against the source's own probability (fair.h), the rest olcd_select;
 * then, on a port with static caps, what the draw passed meets them. A cap
 * spends its tokens only on work the adaptive law admits, so the stricter
 * of the two wins: a cap above what p admits refuses nothing, one below it
 * refuses the difference. What a static cap refuses is counted capped in
 * fs (not with a stale heartbeat, which refuses nothing); what the law's
 * ceiling on requests in flight refuses is the law's shed, as its draw's,
 * and counted ceiled in fs, so that the law knows when its ceiling acts. src is NULL (a
 * constant) on the path of ports without fairness or caps, which this then
 * leaves as it was. n: the draw's input (olcd_draw).
 */
static __always_inline __u32 olcd_pick(__u32 n, __u32 *pi, __u32 p, const struct olcd_policy *pol,
				       const struct olcd_src *src, struct olcd_fair_slot *fs,
				       __u32 mode)
{
	__u32 act = 0, capped;

	if (!src)
		return olcd_select(n, pi, p, olcd_ctl.selection);
	if (p != 0) {
		if (pol->fair && src->valid && p != 0xffffffff)
			act = olcd_fair_select(pol, pi, olcd_draw(n), p, src, fs);
		else
			act = olcd_select(n, pi, p, olcd_ctl.selection);
	}
	/* Caps first, then act: a branch on act (a coin at p = 0.5) would
	 * be mispredicted on every other new connection (docs/datapath.md,
	 * "Fair shedding", cost). */
	if (!pol->caps)
		return act;
	if (act)
		return act;
	capped = olcd_capped(pol, pi, src, olcd_ctl.fresh_ns);
	if (mode != OLCD_MODE_STALE) {
		fs->capped += capped & OLCD_CAPPED;
		fs->ceiled += capped >> 1; /* OLCD_CEILED */
	}
	return capped != 0;
}

/* What a selected packet becomes outside enforce mode: counted, passed.
 * rej: the reject action would answer it. */
static __always_inline int olcd_not_enforced(struct olcd_counters *st, __u32 mode, __u32 act,
					     __u32 rej)
{
	if (mode == OLCD_MODE_OBSERVE) {
		st->would_drop += act;
		st->rejected += act & rej;
	} else {
		st->stale += act;
	}
	return OLCD_V_PASS;
}

/*
 * Decide what to do with a new-connection candidate to a protected port
 * that no exception applies to, whose policy index is *pi. fp is the
 * dropped-SYN fingerprint, 0 when the SYN is not tracked (UDP, mark action).
 * Returns an olcd_verdict.
 *
 * In the order of docs/datapath.md: count the new connection; mode off →
 * pass; dropped-SYN table → count a retransmit; p = 0 → pass; the draw (a
 * retransmit of a port that sheds them is dropped without one);
 * observe → count would-drop; heartbeat stale → count stale; mark or drop.
 * The heartbeat verdict is taken first only because its (rare) clock read
 * is a helper call, cheapest while only the policy and fp are kept.
 * src (the source address) is NULL but for a port with fairness or a cap
 * (fair.h): then the draw is the source's, and a port with caps asks them
 * whatever p is (p = 0 too) for what the draw passed (olcd_pick): what
 * they refuse is selected and counted capped.
 */
static __always_inline int olcd_decide(const struct olcd_policy *pol, __u32 *pi, __u64 fp,
				       struct olcd_mark *mark, const struct olcd_src *src)
{
	struct olcd_control *ctl = &olcd_ctl;
	struct olcd_fair_slot *fs = NULL;
	struct olcd_syn_set *set;
	struct olcd_counters *st;
	__u32 sidx, act, prob, seen, mode, caps = 0;

	mode = ctl->mode < pol->mode ? ctl->mode : pol->mode;
	if (src) {
		/* Fair or capped: the clock (fresh_ns) is needed whatever
		 * p is, in observe mode too. */
		if (mode != OLCD_MODE_OFF && !olcd_heartbeat_fresh(ctl) &&
		    mode == OLCD_MODE_ENFORCE)
			mode = OLCD_MODE_STALE;
	} else if (mode == OLCD_MODE_ENFORCE && pol->drop_prob != 0 &&
		   __builtin_expect(!olcd_heartbeat_fresh(ctl), 0)) {
		mode = OLCD_MODE_STALE;
	}

	/* A port's stats slot is its policy index (pol->stats_slot differs
	 * only in the shared entry of exception ports, never protected): the
	 * policy lookup's key, already in the stack, serves again. */
	st = bpf_map_lookup_elem(&olcd_stats, pi);
	if (!st)
		return OLCD_V_PASS;
	st->new_conns += 1;
	if (__builtin_expect(mode == OLCD_MODE_OFF, 0))
		return OLCD_V_PASS;
	if (src) {
		fs = bpf_map_lookup_elem(&olcd_fair_slots, pi);
		if (!fs)
			return OLCD_V_PASS;
		caps = pol->caps;
	}

	if (fp) {
		/* A SYN to a port with the drop action (the only one that
		 * makes clients retransmit). The table is checked whatever p
		 * is now: a SYN dropped a second ago still comes back. */
		sidx = (__u32)(fp >> 32) & ctl->syn_sets_mask;
		set = bpf_map_lookup_elem(&olcd_syns, &sidx);
		if (set) {
			seen = olcd_syn_seen(set, fp, olcd_syn_clock(ctl));
			st->syn_retransmits += seen;
			prob = pol->drop_prob;
			if (!seen && pol->shed_retransmits == OLCD_RETX_LAST)
				prob = 0; /* retransmits last: first attempts pass */
			if (prob == 0 && !caps)
				return OLCD_V_PASS;
			if (seen && pol->shed_retransmits == OLCD_RETX_SHED)
				act = 1;
			else
				act = olcd_pick(st->new_conns, pi, prob, pol, src, fs, mode);
			if (__builtin_expect(mode != OLCD_MODE_ENFORCE, 0))
				return olcd_not_enforced(st, mode, act, mark->reject);
			st->dropped += act;
			if (act & mark->reject) {
				/* Not remembered: an answered SYN is not
				 * retransmitted (reject.h remembers it if it
				 * ends up dropped). */
				mark->st = st;
				return OLCD_V_REJECT;
			}
			if (act & !seen)
				olcd_syn_insert(set, fp, olcd_syn_clock(ctl));
			return act; /* OLCD_V_DROP or OLCD_V_PASS */
		}
	}
	prob = pol->drop_prob;
	if (pol->shed_retransmits == OLCD_RETX_LAST)
		prob = 0; /* no retransmits told apart here: all first attempts */
	if (prob == 0 && !caps)
		return OLCD_V_PASS;
	act = olcd_pick(st->new_conns, pi, prob, pol, src, fs, mode);
	if (__builtin_expect(mode != OLCD_MODE_ENFORCE, 0))
		return olcd_not_enforced(st, mode, act, 0);
	if (pol->action == OLCD_ACTION_MARK) {
		if (!act)
			return OLCD_V_PASS;
		st->marked += 1;
		mark->dscp = ctl->mark_dscp;
		mark->fwmark = ctl->mark_fwmark;
		return OLCD_V_MARK;
	}
	st->dropped += act;
	return act; /* OLCD_V_DROP or OLCD_V_PASS */
}

/*
 * The request gate (resp.h calls it): a request that starts on an
 * established connection of port sg->dport with nothing outstanding is
 * what a SYN is to a new connection, the point where new work enters.
 * Shed with the port's drop probability and selection, as SYNs are, on a
 * protected port whose policy has request_gate; never for an exception
 * port or source, never in off mode nor with a stale heartbeat (fails
 * open, not counted); observe mode counts would_reset in h and passes.
 * The draw's input is h->reused, which resp.h moves by one per request
 * start, offset per CPU by the flow hash seed so that CPUs draw apart; the
 * even selection shares the port's accumulator with its SYNs, so that the
 * share passed is even over both. The ceilings on requests in flight
 * (fair.h) are for new connections: a reset costs the client a new
 * connection, which meets them. Returns an olcd_gate_verdict.
 */
static __always_inline int olcd_gate(const struct olcd_seg *sg, void *data, void *data_end,
				     struct olcd_resp_hist *h)
{
	struct olcd_control *ctl = &olcd_ctl;
	struct olcd_policy *pol;
	__u32 pi, mode, prob, n;

	pi = olcd_ports.idx[OLCD_INDEX_TCP][sg->dport & 0xffff];
	if (pi == 0)
		return OLCD_GATE_PASS;
	pol = bpf_map_lookup_elem(&olcd_policies, &pi);
	if (!pol || pol->flags != OLCD_POLICY_PROTECTED || !pol->request_gate)
		return OLCD_GATE_PASS;
	mode = ctl->mode < pol->mode ? ctl->mode : pol->mode;
	prob = pol->drop_prob;
	if (mode == OLCD_MODE_OFF || prob == 0 || pol->shed_retransmits == OLCD_RETX_LAST)
		return OLCD_GATE_PASS; /* a request start is a first attempt */
	if (__builtin_expect(*(__u64 *)&ctl->prefixes4 != 0, 0)) {
		struct olcd_src src;

		src.valid = 0;
		olcd_read_source(sg->ipv6, sg->l3off, data, data_end, &src);
		if (src.valid && olcd_source_exempt(&src, ctl))
			return OLCD_GATE_PASS;
	}
	if (mode == OLCD_MODE_ENFORCE && !olcd_heartbeat_fresh(ctl))
		return OLCD_GATE_PASS;
	n = h->reused + (__u32)(olcd_rctl.seed >> 32) * (bpf_get_smp_processor_id() + 1);
	if (!olcd_select(n, &pi, prob, ctl->selection))
		return OLCD_GATE_PASS;
	if (mode != OLCD_MODE_ENFORCE) {
		h->would_reset += 1;
		return OLCD_GATE_PASS;
	}
	return OLCD_GATE_RESET;
}

/*
 * Everything after the port index, for a port with a policy (pi). With
 * prefixes set (a compile-time constant: olcd_handle inlines this twice),
 * the exception source prefixes are looked at too.
 */
static __always_inline int olcd_handle_policy(const struct olcd_pkt *pkt, void *data,
					      void *data_end, __u32 pi, __u64 fp,
					      struct olcd_mark *mark, int prefixes)
{
	struct olcd_src src;
	struct olcd_policy *pol;
	__u8 flags;

	if (prefixes) {
		src.valid = 0;
		olcd_read_source(pkt->ipv6, pkt->l3off, data, data_end, &src);
	}
	pol = bpf_map_lookup_elem(&olcd_policies, &pi);
	if (!pol)
		return OLCD_V_PASS;
	flags = pol->flags;
	if (__builtin_expect(flags != OLCD_POLICY_PROTECTED, 0)) {
		/* Exempt, with or without a policy of its own. A UDP port
		 * without a policy is not protected: not a request. */
		if (!(flags & OLCD_POLICY_PROTECTED) && !pkt->tcp)
			return OLCD_V_PASS;
		return olcd_count_pass(pol->stats_slot, flags & OLCD_POLICY_EXEMPT);
	}
	if (prefixes && src.valid && olcd_source_exempt(&src, &olcd_ctl))
		return olcd_count_pass(pol->stats_slot, 1);
	/* Only dropped SYNs are retransmitted: the mark action passes them
	 * all. A UDP port with the reject action drops (fp is 0). */
	mark->reject = pol->action == OLCD_ACTION_REJECT;
	if (pol->action == OLCD_ACTION_MARK)
		fp = 0;
	/* Fairness or a cap (both bytes in one load): the source is needed,
	 * on a path of its own, so that the others have no trace of it. */
	if (__builtin_expect(*(const __u16 *)&pol->fair != 0, 0)) {
		if (!prefixes) {
			src.valid = 0;
			olcd_read_source(pkt->ipv6, pkt->l3off, data, data_end, &src);
		}
		return olcd_decide(pol, &pi, fp, mark, &src);
	}
	return olcd_decide(pol, &pi, fp, mark, NULL);
}

/*
 * Everything after a successful parse. A SYN to a port without a policy
 * costs one load from the port index and one per-CPU counter. For a port
 * with one, the fingerprint is computed before the first lookup, so that
 * nothing of the packet but it is kept across (the mark action parses
 * again). Reading the source address only when an exception prefix exists
 * needs its own copy of the path: the fast one has no trace of it.
 */
static __always_inline int olcd_handle(const struct olcd_pkt *pkt, void *data, void *data_end,
				       struct olcd_mark *mark)
{
	struct olcd_control *ctl = &olcd_ctl;
	__u32 pi;
	__u64 fp = 0;

	/* One flat index keeps the offset provably inside the variable. */
	pi = ((__u16 *)olcd_ports.idx)[((pkt->tcp ^ 1) & 1) << 16 | (pkt->dport & 0xffff)];
	if (pi == 0) {
		/* No policy: a SYN is still a new connection, counted in
		 * "other"; a UDP datagram is only a request to a UDP-protected
		 * port. */
		if (!pkt->tcp)
			return OLCD_V_PASS;
		return olcd_count_pass(OLCD_SLOT_OTHER, 0);
	}
	if (pkt->tcp)
		fp = olcd_syn_fp(pkt, ctl->syn_seed);
	/* Both trie sizes in one load: 0 when no exception prefix is set. */
	if (__builtin_expect(*(__u64 *)&ctl->prefixes4 != 0, 0))
		return olcd_handle_policy(pkt, data, data_end, pi, fp, mark, 1);
	return olcd_handle_policy(pkt, data, data_end, pi, fp, mark, 0);
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
	/* The offset comes back from the stack: bound it for the verifier. */
	if (pkt->l3off > OLCD_MAX_HDR_OFF)
		return;
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

#include "reject.h"
#include "gate.h"

/* The context's packet bounds: XDP (tc 0) or TC (tc 1, a constant at each call). */
static __always_inline void olcd_ctx_data(void *ctx, int tc, void **data, void **data_end)
{
	if (tc) {
		struct __sk_buff *skb = ctx;

		*data = (void *)(long)skb->data;
		*data_end = (void *)(long)skb->data_end;
	} else {
		struct xdp_md *xdp = ctx;

		*data = (void *)(long)xdp->data;
		*data_end = (void *)(long)xdp->data_end;
	}
}

/*
 * The ingress body both hooks share: parse, response timing, the decision,
 * the mark action's rewrite. Returns an olcd_verdict, which each entry maps
 * to its own return codes; OLCD_V_REJECT and OLCD_V_RESET leave the answer
 * to the hook (reject.h, gate.h), with the context parked in mark
 * (olcd_unstash_ctx) and, for a reject, the port's counters in mark->st. tc (a constant): ctx is a struct __sk_buff,
 * else a struct xdp_md.
 */
static __always_inline int olcd_ingress(void *ctx, int tc, struct olcd_mark *mark)
{
	struct __sk_buff *skb = tc ? ctx : NULL;
	void *data, *data_end;
	struct olcd_pkt pkt;
	int r, v;

	olcd_ctx_data(ctx, tc, &data, &data_end);
	r = olcd_parse(data, data_end, skb, &pkt);
	if (tc && r == OLCD_P_SHORT && skb->len > (__u32)(data_end - data)) {
		/* The headers may sit in paged data: pull them and look again. */
		bpf_skb_pull_data(skb, skb->len < OLCD_PULL_MAX ? skb->len : OLCD_PULL_MAX);
		olcd_ctx_data(ctx, tc, &data, &data_end);
		r = olcd_parse(data, data_end, skb, &pkt);
	}
	if (r == OLCD_P_NOT_NEW)
		return OLCD_V_PASS;
	if (r != OLCD_P_NEW) {
		if (r != OLCD_P_SEGMENT) {
			olcd_count_unclassified();
			return OLCD_V_PASS;
		}
		olcd_stash_ctx(mark, ctx);
		if (olcd_resp_ingress(&pkt, data, data_end) == OLCD_GATE_RESET)
			return OLCD_V_RESET;
		return OLCD_V_PASS;
	}
	olcd_stash_ctx(mark, ctx);
	v = olcd_handle(&pkt, data, data_end, mark);
	if (v == OLCD_V_REJECT)
		return v;
	if (__builtin_expect(!pkt.tcp, 0) && v == OLCD_V_PASS)
		olcd_resp_udp(pkt.seg_addrs, pkt.seg_ports, pkt.ipv6, 0);
	if (v == OLCD_V_MARK) {
		/* Parse again rather than keep the header offsets alive
		 * through olcd_decide (see olcd_handle). */
		ctx = olcd_unstash_ctx(mark);
		skb = tc ? ctx : NULL;
		olcd_ctx_data(ctx, tc, &data, &data_end);
		if (mark->dscp <= OLCD_DSCP_MAX &&
		    olcd_parse(data, data_end, skb, &pkt) == OLCD_P_NEW)
			olcd_set_dscp(&pkt, data, data_end, mark->dscp);
	}
	return v;
}

SEC("xdp")
int olcd_xdp(struct xdp_md *ctx)
{
	struct olcd_mark mark;
	int v;

	v = olcd_ingress(ctx, 0, &mark);
	if (v == OLCD_V_REJECT)
		return olcd_reject_xdp(olcd_unstash_ctx(&mark), mark.st);
	if (v == OLCD_V_RESET)
		return olcd_gate_xdp(olcd_unstash_ctx(&mark));
	/* PASS and MARK pass, DROP drops, without a branch on the draw (see
	 * olcd_decide). */
	return XDP_PASS - (v & OLCD_V_DROP);
}

/*
 * TC ingress, direct action. Passing returns TC_ACT_UNSPEC so that the next
 * tcx program or cls_bpf filter still runs: olcd only ever takes packets
 * away, or answers a shed SYN in its place (reject.h).
 */
SEC("tc")
int olcd_tc(struct __sk_buff *skb)
{
	struct olcd_mark mark;
	int v;

	v = olcd_ingress(skb, 1, &mark);
	if (v == OLCD_V_REJECT)
		return olcd_reject_tc(olcd_unstash_ctx(&mark), mark.st);
	if (v == OLCD_V_RESET)
		return olcd_gate_tc(olcd_unstash_ctx(&mark));
	if (v == OLCD_V_MARK) {
		if (mark.fwmark)
			((struct __sk_buff *)olcd_unstash_ctx(&mark))->mark = mark.fwmark;
		return TC_ACT_UNSPEC;
	}
	/* TC_ACT_UNSPEC (-1) or TC_ACT_SHOT (2), without a branch. */
	return TC_ACT_UNSPEC + (v & OLCD_V_DROP) * (TC_ACT_SHOT - TC_ACT_UNSPEC);
}

/*
 * TC egress, direct action, beside either ingress hook: sees the server's
 * answers for response timing (resp.h) and nothing else. Always passes
 * (TC_ACT_UNSPEC): olcd never takes outbound packets away.
 */
SEC("tc")
int olcd_tc_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct olcd_pkt pkt;
	int r;

	r = olcd_parse_egress(data, data_end, skb, &pkt);
	if (r == OLCD_P_SHORT && skb->len > (__u32)(data_end - data)) {
		bpf_skb_pull_data(skb, skb->len < OLCD_PULL_MAX ? skb->len : OLCD_PULL_MAX);
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		r = olcd_parse_dir(data, data_end, skb, 1, &pkt);
	}
	if (r == OLCD_P_SEGMENT)
		olcd_resp_egress(&pkt);
	else if (r == OLCD_P_NEW && !pkt.tcp)
		olcd_resp_udp(pkt.seg_addrs, pkt.seg_ports, pkt.ipv6, 1);
	return TC_ACT_UNSPEC;
}
