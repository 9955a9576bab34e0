/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Response timing: pairs each request on a protected port with its answer
 * on the wire, in the kernel, for any server.
 *
 * Ingress (olcd_xdp, olcd_tc) sees the client's segments, TC egress
 * (olcd_tc_egress) the server's. The first payload byte from the client on
 * a flow with no request outstanding starts a timer; the first payload byte
 * the server sends after it (at or past the sequence number the request
 * acknowledged) stops it, into the port's histogram. In between, further
 * client data (the rest of the request, pipelined requests, HTTP/2 streams)
 * starts nothing: the oldest outstanding request is the one timed. Client
 * data below what the server has acknowledged in an answer is a
 * retransmit and restarts nothing; server data before any request (SMTP,
 * MySQL greetings) or below the acknowledged point answers nothing. RST
 * and FIN forget the flow, a request still waiting counted abandoned (a
 * client that times out closes), but a FIN in the segment that carries the
 * request (a half-close after it) keeps the timer. Pure ACKs never get here
 * (olcd_parse_seg). UDP on a protected port pairs a passed datagram in with
 * the next one out on the same 4-tuple.
 *
 * Cost. A flow is sampled or not by its hash (olcd_flow_hash in parse.h,
 * the same both ways), decided in the parser, so an unsampled segment
 * costs two port loads, the hash and a compare, no map lookup; the flow table is a set-associative array (olcd_flow_set) and the
 * clock is read once per start and once per stop. Pairing by sequence
 * numbers rather than TCP timestamps (pping, xdp-project/bpf-examples) works
 * without the timestamp option and times the server, not the path.
 */
#ifndef OLCD_RESP_H
#define OLCD_RESP_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "olcd.h"
#include "maps.h"
#include "parse.h"

/* Response statistics per histogram slot ([0] unused), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct olcd_resp_hist);
} olcd_rhist SEC(".maps");

/* The flow table (struct olcd_flow_set); sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct olcd_flow_set);
} olcd_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct olcd_flow_counters);
} olcd_fstats SEC(".maps");


/* The port's histogram slot, 0 when it is not timed. proto_idx:
 * OLCD_INDEX_TCP or OLCD_INDEX_UDP. */
static __always_inline __u32 olcd_resp_port(__u32 proto_idx, __u32 port)
{
	return ((__u16 *)olcd_rports.slot)[(proto_idx & 1) << 16 | (port & 0xffff)];
}

static __always_inline __u64 olcd_resp_now(void)
{
	__u64 t = olcd_rctl.test_now_ns;

	return t ? t : bpf_ktime_get_ns();
}

/* The histogram bucket of a duration (see enum olcd_resp_geometry). */
static __always_inline __u32 olcd_hist_bucket(__u64 ns)
{
	__u64 v = ns >> OLCD_HIST_UNIT_SHIFT;
	__u32 x, e = 0;

	if (v < (1 << OLCD_HIST_SUB_BITS))
		return (__u32)v;
	if (v >= (1ULL << OLCD_HIST_MAX_LOG2))
		return OLCD_HIST_BUCKETS - 1;
	x = (__u32)v;
	/* floor(log2 x), x < 2^26: no count-leading-zeros in eBPF. */
	if (x >> 16) {
		e += 16;
		x >>= 16;
	}
	if (x >> 8) {
		e += 8;
		x >>= 8;
	}
	if (x >> 4) {
		e += 4;
		x >>= 4;
	}
	if (x >> 2) {
		e += 2;
		x >>= 2;
	}
	if (x >> 1)
		e += 1;
	return ((e - OLCD_HIST_SUB_BITS + 1) << OLCD_HIST_SUB_BITS) +
	       (((__u32)v >> (e - OLCD_HIST_SUB_BITS)) & ((1 << OLCD_HIST_SUB_BITS) - 1));
}

/* Count a request given up on (its slot's abandoned counter). */
static __always_inline void olcd_resp_abandon(__u32 slot)
{
	struct olcd_resp_hist *h = bpf_map_lookup_elem(&olcd_rhist, &slot);

	if (h)
		h->abandoned += 1;
}

static __always_inline struct olcd_flow_counters *olcd_fcount(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&olcd_fstats, &zero);
}

/* Forget way w of set; an outstanding request is abandoned. */
static __always_inline void olcd_flow_forget(struct olcd_flow_set *set, __u32 w)
{
	struct olcd_flow_counters *fc;

	w &= OLCD_FLOW_WAYS - 1;
	if (set->start_ns[w])
		olcd_resp_abandon(set->slot[w]);
	set->tag[w] = 0;
	set->start_ns[w] = 0;
	fc = olcd_fcount();
	if (fc)
		fc->forgotten += 1;
}

