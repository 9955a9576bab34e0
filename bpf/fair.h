/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Fair shedding and static caps (docs/datapath.md, "Fair shedding").
 *
 * Fair shedding. While a fair port sheds (drop_prob p > 0), each new
 * connection (SYN, UDP request, gated request start) is counted in a
 * count-min sketch (Cormode and Muthukrishnan, 2005) by its source prefix,
 * and so is the port's total: m is the source's estimated count, T the
 * port's, both halved once per epoch (2^epoch_shift ns), so that they count
 * the last two epochs or so. The source's share is m / T. It is shed with
 * probability
 *
 *	p_src = max(0, 1 - fair / (m / T))
 *
 * the law of approximate fair dropping (AFD; R. Pan, L. Breslau, B.
 * Prabhakar, S. Shenker, "Approximate fairness through differential
 * dropping", CCR 2003): a source above the fair share keeps exactly the
 * fair share, one below it keeps everything. The fair share "fair" is the
 * level at which the port's total shed is the controller's p: here it is
 * found by the datapath itself, per port and CPU, with a stochastic
 * approximation step per new connection (fair grows by fair * (1 - p) /
 * 2^STEP_SHIFT on a drop and shrinks by fair * p / 2^STEP_SHIFT on a pass,
 * which is still on average exactly when the drops are a share p of the
 * arrivals), starting at 1 - p. With even demand every source's share is
 * the same and fair settles at (1 - p) times it: every source meets p,
 * today's law. A spoofed-source flood (every SYN from a new random
 * address) is even demand too: every count is the sketch's noise, about
 * alike, and the shed stays p. The port's shed on a CPU never falls
 * behind p by more than OLCD_FAIR_DEBT_MAX new connections, fair share
 * settled or not (fs->debt): fairness moves which sources are shed, not
 * how many.
 *
 * Static caps. A port may have a token bucket of its own (new work per
 * second) and its source prefixes buckets each, and a ceiling on its
 * requests in flight, read per arrival from the response timer's counts
 * (olcd_inflight); the adaptive law sets a ceiling of its own there.
 * The caps are asked for what the adaptive law's draw passes (olcd_pick in
 * olcd.c), so that their tokens go to admitted work only: the stricter of
 * the two wins. What a static cap refuses is shed whatever p is (p = 0
 * too), with the port's action, and counted as capped; what the law's
 * ceiling refuses is counted ceiled (the law's shed).
 *
 * Included by olcd.c after olcd_draw, olcd_heartbeat_fresh and struct
 * olcd_src.
 */
#ifndef OLCD_FAIR_H
#define OLCD_FAIR_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "olcd.h"

/* olcd_fair_select keeps both rows of a source in one line, half each. */
_Static_assert(OLCD_FAIR_DEPTH == 2, "the sketch line holds two rows");

/* The knobs, written by the loader (a .bss global like olcd_ctl). */
struct olcd_fair_conf olcd_fair;

/* The sketch: OLCD_FAIR_DEPTH rows of width counters, per CPU, in lines
 * of OLCD_FAIR_LINE (one cache line each, and one per-CPU pointer per line
 * rather than per counter), each line half of one row and half of the
 * other (olcd_fair_select). The max_entries is a placeholder: the loader
 * sets DEPTH * width / LINE. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * 4096 / OLCD_FAIR_LINE);
	__type(key, __u32);
	__type(value, struct olcd_fair_line);
} olcd_fair_cm SEC(".maps");

/* Per stats slot and CPU: the fair share, the port's total, capped. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1025);
	__type(key, __u32);
	__type(value, struct olcd_fair_slot);
} olcd_fair_slots SEC(".maps");

/* Static caps: [stats slot] the port's, [max_ports + 1 ..] the source
 * prefixes' (olcd_cap_src values). Shared by the CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1025 + 1024);
	__type(key, __u32);
	__type(value, struct olcd_cap);
} olcd_caps SEC(".maps");

/* olcd_capped's verdicts: refused by a static cap (counted capped, which
 * the law reads as neither demand nor shed), or by the law's ceiling. */
#define OLCD_CAPPED 1
#define OLCD_CEILED 2

/* The ceilings on requests in flight: [stats slot]. Its own map, not a
 * field of olcd_cap: the daemon rewrites it while the law sheds. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1025);
	__type(key, __u32);
	__type(value, struct olcd_ceiling);
} olcd_ceil SEC(".maps");

/* Source prefix caps: (slot, prefix) -> index into olcd_caps. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct olcd_cap_key);
	__type(value, __u32);
} olcd_cap_src SEC(".maps");

/* The largest count a counter holds. */
#define OLCD_FAIR_COUNT_MAX ((1U << (32 - OLCD_FAIR_EPOCH_BITS)) - 1)
#define OLCD_FAIR_EPOCH_MASK ((1U << OLCD_FAIR_EPOCH_BITS) - 1)

/* The epoch now (its low OLCD_FAIR_EPOCH_BITS), from the clock of the
 * heartbeat verdict (olcd_control.fresh_ns), which the caller brought up to
 * date: no helper call. */
static __always_inline __u32 olcd_fair_epoch(const struct olcd_control *ctl)
{
	__u64 now = olcd_fair.test_now_ns;

	if (!now)
		now = ctl->fresh_ns;
	return (__u32)(now >> (olcd_fair.epoch_shift & 63)) & OLCD_FAIR_EPOCH_MASK;
}

/* Bring a counter to epoch ep (halving it once per epoch since it was last
 * touched), count one, and return the count. */
static __always_inline __u32 olcd_fair_bump(__u32 *c, __u32 ep)
{
	__u32 v = *c;
	__u32 d = (ep - v) & OLCD_FAIR_EPOCH_MASK;
	__u32 n = v >> OLCD_FAIR_EPOCH_BITS;

	n = d >= 32 - OLCD_FAIR_EPOCH_BITS ? 0 : n >> d;
	n += n < OLCD_FAIR_COUNT_MAX;
	*c = n << OLCD_FAIR_EPOCH_BITS | ep;
	return n;
}

/* The network-order mask of the first bits of a 32-bit word, bits 0..32
 * (as a signed count: below 0 is 0, above 32 is 32). */
static __always_inline __u32 olcd_fair_mask(int bits)
{
	if (bits <= 0)
		return 0;
	if (bits >= 32)
		return 0xffffffff;
	return bpf_htonl(0xffffffffU << (32 - bits));
}

/*
 * The sketch's hash of a source prefix on a port (slot): the address
 * masked to the port's prefix length and the slot, xored with the seed and
 * multiplied by an odd constant (Knuth's multiplicative hashing, as
 * olcd_syn_fp); an IPv6 prefix is two 64-bit words, each with its own
 * constant. An IPv4 source fits one word with its slot: one multiply. Only
 * the high half is used (olcd_fair_select): each of its bits depends on
 * every bit of the key below it, so every bit of the address is in the
 * key's low 32.
 */
static __always_inline __u64 olcd_fair_hash(const struct olcd_src *src, __u32 slot,
					    const struct olcd_policy *pol)
{
	__u64 seed = olcd_fair.seed;

	if (src->ipv6) {
		__u32 w[4];
		__u64 x0, x1;
		int len = pol->fair_prefix6;

		__builtin_memcpy(w, src->k6.addr, sizeof(w));
		w[0] &= olcd_fair_mask(len);
		w[1] &= olcd_fair_mask(len - 32);
		w[2] &= olcd_fair_mask(len - 64);
		w[3] &= olcd_fair_mask(len - 96);
		/* Each word's high half folded into its low one: a bit of
		 * the product depends only on the key's bits at or below it,
		 * and the line is picked by bits from 32. */
		x0 = (__u64)(w[0] ^ w[1]) | (__u64)w[1] << 32;
		x1 = ((__u64)(w[2] ^ w[3]) | (__u64)w[3] << 32) ^ ((__u64)slot << 33 | 1);
		return ((x0 ^ seed) * 0x9e3779b97f4a7c15ULL) ^
		       ((x1 ^ seed) * 0xbf58476d1ce4e5b9ULL);
	}
	__u32 a;

	/* The prefix mask without a branch: the loader keeps fair_prefix4
	 * in 1..32, and (2^64 - 2^32) >> len has len ones at the top of its
	 * low word. */
	__builtin_memcpy(&a, src->k4.addr, sizeof(a));
	a &= bpf_htonl((__u32)(0xffffffff00000000ULL >> (pol->fair_prefix4 & 63)));
	return (((__u64)slot << 33 | a) ^ seed) * 0x9e3779b97f4a7c15ULL;
}

/*
 * Whether fair shedding selects this new connection, 0 or 1, for a drop
 * probability p > 0 of a fair port (slot *pi) whose source is src (valid),
 * with the uniform draw u (olcd_draw). fs: the port's state on this CPU.
 * Counts the source and the port first, then draws against p_src, then
 * moves the fair share one step (see the top of this file).
 *
 * The source's two counters share one line (one lookup, one cache line):
 * the line is picked by the hash's bits 32 and up, one counter in each
 * half of it by bits 61..63 and 58..60. Each half of every line together
 * is a row of the count-min sketch (width counters), and the two indices
 * of a source come from disjoint bits of the hash whatever the width
 * (at most 2^20: line bits 32..48).
 */
static __always_inline __u32 olcd_fair_select(const struct olcd_policy *pol, __u32 *pi, __u32 u,
					      __u32 p, const struct olcd_src *src,
					      struct olcd_fair_slot *fs)
{
	__u32 ep = olcd_fair_epoch(&olcd_ctl);
	__u64 h = olcd_fair_hash(src, *pi, pol), f, d, share;
	__u32 k, m, m1, t, act;
	struct olcd_fair_line *l;
	__s32 debt;

	/* Lines: DEPTH * width / LINE = (width_mask + 1) / (LINE / 2). */
	k = (__u32)(h >> 32) & (olcd_fair.width_mask / (OLCD_FAIR_LINE / 2));
	l = bpf_map_lookup_elem(&olcd_fair_cm, &k);
	if (!l)
		return 0;
	m = olcd_fair_bump(&l->c[h >> 61], ep);
	m1 = olcd_fair_bump(&l->c[OLCD_FAIR_LINE / 2 + ((h >> 58) & (OLCD_FAIR_LINE / 2 - 1))], ep);
	m = m < m1 ? m : m1;
	t = olcd_fair_bump(&fs->total, ep);
	share = fs->share;
	if (!share)
		share = (__u32)~p; /* a slot's first shed: 1 - p, one source's fair share */

	/* Drop when u / 2^32 < 1 - fair * T / m, i.e. u * m < (m - fair * T) * 2^32:
	 * products below 2^56, no division. The borrow is the outcome, used
	 * arithmetically (see olcd_select). */
	f = (share * t) >> 32;
	d = m > f ? m - f : 0;
	d = ((__u64)u * m) - (d << 32);
	barrier_var(d);
	act = d >> 63;

	/* The step: on a drop + share * (1 - p) / 2^K, on a pass - share * p / 2^K,
	 * as share - share * p / 2^K + act * (share / 2^K + 1). */
	share = share - ((share * p) >> (32 + OLCD_FAIR_STEP_SHIFT)) +
		act * ((share >> OLCD_FAIR_STEP_SHIFT) + 1);
	if (share > 0xffffffff)
		share = 0xffffffff;
	if (share < (1ULL << (32 - OLCD_FAIR_FLOOR_SHIFT)))
		share = 1ULL << (32 - OLCD_FAIR_FLOOR_SHIFT);
	fs->share = (__u32)share;

	/* Never less than the controller's shed: a pass while DEBT_MAX drops
	 * are owed is dropped. The step above took the fair verdict, so it
	 * settles where the fair verdicts alone shed p and this rarely acts;
	 * until then (an onset, a new mix of sources) the port sheds p all
	 * the same. A shed ahead of p is forgiven down to -DEBT_MAX, not
	 * paid back with passes: those would go only to the sources above
	 * the fair share, and the step corrects it anyway. */
	debt = fs->debt + (__s32)(p >> OLCD_FAIR_DEBT_SHIFT);
	act |= debt >= OLCD_FAIR_DEBT_MAX << OLCD_FAIR_DEBT_SHIFT;
	debt -= (__s32)(act << OLCD_FAIR_DEBT_SHIFT);
	if (debt < -(OLCD_FAIR_DEBT_MAX << OLCD_FAIR_DEBT_SHIFT))
		debt = -(OLCD_FAIR_DEBT_MAX << OLCD_FAIR_DEBT_SHIFT);
	fs->debt = debt;
	return act;
}

/*
 * Take a token from a cap at the clock now (ns): 1 admitted, 0 refused.
 * GCRA: refused while the theoretical arrival time is more than burst_ns
 * ahead of now; an admission moves it to max(it, now) + ns_per_token with
 * a compare-and-swap, tried twice, so that two CPUs never spend one token
 * twice (a second lost race refuses: the other CPU took the token).
 */
static __always_inline __u32 olcd_cap_take(struct olcd_cap *c, __u64 now)
{
	__u64 per = c->ns_per_token, tat = c->tat_ns, next, old;

	if (!per)
		return 1;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if ((__s64)(tat - now) > (__s64)c->burst_ns)
			return 0;
		next = ((__s64)(tat - now) < 0 ? now : tat) + per;
		old = __sync_val_compare_and_swap(&c->tat_ns, tat, next);
		if (old == tat)
			return 1;
		tat = old;
	}
	return 0;
}

