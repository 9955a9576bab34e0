package loader

import (
	"fmt"
	"os"
	"unsafe"
)

// mapUsage is the memory one map of the datapath takes, in bytes, as the
// kernel accounts it (the "memlock" line of the map's fdinfo).
type mapUsage struct {
	name  string
	bytes uint64
}

// Kernel object sizes behind the accounting, from Linux 6.18 on 64-bit
// (kernel/bpf/arraymap.c array_map_mem_usage, kernel/bpf/lpm_trie.c
// trie_mem_usage). TestMapMemory checks them against the running kernel.
const (
	bpfArrayHeader = 312 // sizeof(struct bpf_array)
	lpmNodeHeader  = 24  // sizeof(struct lpm_trie_node)
)

// estimateMapMemory returns the memory of every map of a datapath loaded
// with cfg (defaults applied) on a machine with ncpu possible CPUs, with
// prefixes4 and prefixes6 exception prefixes configured. Per-CPU maps grow
// with ncpu; the exception tries with their entries; the rest is fixed by
// cfg.
func estimateMapMemory(cfg Config, ncpu, prefixes4, prefixes6 int) ([]mapUsage, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	page := uint64(os.Getpagesize())
	pageAlign := func(n uint64) uint64 { return (n + page - 1) / page * page }
	round8 := func(n uintptr) uint64 { return (uint64(n) + 7) &^ 7 }
	array := func(n uint64, value uintptr) uint64 { return bpfArrayHeader + n*round8(value) }
	percpu := func(n uint64, value uintptr) uint64 {
		return bpfArrayHeader + n*8 + n*round8(value)*uint64(ncpu)
	}
	// The .bss section holds the port index, the control record, the
	// heartbeat verdict and the pointers that carry the enums into BTF.
	bssSize := uintptr(0)
	spec, err := loadOlcd()
	if err != nil {
		return nil, fmt.Errorf("load datapath spec: %w", err)
	}
	for _, m := range spec.Maps {
		if m.Name == ".bss" {
			bssSize = uintptr(m.ValueSize)
		}
	}
	if bssSize == 0 {
		return nil, fmt.Errorf("datapath spec has no .bss section")
	}
	ports := uint64(cfg.MaxPorts)
	even := uint64(1)
	if cfg.Selection == SelectEven {
		even = ports + 1
	}
	return []mapUsage{
		// Memory-mapped: header and value each take whole pages.
		{".bss (port index, control, heartbeat verdict)", pageAlign(bpfArrayHeader) + pageAlign(round8(bssSize))},
		{"olcd_policies", array(ports+2, unsafe.Sizeof(olcdOlcdPolicy{}))},
		{"olcd_stats", percpu(ports+1, unsafe.Sizeof(olcdOlcdCounters{}))},
		{"olcd_even (selection even only)", percpu(even, unsafe.Sizeof(uint32(0)))},
		{"olcd_unclass", percpu(1, unsafe.Sizeof(uint64(0)))},
		{"olcd_rej_tokens", percpu(1, unsafe.Sizeof(olcdOlcdRejectBucket{}))},
		{"olcd_syns", array(uint64(synSets(cfg.SYNTableSize)), unsafe.Sizeof(olcdOlcdSynSet{}))},
		// The kernel counts one node (header, address, 1-byte value) per
		// entry; intermediate nodes come and go with the prefix set.
		{"olcd_exempt4", uint64(prefixes4) * (lpmNodeHeader + 4 + 1)},
		{"olcd_exempt6", uint64(prefixes6) * (lpmNodeHeader + 16 + 1)},
		// Response timing: histograms of the timed ports per CPU
		// (memory-mapped), the flow table (one entry each when timing
		// is off).
		{"olcd_rhist", pageAlign(bpfArrayHeader) + pageAlign(uint64(respSlots(cfg))*uint64(ncpu)*round8(unsafe.Sizeof(olcdOlcdRespHist{})))},
		{"olcd_flows", array(uint64(flowSets(cfg)), unsafe.Sizeof(olcdOlcdFlowSet{}))},
		{"olcd_fstats", percpu(1, unsafe.Sizeof(olcdOlcdFlowCounters{}))},
		// Fair shedding (fair.h): the sketch, fixed by its width
		// whatever the number of sources; the fair state per slot; the
		// cap buckets; one trie node per source cap.
		{"olcd_fair_cm", percpu(uint64(olcdOlcdFairGeometryOLCD_FAIR_DEPTH)*uint64(fairWidth(cfg))/uint64(olcdOlcdFairGeometryOLCD_FAIR_LINE), unsafe.Sizeof(olcdOlcdFairLine{}))},
		{"olcd_fair_slots", percpu(ports+1, unsafe.Sizeof(olcdOlcdFairSlot{}))},
		{"olcd_caps", array(ports+1+uint64(maxCapSources(cfg)), unsafe.Sizeof(olcdOlcdCap{}))},
		{"olcd_ceil", array(ports+1, unsafe.Sizeof(olcdOlcdCeiling{}))},
		{"olcd_cap_src", 0},
	}, nil
}

func totalUsage(us []mapUsage) uint64 {
	var t uint64
	for _, u := range us {
		t += u.bytes
	}
	return t
}
