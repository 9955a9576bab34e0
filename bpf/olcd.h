/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Types shared between the datapath and the Go loader.
 *
 * Every type here is exported to Go by bpf2go (-type), so it is declared once:
 * fixed-width fields, explicit padding, no bool and no implicit holes, so that
 * the layout is the same for bpfel and bpfeb and for every Go architecture.
 */
#ifndef OLCD_H
#define OLCD_H

#include <linux/types.h>

/* Operating mode, global (control record) and per port. The effective mode of
 * a packet is the smaller of the two, so the order matters. */
enum olcd_mode {
	OLCD_MODE_OFF = 0,     /* count only */
	OLCD_MODE_OBSERVE = 1, /* count what would be dropped or marked */
	OLCD_MODE_ENFORCE = 2, /* drop or mark */
};

/* What a protected port does with a new connection the draw selected. */
enum olcd_action {
	OLCD_ACTION_DROP = 0,
	OLCD_ACTION_MARK = 1,   /* rewrite DSCP (and skb->mark at TC), then pass */
	OLCD_ACTION_REJECT = 2, /* answer a TCP SYN with RST|ACK (reject.h); drop the rest */
};

/* Port class, stored for the daemon's read-back; the datapath does not use it. */
enum olcd_class {
	OLCD_CLASS_CRITICAL = 0,
	OLCD_CLASS_NORMAL = 1,
	OLCD_CLASS_BEST_EFFORT = 2,
};

/* olcd_control.mark_dscp: a code point, or leave the DSCP alone. */
enum olcd_dscp {
	OLCD_DSCP_MAX = 63,
	OLCD_DSCP_KEEP = 255,
};

/* IP protocol numbers of the protocols a policy can name. */
enum olcd_proto {
	OLCD_PROTO_TCP = 6,
	OLCD_PROTO_UDP = 17,
};

/* olcd_policy.flags */
enum olcd_policy_flag {
	OLCD_POLICY_PROTECTED = 1, /* the port is shed: counted, drawn, acted on */
	OLCD_POLICY_EXEMPT = 2,    /* exception port: always passed, counted exempt */
};

/*
 * Geometry of the port index (a global variable, see maps.h): two tables of
 * 65536 policy indices, TCP first, then UDP. Index 0 means "no policy".
 */
enum olcd_geometry {
	OLCD_PORTS_PER_PROTO = 65536,
	OLCD_INDEX_TCP = 0,
	OLCD_INDEX_UDP = 1,
	OLCD_INDEX_PROTOS = 2,
	/* The stats slot that collects new TCP connections to ports without a
	 * policy of their own ("other"). */
	OLCD_SLOT_OTHER = 0,
};

/*
 * One entry of the policy array. Entry 0 is the "no policy" entry, entries
 * 1..max_ports belong to ports, and the last entry is shared by exception
 * ports that have no policy of their own (flags = EXEMPT, stats to "other").
 */
struct olcd_policy {
	/* Drop probability, fixed point: drop when a uniform 32-bit draw is
	 * below drop_prob, and always when drop_prob == 0xffffffff. 0 never
	 * drops. */
	__u32 drop_prob;
	__u16 stats_slot; /* index into the stats array */
	__u8 flags;       /* enum olcd_policy_flag bits */
	__u8 mode;        /* enum olcd_mode */
	__u8 action;      /* enum olcd_action */
	__u8 class;       /* enum olcd_class */
	/* enum olcd_retx: what drop_prob applies to, as a SYN found in the
	 * dropped-SYN table (a retransmit) is told from a first attempt. */
	__u8 shed_retransmits;
	/* Non-zero: the request gate (olcd_gate in olcd.c) sheds, with the
	 * same draw, a request that starts on an established connection with
	 * nothing outstanding, by resetting the connection. TCP only; needs
	 * the port timed (resp.h): the gate reads the flow table. */
	__u8 request_gate;
	/* Non-zero: fair shedding (fair.h). While drop_prob != 0 each
	 * source's new work is counted in the sketch and the drop
	 * probability it meets grows with its share above a fair share, so
	 * that the heaviest sources are shed first; the port's total shed
	 * stays drop_prob. */
	__u8 fair;
	/* enum olcd_cap_flag bits: the static caps that apply (fair.h).
	 * Beside fair, so that one 16-bit load tells whether either is set. */
	__u8 caps;
	/* Source prefix lengths the sketch counts by: IPv4 1..32, IPv6
	 * 1..128 (fair.h). */
	__u8 fair_prefix4;
	__u8 fair_prefix6;
};

