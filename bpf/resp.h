/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Response timing: pairs each request on a protected port with its answer
 * on the wire, in the kernel, for any server.
 *
 * Ingress (olcd_xdp, olcd_tc) sees the client's segments, TC egress
 * (olcd_tc_egress) the server's. The first payload byte from the client on
 * a flow with no request outstanding starts a timer; the first payload byte
 * the server sends after it (at or past the sequence number the request
 * acknowledged, in a segment that acknowledges the request: not the rest
 * of an earlier answer still streaming when a pipelined request came)
 * stops it, into the port's histogram. In between, further
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
 * the same both ways, one multiply for IPv4), decided in the parser before
 * the payload length, so an unsampled segment of a timed port costs two
 * port loads, the hash and a compare, and no map lookup; only a sampled
 * one mixes the hash again for the flow table (olcd_flow_mix), a
 * set-associative array (olcd_flow_set); the clock is read once per start
 * and once per stop. Pairing by sequence
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

/*
 * Response statistics per CPU and histogram slot ([cpu][slot], slot 0
 * unused), sized by the loader. A plain array the loader maps into its
 * memory rather than a per-CPU one: it reads a CPU's counters without a
 * syscall, and its buckets only when they moved, where a per-CPU array is
 * copied out whole (1.5 KB a port and CPU) by every read.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_MMAPABLE);
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

/* This CPU's statistics of a histogram slot (NULL past the map: a slot or
 * a CPU it was not sized for). */
