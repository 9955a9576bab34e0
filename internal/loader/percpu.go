package loader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// batchMinSlots is the fewest slots in use from which a fold reads a
// per-CPU array with batched lookups instead of one lookup per slot, and
// batchDensity how many array entries per slot in use the batch may read
// (slots freed by removed ports are read too). Below a few slots the two
// ways cost the same; above, batches take a fraction of the time
// (BenchmarkStats, docs/datapath.md "Maps and globals").
const (
	batchMinSlots = 8
	batchDensity  = 4
)

// perCPUReader reads the per-CPU values of the slots in use of a per-CPU
// array (the stats counters): batched where the
// kernel has BPF_MAP_LOOKUP_BATCH (5.6), one lookup per slot where not.
type perCPUReader[V any] struct {
	m    *ebpf.Map
	what string // names the values in errors: "stats slots"
	// chunk is how many entries one batched lookup reads: it bounds the
	// read buffer (chunk × CPUs × the value's size) however many ports.
	chunk int
	// noBatch is set once the kernel refused BPF_MAP_LOOKUP_BATCH: every
	// read then goes slot by slot.
	noBatch bool
	buf     []V
	keys    []uint32
	vals    []V
}

// read calls add with each slot's per-CPU values (slots sorted ascending);
// the slice is reused by the next call.
func (r *perCPUReader[V]) read(slots []uint16, add func(slot uint16, percpu []V)) error {
	if n := len(slots); !r.noBatch && n >= batchMinSlots && int(slots[n-1])+1 <= batchDensity*n {
		err := r.readBatch(slots, add)
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return err
		}
		r.noBatch = true
	}
	for _, slot := range slots {
		r.buf = r.buf[:0]
		if err := r.m.Lookup(uint32(slot), &r.buf); err != nil {
			return fmt.Errorf("read %s %d: %w", r.what, slot, err)
		}
		add(slot, r.buf)
	}
	return nil
}

// readBatch reads array entries 0 through the highest slot in use, chunk
// entries per BPF_MAP_LOOKUP_BATCH call, and hands on the slots in use.
// Errors: ebpf.ErrNotSupported on kernels without batch operations, or a
// failed read.
func (r *perCPUReader[V]) readBatch(slots []uint16, add func(slot uint16, percpu []V)) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("read %s: %w", r.what, err)
	}
	entries := int(slots[len(slots)-1]) + 1
	chunk := min(entries, r.chunk)
	if len(r.keys) < chunk {
		r.keys = make([]uint32, chunk)
		r.vals = make([]V, chunk*ncpu)
	}
	var cursor ebpf.MapBatchCursor
	next := 0 // the first slot of slots not handed on yet
	for from := 0; from < entries; {
		n := min(chunk, entries-from)
		got, err := r.m.BatchLookup(&cursor, r.keys[:n], r.vals[:n*ncpu], nil)
		if errors.Is(err, ebpf.ErrKeyNotExist) && got == n && from+n == entries {
			err = nil // the highest slot is the array's last entry
		}
		if err != nil {
			return fmt.Errorf("batch read of %s %d..%d: %w", r.what, from, from+n-1, err)
		}
		if got == 0 {
			return fmt.Errorf("batch read of %s %d..%d: no progress", r.what, from, from+n-1)
		}
		for ; next < len(slots) && int(slots[next]) < from+got; next++ {
			i := int(slots[next]) - from
			if r.keys[i] != uint32(slots[next]) {
				return fmt.Errorf("batch read of %s: entry %d holds key %d", r.what, slots[next], r.keys[i])
			}
			add(slots[next], r.vals[i*ncpu:(i+1)*ncpu])
		}
		from += got
	}
	return nil
}