/*
 * The requests in flight a ceiling counts: its slot's requests started less
 * those answered and abandoned, over every CPU's row (a request started on
 * one CPU may be answered on another: only the sum is meaningful). One
 * array lookup per CPU, made only for new work on a port under a ceiling.
 * A global function, verified once on its own: inlined, the verifier would
 * follow the rest of the program from each of the loop's exits.
 * key: the slot's row on CPU 0; stride: slots per CPU.
 */
__noinline __u32 olcd_inflight(__u32 key, __u32 cpus, __u32 stride)
{
	__u32 n = 0;

	for (__u32 i = 0; i < OLCD_CEIL_MAX_CPUS; i++) {
		struct olcd_resp_hist *h;

		if (i >= cpus)
			break;
		h = bpf_map_lookup_elem(&olcd_rhist, &key);
		if (h)
			n += h->requests - h->responses - h->abandoned;
		key += stride;
	}
	return (__s32)n > 0 ? n : 0;
}

/*
 * Whether a cap refuses this new work of port *pi from src: 0, or
 * OLCD_CAPPED (a static cap) or OLCD_CEILED (the adaptive law's ceiling).
 * The ceiling on requests in flight first, then the source's prefix bucket,
 * then the port's. A source refused spends no port token; one the port
 * refuses has spent its source's.
 */