static __always_inline struct olcd_resp_hist *olcd_rhist_of(__u32 slot)
{
	__u32 key = bpf_get_smp_processor_id() * olcd_rctl.hist_slots + slot;

	return bpf_map_lookup_elem(&olcd_rhist, &key);
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
	struct olcd_resp_hist *h = olcd_rhist_of(slot);

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

/*
 * A segment or datagram of a sampled flow, as the flow table takes it:
 * copied out of struct olcd_pkt by the entry point's call, so that the
 * packet's record is never handed to a subprogram and the compiler may keep
 * it in registers (olcd.c, "Register economy").
 */
struct olcd_seg {
	__u64 hash; /* olcd_flow_hash | 1 */
	__u32 slot; /* ingress: the histogram slot of the port asked */
	/* TCP: sequence and acknowledgment numbers, payload bytes, flags;
	 * UDP: 0. */
	__u32 seq;
	__u32 ack;
	__u32 len;
	__u32 flags;
	/* Ingress TCP, for the request gate (olcd_gate): the server's port,
	 * the IP header's offset in the frame, 1 for IPv6. */
	__u32 dport;
	__u32 l3off;
	__u32 ipv6;
};

/* What the request gate decides for a request start (olcd_gate in olcd.c,
 * after the helpers it shares with the new connections' decision). */
enum olcd_gate_verdict {
	OLCD_GATE_PASS = 0,
	OLCD_GATE_RESET = 1, /* reset the connection at this boundary (gate.h) */
};

static __always_inline int olcd_gate(const struct olcd_seg *sg, void *data, void *data_end,
				     struct olcd_resp_hist *h);

/* Start the timer of way w; h: the statistics of sg's slot on this CPU
 * (may be NULL). */
static __always_inline void olcd_flow_start(struct olcd_flow_set *set, __u32 w,
					    const struct olcd_seg *sg, __u64 now,
					    struct olcd_resp_hist *h)
{
	w &= OLCD_FLOW_WAYS - 1;
	set->start_ns[w] = now;
	set->stamp[w] = (__u32)(now >> 20);
	set->cseq[w] = sg->seq + sg->len;
	set->sack[w] = sg->ack;
	/* No server acknowledgment seen yet for this request: the request's
	 * own start, which the gate never matches (a later request starts
	 * past it). */
	set->srack[w] = sg->seq;
	set->slot[w] = (__u16)sg->slot;
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

/* Odd multiplier of olcd_flow_mix (splitmix64's second). */
#define OLCD_FH_K3 0x94d049bb133111ebULL

/*
 * The sample hash (olcd_flow_hash) mixed again, for a sampled flow only:
 * the low half of a product depends on the low bits of its input alone
 * (IPv4: the addresses, not the ports), so the tag and the set need every
 * bit moved into both halves.
 */
static __always_inline __u64 olcd_flow_mix(__u64 h)
{
	h ^= h >> 29;
	h *= OLCD_FH_K3;
	return h ^ (h >> 32);
}

/* The set of a sampled flow of (sample) hash h, and its tag. */
static __always_inline struct olcd_flow_set *olcd_flow_set_of(__u64 h, __u32 *tag)
{
	__u64 m = olcd_flow_mix(h);
	__u32 idx = (__u32)(m >> 32) & olcd_rctl.sets_mask;

	*tag = (__u32)m | 1;
	return bpf_map_lookup_elem(&olcd_flows, &idx);
}

/*
 * A client segment (ingress) with payload, FIN or RST to a timed TCP port,
 * or a passed UDP datagram (every datagram is a request), of a sampled
 * flow. A request that starts on a flow in the table with nothing
 * outstanding (no request waiting for its answer, every answer byte
 * acknowledged by the client, the segment starting exactly at the server's
 * last acknowledgment: nothing else queued before it) goes to the request
 * gate (olcd_gate). Returns an olcd_gate_verdict; OLCD_GATE_RESET: the flow
 * is forgotten and the hook resets the connection. data, data_end: the
 * frame (TCP; NULL for UDP), for the gate's exception prefixes.
 */
static __noinline int olcd_resp_in(const struct olcd_seg *sg, __u32 proto_idx, void *data,
				   void *data_end)
{
	struct olcd_flow_set *set;
	struct olcd_resp_hist *h;
	__u32 tag, w, flags = sg->flags;
	__u64 now;

	set = olcd_flow_set_of(sg->hash, &tag);
	if (!set)
		return OLCD_GATE_PASS;
	w = olcd_flow_find(set, tag);
	if (proto_idx == OLCD_INDEX_TCP) {
		if (flags & OLCD_TCP_RST) {
			if (w < OLCD_FLOW_WAYS)
				olcd_flow_forget(set, w);
			return OLCD_GATE_PASS;
		}
		if (w < OLCD_FLOW_WAYS) {
			w &= OLCD_FLOW_WAYS - 1;
			if ((flags & OLCD_TCP_FIN) && !sg->len) {
				/* Closed: a request still waiting was given up on
				 * (a client timing out closes). */
				olcd_flow_forget(set, w);
				return OLCD_GATE_PASS;
			}
			if (set->start_ns[w])
				return OLCD_GATE_PASS; /* more of it, or a later request: the oldest is timed */
			if (sg->len && (__s32)(sg->seq + sg->len - set->cseq[w]) <= 0) {
				/* All of it answered already: a retransmit (a
				 * segment with new bytes after old ones is new). */
				h = olcd_rhist_of(set->slot[w]);
				if (h)
					h->retransmits += 1;
				return OLCD_GATE_PASS;
			}
			if (!sg->len)
				return OLCD_GATE_PASS;
			/* A request start on an existing connection. */
			h = olcd_rhist_of(sg->slot);
			if (h) {
				h->reused += 1;
				if (sg->seq == set->srack[w] && sg->ack == set->sack[w] &&
				    olcd_gate(sg, data, data_end, h) == OLCD_GATE_RESET) {
					olcd_flow_forget(set, w);
					return OLCD_GATE_RESET;
				}
			}
			olcd_flow_start(set, w, sg, olcd_resp_now(), h);
			return OLCD_GATE_PASS;
		}
		if (!sg->len)
			return OLCD_GATE_PASS; /* FIN of a flow not tracked */
	} else if (w < OLCD_FLOW_WAYS) {
		if (set->start_ns[w & (OLCD_FLOW_WAYS - 1)])
			return OLCD_GATE_PASS;
		olcd_flow_start(set, w, sg, olcd_resp_now(), olcd_rhist_of(sg->slot));
		return OLCD_GATE_PASS;
	}
	/* A new flow's first request. */
	now = olcd_resp_now();
	w = olcd_flow_victim(set, (__u32)(now >> 20));
	w &= OLCD_FLOW_WAYS - 1;
	set->tag[w] = tag;
	olcd_flow_start(set, w, sg, now, olcd_rhist_of(sg->slot));
	{
		struct olcd_flow_counters *fc = olcd_fcount();

		if (fc)
			fc->inserts += 1;
	}
	return OLCD_GATE_PASS;
}

/*
 * A server segment (egress) with payload, FIN or RST from a timed TCP
 * port, or a UDP datagram from a timed UDP port, of a sampled flow.
 */
static __noinline void olcd_resp_out(const struct olcd_seg *sg, __u32 proto_idx)
{
	struct olcd_flow_set *set;
	struct olcd_resp_hist *h;
	__u32 tag, w, slot, flags = sg->flags;
	__u64 start, now;

	set = olcd_flow_set_of(sg->hash, &tag);
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
	if (start &&
	    (proto_idx != OLCD_INDEX_TCP || (sg->len && (__s32)(sg->seq - set->sack[w]) >= 0 &&
					     (__s32)(sg->ack - set->cseq[w]) >= 0))) {
		now = olcd_resp_now();
		slot = set->slot[w];
		set->start_ns[w] = 0;
		set->stamp[w] = (__u32)(now >> 20);
		if (proto_idx == OLCD_INDEX_TCP && (__s32)(sg->ack - set->cseq[w]) > 0)
			set->cseq[w] = sg->ack; /* the server has all of the request */
		h = olcd_rhist_of(slot);
		if (h) {
			__u32 b = olcd_hist_bucket(now - start);

			/* The bound is true already; the verifier cannot tell. */
			barrier_var(b);
			if (b < OLCD_HIST_BUCKETS)
				h->bucket[b] += 1;
			/* After the bucket: the loader reads a CPU's buckets
			 * only when its count moved (resp.go). */
			barrier();
			h->responses += 1;
		}
	}
	if (proto_idx == OLCD_INDEX_TCP && (flags & OLCD_TCP_FIN)) {
		olcd_flow_forget(set, w);
		return;
	}
	if (proto_idx == OLCD_INDEX_TCP && !set->start_ns[w]) {
		/* Nothing outstanding (or its answer just began): the marks the
		 * request gate compares, the server's data end and its
		 * acknowledgment, each only forward (wrap-safe). */
		__u32 end = sg->seq + sg->len;

		if ((__s32)(end - set->sack[w]) > 0)
			set->sack[w] = end;
		if ((__s32)(sg->ack - set->srack[w]) > 0)
			set->srack[w] = sg->ack;
	}
}

/*
 * The entry points' calls. A TCP segment (OLCD_P_SEGMENT) comes sampled
 * from the parser (olcd_parse_seg); a UDP datagram is sampled here, in a
 * subprogram of its own, so that the new connections' path it follows
 * keeps its registers. Each call copies what the flow table needs (struct
 * olcd_seg).
 */
static __always_inline int olcd_resp_ingress(const struct olcd_pkt *pkt, void *data, void *data_end)
{
	struct olcd_seg sg = {
		.hash = pkt->seg_hash,
		.slot = pkt->seg_slot,
		.seq = pkt->seg_seq,
		.ack = pkt->seg_ack,
		.len = pkt->seg_len,
		.flags = pkt->seg_flags,
		.dport = pkt->dport,
		.l3off = pkt->l3off,
		.ipv6 = pkt->ipv6,
	};

	return olcd_resp_in(&sg, OLCD_INDEX_TCP, data, data_end);
}

static __always_inline void olcd_resp_egress(const struct olcd_pkt *pkt)
{
	struct olcd_seg sg = {
		.hash = pkt->seg_hash,
		.seq = pkt->seg_seq,
		.ack = pkt->seg_ack,
		.len = pkt->seg_len,
		.flags = pkt->seg_flags,
	};

	olcd_resp_out(&sg, OLCD_INDEX_TCP);
}

/*
 * A UDP datagram, passed in (egress 0) or sent out (1): timed when its
 * server's port (the destination in, the source out) is timed and its flow
 * sampled. addrs: olcd_flow_addrs; ports: the header's first word as read.
 */
static __noinline void olcd_resp_udp(__u64 addrs, __u32 ports, __u32 ipv6, __u32 egress)
{
	struct olcd_seg sg = {};
	__u16 src, dst;
	__u64 h;

	/* ports as on the wire: the source first. */
	__builtin_memcpy(&src, &ports, sizeof(src));
	__builtin_memcpy(&dst, (__u8 *)&ports + 2, sizeof(dst));
	sg.slot = olcd_resp_port(OLCD_INDEX_UDP, bpf_ntohs(egress ? src : dst));
	if (!sg.slot)
		return;
	h = olcd_flow_hash(addrs, ipv6, (ports ^ (ports >> 16)) & 0xffff, olcd_rctl.seed);
	if ((__u32)(h >> 32) > olcd_rctl.sample_max)
		return;
	sg.hash = h | 1;
	if (egress)
		olcd_resp_out(&sg, OLCD_INDEX_UDP);
	else
		olcd_resp_in(&sg, OLCD_INDEX_UDP, NULL, NULL);
}

#endif /* OLCD_RESP_H */