/* olcd_policy.shed_retransmits (olc.Retransmits) */
enum olcd_retx {
	OLCD_RETX_AS_FIRST = 0, /* a retransmit meets drop_prob like a first attempt */
	OLCD_RETX_SHED = 1, /* while drop_prob != 0, every retransmit is dropped without a draw */
	OLCD_RETX_LAST = 2, /* every first attempt passes; retransmits meet drop_prob */
};

/* olcd_policy.caps */
enum olcd_cap_flag {
	OLCD_CAP_RATE = 1,    /* the port's own token bucket: olcd_caps[stats slot] */
	OLCD_CAP_SOURCES = 2, /* source prefixes with a bucket of their own (olcd_cap_src) */
	/* 4 was a port closed at its static in-flight cap by the daemon
	 * (until 6 December 2026): a build that still reads it must not
	 * take a ceiling for it. */
	OLCD_CAP_INFLIGHT = 8, /* a ceiling on requests in flight: olcd_ceil[stats slot] */
};

/*
 * A port's ceilings on requests in flight (olcd_ceil, fair.h): new work is
 * refused while the requests its response timer counts in flight, summed
 * over the CPUs' rows of olcd_rhist, are at a ceiling or above. The static
 * cap's refusals are counted capped; the adaptive law's are its shed, of
 * which a share floor passes all the same, so that a count that went wrong
 * never silences the port (the law's min_pass_rate).
 */
struct olcd_ceiling {
	__u32 cap;       /* the static cap (caps.in_flight); 0: none */
	__u32 law;       /* the adaptive law's ceiling; 0: none */
	__u32 floor;     /* of what the law's refuses, the share passed, in 2^-32 */
	__u16 hist_slot; /* the port's olcd_rhist slot (1..) */
	__u16 cpus;      /* rows of olcd_rhist summed: the possible CPUs */
};

/* The most CPUs a ceiling sums (the loader sets none on a larger node;
 * loader.maxCeilingCPUs: a macro, since an enum bpf2go could export needs
 * a global in .bss, whose layout a take-over keeps). */
#define OLCD_CEIL_MAX_CPUS 1024

/*
 * Fair shedding (fair.h): a count-min sketch per CPU of DEPTH rows of
 * width counters (olcd_fair_conf.width_mask + 1, a power of two, at least
 * OLCD_FAIR_LINE), shared
 * by every fair port (the port's slot is hashed with the source). A
 * counter is its count << EPOCH_BITS | the epoch it was last brought to:
 * counts are halved once per epoch, lazily, when next touched.
 */
enum olcd_fair_geometry {
	OLCD_FAIR_DEPTH = 2,
	OLCD_FAIR_EPOCH_BITS = 8,
	/* The fair share's step per new connection, 2^-STEP_SHIFT of itself
	 * (times p or 1 - p): it settles within a few hundred new connections. */
	OLCD_FAIR_STEP_SHIFT = 5,
	/* The fair share never goes below 2^-FLOOR_SHIFT of the port's
	 * traffic (a source's share, 32-bit fixed point). */
	OLCD_FAIR_FLOOR_SHIFT = 20,
	OLCD_FAIR_LINE = 16, /* counters per map entry (a cache line) */
	/* A fair port's shed on one CPU never falls more than DEBT_MAX new
	 * connections behind p times its arrivals (olcd_fair_slot.debt, in
	 * 2^-DEBT_SHIFT of one): what an onset lets through beyond p, at
	 * most; about 5 sd of the fair verdicts' scatter around p once the
	 * step holds them there, so that then it almost never acts
	 * (docs/datapath.md, "Fair shedding"). */
	OLCD_FAIR_DEBT_MAX = 16,
	OLCD_FAIR_DEBT_SHIFT = 16,
};

/* One line of the sketch (olcd_fair_cm in fair.h). */
struct olcd_fair_line {
	__u32 c[OLCD_FAIR_LINE];
};