static __always_inline __u32 olcd_capped(const struct olcd_policy *pol, __u32 *pi,
					 const struct olcd_src *src, __u64 now)
{
	__u8 caps = pol->caps;
	struct olcd_cap *c;

	if (caps & OLCD_CAP_INFLIGHT) {
		const struct olcd_ceiling *ceil = bpf_map_lookup_elem(&olcd_ceil, pi);

		if (ceil && (ceil->cap | ceil->law)) {
			__u32 n = olcd_inflight(ceil->hist_slot, ceil->cpus, olcd_rctl.hist_slots);

			if (ceil->cap && n >= ceil->cap)
				return OLCD_CAPPED;
			if (ceil->law && n >= ceil->law && bpf_get_prandom_u32() >= ceil->floor)
				return OLCD_CEILED;
		}
	}
	if ((caps & OLCD_CAP_SOURCES) && src->valid) {
		struct olcd_cap_key k = {};
		__u32 *idx;

		k.prefixlen = 32 + 128;
		k.slot = (__u16)*pi;
		if (src->ipv6) {
			__builtin_memcpy(k.addr, src->k6.addr, 16);
		} else {
			k.addr[10] = 0xff;
			k.addr[11] = 0xff;
			__builtin_memcpy(&k.addr[12], src->k4.addr, 4);
		}
		idx = bpf_map_lookup_elem(&olcd_cap_src, &k);
		if (idx) {
			c = bpf_map_lookup_elem(&olcd_caps, idx);
			if (c && !olcd_cap_take(c, now))
				return OLCD_CAPPED;
		}
	}
	if (caps & OLCD_CAP_RATE) {
		c = bpf_map_lookup_elem(&olcd_caps, pi);
		if (c && !olcd_cap_take(c, now))
			return OLCD_CAPPED;
	}
	return 0;
}

#endif /* OLCD_FAIR_H */