/* The way of set holding tag, or OLCD_FLOW_WAYS. */
static __always_inline __u32 olcd_flow_find(const struct olcd_flow_set *set, __u32 tag)
{
#pragma unroll
	for (int w = 0; w < OLCD_FLOW_WAYS; w++)
		if (set->tag[w] == tag)
			return w;
	return OLCD_FLOW_WAYS;
}

/* Start the timer of way w. */
static __always_inline void olcd_flow_start(struct olcd_flow_set *set, __u32 w,
					    const struct olcd_pkt *pkt, __u64 now, __u32 slot)
{
	struct olcd_resp_hist *h;

	w &= OLCD_FLOW_WAYS - 1;
	set->start_ns[w] = now;
	set->stamp[w] = (__u32)(now >> 20);
	set->cseq[w] = pkt->seg_seq + pkt->seg_len;
	set->sack[w] = pkt->seg_ack;
	set->slot[w] = (__u16)slot;
	h = bpf_map_lookup_elem(&olcd_rhist, &slot);
	if (h)
		h->requests += 1;
}

/*
 * A new flow's way: an empty one, else one idle past idle_units, else the
 * least recently used (an outstanding request there is abandoned).
 */
static __always_inline __u32 olcd_flow_victim(struct olcd_flow_set *set, __u32 now)
{
	struct olcd_flow_counters *fc;
	__u32 victim = 0, oldest = 0, age;

#pragma unroll
	for (int w = 0; w < OLCD_FLOW_WAYS; w++) {
		if (set->tag[w] == 0)
			return w;
		age = now - set->stamp[w];
		if (age >= oldest) {
			oldest = age;
			victim = w;
		}
	}
	victim &= OLCD_FLOW_WAYS - 1;
	if (set->start_ns[victim])
		olcd_resp_abandon(set->slot[victim]);
	fc = olcd_fcount();
	if (fc) {
		if (oldest > olcd_rctl.idle_units)
			fc->expired += 1;
		else
			fc->evictions += 1;
	}
	return victim;
}

/* The set of a sampled flow of hash h, and its tag. */
static __always_inline struct olcd_flow_set *olcd_flow_set_of(__u64 h, __u32 *tag)
{
	__u32 idx = (__u32)(h >> 32) & olcd_rctl.sets_mask;

	*tag = (__u32)h | 1;
	return bpf_map_lookup_elem(&olcd_flows, &idx);
}

/*
 * The sample: the flow's hash if the segment's port is timed (*slot) and
 * its flow sampled, else 0. TCP segments come sampled from the parser
 * (olcd_parse_seg), which leaves an unsampled flow's segments out before
 * reading more of them; UDP datagrams are hashed here. Inlined into the
 * entry points; the rest is a subprogram (olcd_resp_in, olcd_resp_out),
 * which keeps its registers out of the SYN path's.
 */
static __always_inline __u64 olcd_resp_sampled(const struct olcd_pkt *pkt, __u32 proto_idx, int in,
					       __u32 *slot)
{
	__u32 port;
	__u64 h;

	if (in) {
		port = pkt->dport;
	} else {
		__u16 sp;

		__builtin_memcpy(&sp, &pkt->seg_ports, sizeof(sp)); /* source port, as on the wire */
		port = bpf_ntohs(sp);
	}
	*slot = olcd_resp_port(proto_idx, port);
	if (!*slot)
		return 0;
	if (proto_idx == OLCD_INDEX_TCP)
		return pkt->seg_hash;
	h = olcd_flow_hash(pkt->seg_src, pkt->seg_dst, pkt->seg_ports, olcd_rctl.seed);
	if ((__u32)(h >> 32) > olcd_rctl.sample_max)
		return 0;
	return h | 1;
}

/*
 * A client segment (ingress) with payload, FIN or RST to a timed TCP port,
 * or a passed UDP datagram (every datagram is a request), of a sampled
 * flow of hash fh; pi: the port's histogram slot.
 */
