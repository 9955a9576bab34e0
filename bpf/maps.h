/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Maps of the datapath. The max_entries below are placeholders: the loader
 * sets them from its Config before loading (see internal/loader).
 */
#ifndef OLCD_MAPS_H
#define OLCD_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "olcd.h"

/*
 * Port -> policy index, for TCP and UDP: 256 KiB, fixed by the port space.
 * Index 0 means "no policy".
 */
struct olcd_port_index {
	__u16 idx[OLCD_INDEX_PROTOS][OLCD_PORTS_PER_PROTO];
};

/*
 * The port index and the control record are global variables (the .bss
 * section, an array map of one entry that the loader memory-maps). The
 * program reaches them through a constant address rather than a lookup, and
 * the loader writes them with plain stores (the heartbeat needs no syscall).
 * They are the two lookups every candidate makes; the hot path is short
 * enough that the saved instructions show.
 */
struct olcd_port_index olcd_ports;
struct olcd_control olcd_ctl;

/*
 * Response timing (resp.h): the ports timed, [proto index][port] ->
 * histogram slot (1..65534), 0 = not timed; and its knobs. Globals for the
 * same reason: the parser reads them for every established segment.
 */
struct olcd_resp_ports {
	__u16 slot[OLCD_INDEX_PROTOS][OLCD_PORTS_PER_PROTO];
};

struct olcd_resp_ports olcd_rports;
struct olcd_resp_ctl olcd_rctl;

/* Policies: [0] none, [1..max_ports] ports, [max_ports+1] shared exception. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1026);
	__type(key, __u32);
	__type(value, struct olcd_policy);
} olcd_policies SEC(".maps");

/* Stats slots: [0] "other", [1..max_ports] ports. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1025);
	__type(key, __u32);
	__type(value, struct olcd_counters);
} olcd_stats SEC(".maps");

/*
 * The error accumulator of OLCD_SELECT_EVEN per stats slot and CPU
 * (olcd_select in olcd.c). Its own map, one entry unless the selection is
 * even: the random selection keeps no state (it hashes new_conns).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1025);
	__type(key, __u32);
	__type(value, __u32);
} olcd_even SEC(".maps");

/* Frames that could carry a new connection but could not be examined. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} olcd_unclass SEC(".maps");

/*
 * Recently dropped SYNs (struct olcd_syn_set). A plain array with the
 * replacement done in the program: one lookup in a BPF_MAP_TYPE_LRU_HASH
 * costs more than the whole budget of a SYN (docs/datapath.md).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2048);
	__type(key, __u32);
	__type(value, struct olcd_syn_set);
} olcd_syns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct olcd_lpm4_key);
	__type(value, __u8);
} olcd_exempt4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct olcd_lpm6_key);
	__type(value, __u8);
} olcd_exempt6 SEC(".maps");

#endif /* OLCD_MAPS_H */