/* Fair shedding's knobs: a global variable (fair.h), written whole by the loader. */
struct olcd_fair_conf {
	__u64 seed;        /* sketch hash seed, random per load */
	__u64 test_now_ns; /* tests only: when not 0, the clock (ns) instead of olcd_control.fresh_ns */
	__u32 width_mask;  /* counters per row minus one (a power of two) */
	__u32 epoch_shift; /* an epoch is 2^epoch_shift ns */
};

/* Per stats slot and CPU: fair shedding's state and the cap counter. */
struct olcd_fair_slot {
	/* The fair share: a source whose estimated share of the port's new
	 * work is above it is shed with probability 1 - fair/share, one at
	 * or below it passes. 32-bit fixed point (2^32 = the whole port). */
	__u32 share;
	__u32 total;  /* the port's new work while shedding, counter format as the sketch */
	__u32 capped; /* dropped (or would be) by a static cap, of dropped / would_drop */
	/* The shed owed: p per arrival less one per drop, in 2^-DEBT_SHIFT
	 * of a new connection, kept within +-DEBT_MAX of them. */
	__s32 debt;
	__u32 ceiled; /* refused (or would be) by the law's ceiling on requests in flight */
};

/*
 * A static cap: a token bucket kept as GCRA (the generic cell rate
 * algorithm, ITU-T I.371): admit while the theoretical arrival time is at
 * most burst_ns ahead of the clock, and move it one ns_per_token forward
 * per admission. One entry per port (index: its stats slot) and per
 * source prefix cap (olcd_cap_src's value), shared by the CPUs (an atomic
 * compare-and-swap), so that the rate is the port's, not a CPU's.
 */
struct olcd_cap {
	__u64 tat_ns;       /* theoretical arrival time (olcd_control.fresh_ns clock) */
	__u64 ns_per_token; /* 1e9 / rate; 0: no cap */
	__u64 burst_ns;     /* tolerance: burst - 1 tokens ahead */
};

/* LPM trie key of the source prefix caps: the port's stats slot, then the
 * address (IPv4 as ::ffff:a.b.c.d); prefixlen counts slot and zero too. */
struct olcd_cap_key {
	__u32 prefixlen;
	__u16 slot;
	__u16 zero;
	__u8 addr[16];
};

/*
 * How the draw selects the new connections a drop probability p sheds.
 * RANDOM: each one independently with probability p (a uniform draw).
 * EVEN: exactly a share p, evenly spaced (error diffusion): the ones let
 * through arrive as regularly as the offered ones did, where independent
 * draws would make them bursty and the service queue behind the bursts.
 */
enum olcd_selection {
	OLCD_SELECT_RANDOM = 0,
	OLCD_SELECT_EVEN = 1,
};

/* The control record: a global variable (see maps.h), written whole by the loader. */
struct olcd_control {
	/* CLOCK_MONOTONIC time of the daemon's last heartbeat, ns: the clock of
	 * bpf_ktime_get_ns(). 0 = never written, which counts as stale. */
	__u64 heartbeat_ns;
	/* A heartbeat older than this fails open: nothing is dropped or marked
	 * and what would have been is counted as stale. */
	__u64 stale_after_ns;
	/* Seed of the dropped-SYN fingerprints (random per load), so that
	 * nobody can aim SYNs at one set of the table. */
	__u64 syn_seed;
	__u32 syn_sets_mask; /* sets in olcd_syns minus one (a power of two) */
	__u32 mark_fwmark;   /* skb->mark set by the mark action at TC; 0 = leave */
	__u32 prefixes4;     /* entries in the IPv4 exception trie; 0 skips it */
	__u32 prefixes6;     /* entries in the IPv6 exception trie; 0 skips it */
	__u8 mode;           /* enum olcd_mode: global mode */
	__u8 mark_dscp;      /* DSCP (0..63) the mark action writes, or OLCD_DSCP_KEEP */
	/* The last heartbeat verdict, written by the program, never set by
	 * the loader: bpf_ktime_get_ns() costs tens of ns in some VMs, more
	 * than the rest of a SYN's path, so the clock is read at most once per
	 * jiffy and the verdict reused. The loader writes the record whole
	 * with both at 0, so the next packet judges a new heartbeat (or
	 * stale-after) at once. A staleness limit of seconds is enforced to
	 * within one jiffy (<= 10 ms). */
	__u8 fresh;          /* 1: the heartbeat was within stale-after */
	__u8 selection;      /* enum olcd_selection: how the draw picks */
	__u32 fresh_jiffies; /* low 32 bits of bpf_jiffies64() at that verdict */
	/* bpf_ktime_get_ns() at that verdict, written by the program like
	 * fresh: the clock of fair shedding's epochs and of the static caps,
	 * exact to within one jiffy. */
	__u64 fresh_ns;
};