static __noinline void olcd_resp_in(const struct olcd_pkt *pkt, __u32 proto_idx, __u64 fh, __u32 pi)
{
	struct olcd_flow_set *set;
	struct olcd_resp_hist *h;
	__u32 tag, w, flags = pkt->seg_flags;
	__u64 now;

	set = olcd_flow_set_of(fh, &tag);
	if (!set)
		return;
	w = olcd_flow_find(set, tag);
	if (proto_idx == OLCD_INDEX_TCP) {
		if (flags & OLCD_TCP_RST) {
			if (w < OLCD_FLOW_WAYS)
				olcd_flow_forget(set, w);
			return;
		}
		if (w < OLCD_FLOW_WAYS) {
			w &= OLCD_FLOW_WAYS - 1;
			if ((flags & OLCD_TCP_FIN) && !pkt->seg_len) {
				/* Closed: a request still waiting was given up on
				 * (a client timing out closes). */
				olcd_flow_forget(set, w);
				return;
			}
			if (set->start_ns[w])
				return; /* more of it, or a later request: the oldest is timed */
			if (pkt->seg_len && (__s32)(pkt->seg_seq + pkt->seg_len - set->cseq[w]) <= 0) {
				/* All of it answered already: a retransmit (a
				 * segment with new bytes after old ones is new). */
				h = bpf_map_lookup_elem(&olcd_rhist, &(__u32){set->slot[w]});
				if (h)
					h->retransmits += 1;
				return;
			}
			if (!pkt->seg_len)
				return;
			olcd_flow_start(set, w, pkt, olcd_resp_now(), pi);
			return;
		}
		if (!pkt->seg_len)
			return; /* FIN of a flow not tracked */
	} else if (w < OLCD_FLOW_WAYS) {
		if (set->start_ns[w & (OLCD_FLOW_WAYS - 1)])
			return;
		olcd_flow_start(set, w, pkt, olcd_resp_now(), pi);
		return;
	}
	/* A new flow's first request. */
	now = olcd_resp_now();
	w = olcd_flow_victim(set, (__u32)(now >> 20));
	w &= OLCD_FLOW_WAYS - 1;
	set->tag[w] = tag;
	olcd_flow_start(set, w, pkt, now, pi);
	{
		struct olcd_flow_counters *fc = olcd_fcount();

		if (fc)
			fc->inserts += 1;
	}
}

/*
 * A server segment (egress) with payload, FIN or RST from a timed TCP
 * port, or a UDP datagram from a timed UDP port, of a sampled flow of hash
 * fh.
 */
static __noinline void olcd_resp_out(const struct olcd_pkt *pkt, __u32 proto_idx, __u64 fh)
{
	struct olcd_flow_set *set;
	struct olcd_resp_hist *h;
	__u32 tag, w, slot, flags = pkt->seg_flags;
	__u64 start, now;

	set = olcd_flow_set_of(fh, &tag);
	if (!set)
		return;
	w = olcd_flow_find(set, tag);
	if (w >= OLCD_FLOW_WAYS)
		return; /* nothing asked on this flow: a greeting, or not tracked */
	w &= OLCD_FLOW_WAYS - 1;
	if (proto_idx == OLCD_INDEX_TCP && (flags & OLCD_TCP_RST)) {
		olcd_flow_forget(set, w);
		return;
	}
	start = set->start_ns[w];
	if (start && (proto_idx != OLCD_INDEX_TCP ||
		      (pkt->seg_len && (__s32)(pkt->seg_seq - set->sack[w]) >= 0))) {
		now = olcd_resp_now();
		slot = set->slot[w];
		set->start_ns[w] = 0;
		set->stamp[w] = (__u32)(now >> 20);
		if (proto_idx == OLCD_INDEX_TCP &&
		    (__s32)(pkt->seg_ack - set->cseq[w]) > 0)
			set->cseq[w] = pkt->seg_ack; /* the server has all of the request */
		h = bpf_map_lookup_elem(&olcd_rhist, &slot);
		if (h) {
			__u32 b = olcd_hist_bucket(now - start);

			/* The bound is true already; the verifier cannot tell. */
			barrier_var(b);
			h->responses += 1;
			if (b < OLCD_HIST_BUCKETS)
				h->bucket[b] += 1;
		}
	}
	if (proto_idx == OLCD_INDEX_TCP && (flags & OLCD_TCP_FIN))
		olcd_flow_forget(set, w);
}

/* Entry points' calls: the sample inline, the rest a subprogram. */
static __always_inline void olcd_resp_ingress(const struct olcd_pkt *pkt, __u32 proto_idx)
{
	__u32 slot;
	__u64 h = olcd_resp_sampled(pkt, proto_idx, 1, &slot);

	if (h)
		olcd_resp_in(pkt, proto_idx, h, slot);
}

/* A passed UDP datagram in: all of it a subprogram, so that the new
 * connections' path it follows keeps its registers. */
static __noinline void olcd_resp_udp_in(const struct olcd_pkt *pkt)
{
	olcd_resp_ingress(pkt, OLCD_INDEX_UDP);
}

static __always_inline void olcd_resp_egress(const struct olcd_pkt *pkt, __u32 proto_idx)
{
	__u32 slot;
	__u64 h = olcd_resp_sampled(pkt, proto_idx, 0, &slot);

	if (h)
		olcd_resp_out(pkt, proto_idx, h);
}

#endif /* OLCD_RESP_H */