/*
 * Per-CPU counters of one stats slot. Each counted new connection is either
 * dropped or passed, so "passed" is not stored: the loader derives it as
 * new_conns - dropped (marked, would-drop, exempt and stale ones all pass).
 *
 * The counters are 32 bits wide and 8 of them make 32 bytes, to keep the
 * per-CPU footprint small (the stats map is most of olcd's memory: slots x
 * CPUs). The loader folds them into 64-bit totals modulo 2^32 often enough
 * that no CPU can wrap one in between (see internal/loader/stats.go).
 */
struct olcd_counters {
	/* TCP SYNs (no ACK/RST/FIN) and UDP requests. Also the random draw's
	 * input (olcd_draw in olcd.c): the loader starts it at a random value
	 * per CPU when the slot gets its port and folds from there. */
	__u32 new_conns;
	__u32 dropped;         /* dropped in enforce mode */
	__u32 marked;          /* marked in enforce mode (passed) */
	__u32 would_drop;      /* selected by the draw in observe mode (passed) */
	__u32 exempt;          /* exception port or source (passed) */
	__u32 stale;           /* selected, but the heartbeat was stale (passed) */
	__u32 syn_retransmits; /* SYNs found in the dropped-SYN table */
	/* Answered with a RST|ACK (enforce, of dropped), or, in observe mode,
	 * selected under the reject action (of would_drop). One counter for
	 * both: the loader knows each port's mode and tells them apart
	 * exactly (statsFolder.add in internal/loader/stats.go). */
	__u32 rejected;
};

/*
 * One set of the dropped-SYN table: a 4-way set-associative cache with
 * least-recently-used replacement. A SYN is identified by a 64-bit
 * fingerprint of its addresses, ports and initial sequence number (seeded
 * with olcd_control.syn_seed); its set is chosen by the same fingerprint.
 */
enum olcd_syn_table {
	OLCD_SYN_WAYS = 4,
};

struct olcd_syn_set {
	__u64 fp[OLCD_SYN_WAYS];    /* fingerprint | 1; 0 = empty way */
	__u32 stamp[OLCD_SYN_WAYS]; /* heartbeat time (ns >> 20) of the last drop
				     * or retransmit of the way's SYN */
	/* To 64 bytes: one cache line per set (the array is line aligned),
	 * and a shift instead of a multiply in the inlined lookup. */
	__u8 pad[16];
};

/*
 * The reject action's rate limit (reject.h), a global variable written by
 * the loader: a token bucket per CPU, so that olcd never answers more than
 * this many SYNs per second on one CPU, whatever arrives.
 */
struct olcd_reject_conf {
	__u64 ns_per_token; /* 1e9 / rate; 0: never answer, drop */
	__u32 burst;        /* bucket size, tokens */
	__u32 pad;
};

/* One CPU's token bucket of the reject action. */
struct olcd_reject_bucket {
	__u64 stamp_ns; /* bpf_ktime_get_ns() up to which tokens were added */
	__u64 limited;  /* SYNs dropped instead of answered: no token left */
	__u32 tokens;
	__u32 jiffy; /* olcd_control.fresh_jiffies of the last refill */
};

/* LPM trie keys of the exception source prefixes. */
struct olcd_lpm4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct olcd_lpm6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

/*
 * Response timing (bpf/resp.h): the time from a request's first byte
 * reaching the node to the first byte of its answer leaving it, per
 * protected port, for a sample of the flows.
 *
 * Histogram geometry, log-linear (HdrHistogram-like): a value is timed in
 * units of 2^OLCD_HIST_UNIT_SHIFT ns (1.024 us); units below 2^SUB_BITS
 * have a bucket each, above every power of two is cut in 2^SUB_BITS equal
 * buckets. A bucket is at most 1/16 of its lower bound wide, so its middle
 * is within 3.2 % of any value in it (plus the unit, 2 % at 50 us), up to
 * 2^(OLCD_HIST_MAX_LOG2) units (68.7 s); longer goes in the last bucket.
 */
enum olcd_resp_geometry {
	OLCD_HIST_UNIT_SHIFT = 10,
	OLCD_HIST_SUB_BITS = 4,
	OLCD_HIST_MAX_LOG2 = 26,
	/* (MAX_LOG2 - SUB_BITS + 1) << SUB_BITS */
	OLCD_HIST_BUCKETS = 368,
	OLCD_FLOW_WAYS = 4,
};

/*
 * Response statistics of one histogram slot (a timed port, see
 * olcd_resp_ports in resp.h) on one CPU (olcd_rhist in resp.h).
 * 32-bit, folded into 64-bit totals by the loader like olcd_counters. Only
 * sampled flows are counted: the loader scales by the sample rate.
 */
struct olcd_resp_hist {
	__u32 requests;    /* timers started: a request on a flow with none outstanding */
	__u32 responses;   /* timers stopped by the server's first answer byte (in bucket[]) */
	__u32 abandoned;   /* timers forgotten unanswered: RST, FIN, eviction, idle */
	__u32 retransmits; /* client data already answered, seen again: ignored */
	/* The request gate (olcd_gate in olcd.c). Request starts on a flow
	 * already in the table (of requests: all but each flow's first). Of
	 * those, reset by the gate in enforce mode, and selected by it in
	 * observe mode (passed, timed). Here rather than in olcd_counters,
	 * which stays 32 bytes: a request start has this entry at hand. */
	__u32 reused;
	__u32 resets;
	__u32 would_reset;
	__u32 pad; /* the buckets 8-byte aligned (the loader compares pairs) */
	__u32 bucket[OLCD_HIST_BUCKETS];
};

/* Flow table counters, per CPU, one entry. */
struct olcd_flow_counters {
	__u32 inserts;   /* flows entered on their first timed request */
	__u32 evictions; /* live flows pushed out by a new one (set full) */
	__u32 expired;   /* idle flows replaced */
	__u32 forgotten; /* flows ended by FIN or RST */
};

/*
 * One set of the flow table: 4 ways, least recently used replaced first,
 * set and tag chosen by the flow hash (olcd_flow_hash in parse.h). A plain
 * array for the same reason as olcd_syn_set: an LRU hash lookup would cost
 * more than the whole sampled budget.
 */
struct olcd_flow_set {
	__u32 tag[OLCD_FLOW_WAYS];      /* flow hash tag | 1; 0 = empty way */
	__u32 stamp[OLCD_FLOW_WAYS];    /* clock (ns >> 20) of the last start or stop */
	__u64 start_ns[OLCD_FLOW_WAYS]; /* request outstanding since (ns); 0 = none */
	/* Client sequence number before which every byte was answered or
	 * belongs to the request being timed: data below it is a retransmit. */
	__u32 cseq[OLCD_FLOW_WAYS];
	/* Server sequence number the request acknowledged: answer bytes start
	 * at or after it; server data below it is a retransmit of an older
	 * answer. */
	__u32 sack[OLCD_FLOW_WAYS];
	__u16 slot[OLCD_FLOW_WAYS]; /* histogram slot of the flow's port */
	/* The request gate: the acknowledgment number of the server's latest
	 * segment seen (its rcv_nxt then). While no request is outstanding,
	 * sack holds the end of the server's data seen instead (its
	 * snd_nxt), so that "the client acknowledged every answer byte" is
	 * one compare. */
	__u32 srack[OLCD_FLOW_WAYS];
	__u8 pad[8]; /* to two cache lines */
};

/* Response timing knobs: a global variable (resp.h), written whole by the loader. */
struct olcd_resp_ctl {
	__u64 seed; /* flow hash multiplier (olcd_flow_hash): random and odd, per load */
	/* Tests only: when not 0, the clock (ns) instead of bpf_ktime_get_ns(). */
	__u64 test_now_ns;
	/* A flow is sampled when the high 32 bits of its hash are <= this:
	 * 0xffffffff samples every flow, 2^32 / N - 1 one in N. */
	__u32 sample_max;
	__u32 sets_mask;  /* sets in olcd_flows minus one (a power of two) */
	__u32 idle_units; /* a way untouched this long (ns >> 20) is free */
	__u32 hist_slots; /* entries of olcd_rhist per CPU (slot 0 included) */
};

#endif /* OLCD_H */
