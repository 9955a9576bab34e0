package loader

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cilium/ebpf"
)

// carryReport is what a take-over carried from pinned maps of another size
// into its own, and what did not fit, for the one log line that says so.
type carryReport struct {
	ports, lostPorts       int // policies carried; ports whose slot is past max_ports
	prefixes, lostPrefixes int // exception prefixes carried; past max_prefixes
	timed, lostTimed       int // timed ports carried; past response_ports
	synTable               bool
}

// log writes the one line of a take-over that recreated maps: which, and
// what of them was carried and lost.
func (r carryReport) log(log *slog.Logger, recreated []string) {
	lost := []string{}
	if r.lostPorts > 0 {
		lost = append(lost, fmt.Sprintf("%d port policies past max_ports (applied again by the daemon if configured)", r.lostPorts))
	}
	if r.lostPrefixes > 0 {
		lost = append(lost, fmt.Sprintf("%d exception prefixes past max_prefixes", r.lostPrefixes))
	}
	if r.lostTimed > 0 {
		lost = append(lost, fmt.Sprintf("%d timed ports past response_ports", r.lostTimed))
	}
	if r.synTable {
		lost = append(lost, "the dropped-SYN table (a retransmit of a SYN dropped before counts as new)")
	}
	log.Info("pinned maps of another size recreated at this config's size; the programs are replaced in place, shedding goes on",
		"maps", strings.Join(recreated, ","),
		"carried", fmt.Sprintf("control record, mode and heartbeat; %d port policies with their drop probabilities; %d exception prefixes; %d timed ports",
			r.ports, r.prefixes, r.timed),
		"lost", strings.Join(append(lost, "counters, spacing and cap buckets start afresh"), "; "))
}

// carry fills the maps Load created new in place of pinned ones of another
// size (pins.carried) with what still fits: the .bss whole (control
// record, port index, timed-port index, knobs; Load rewrites the knobs from
// the config), the policies of the ports whose slot is within max_ports,
// and the exception prefixes max_prefixes holds. A port past it leaves the
// port index, as a timed port past response_ports leaves its index; the
// exception ports' shared policy moves to its new index. The rest starts
// afresh: counters (read as deltas from the take-over anyway), the
// dropped-SYN table (placed by the set mask, which changed), the even
// draw's spacing and the cap buckets (the daemon writes the caps again).
// The pinned maps are only read: the old programs keep them until Attach.
func (d *Datapath) carry(p *pins) (r carryReport, err error) {
	bss := p.carried[".bss"]
	if bss == nil {
		return r, errors.New("carry: the pinned .bss is not open")
	}
	buf := make([]byte, bss.ValueSize())
	if err := bss.Lookup(uint32(0), buf); err != nil {
		return r, fmt.Errorf("carry: read pinned .bss: %w", err)
	}
	if err := d.objs.Bss.Update(uint32(0), buf, ebpf.UpdateAny); err != nil {
		return r, fmt.Errorf("carry: write .bss: %w", err)
	}
	oldMax := d.cfg.MaxPorts
	if m := p.carried[olcdMapOlcdPolicies]; m != nil {
		oldMax = int(m.MaxEntries()) - 2
	}
	if err := d.objs.OlcdPorts.Get(d.index); err != nil {
		return r, fmt.Errorf("carry: read port index: %w", err)
	}
	var slots []uint32
	for pi := range d.index.Idx {
		for port, idx := range d.index.Idx[pi] {
			switch {
			case idx == 0:
			case int(idx) == oldMax+1:
				d.index.Idx[pi][port] = uint16(d.exemptIndex())
			case int(idx) > d.cfg.MaxPorts:
				d.index.Idx[pi][port] = 0
				r.lostPorts++
			default:
				slots = append(slots, uint32(idx))
			}
		}
	}
	if err := d.objs.OlcdPorts.Set(d.index); err != nil {
		return r, fmt.Errorf("carry: write port index: %w", err)
	}
	if old := p.carried[olcdMapOlcdPolicies]; old != nil {
		var v olcdOlcdPolicy
		for _, idx := range slots {
			if err := old.Lookup(idx, &v); err != nil {
				return r, fmt.Errorf("carry: read pinned policy %d: %w", idx, err)
			}
			if err := d.objs.OlcdPolicies.Update(idx, &v, ebpf.UpdateAny); err != nil {
				return r, fmt.Errorf("carry: write policy %d: %w", idx, err)
			}
		}
	}
	r.ports = len(slots)
	if r.timed, r.lostTimed, err = d.carryTimed(); err != nil {
		return r, err
	}
	if err := d.carryPrefixes(p, &r); err != nil {
		return r, err
	}
	r.synTable = p.carried[olcdMapOlcdSyns] != nil
	return r, nil
}

// carryPrefixes copies the pinned exception tries of another size into
// the new ones, as many prefixes as they hold, and sets the control
// record's counts to those carried (0 skips a trie).
func (d *Datapath) carryPrefixes(p *pins, r *carryReport) error {
	var ctl olcdOlcdControl
	if err := d.objs.OlcdCtl.Get(&ctl); err != nil {
		return fmt.Errorf("carry: read control record: %w", err)
	}
	for _, t := range []struct {
		name  string
		to    *ebpf.Map
		count *uint32
	}{{olcdMapOlcdExempt4, d.objs.OlcdExempt4, &ctl.Prefixes4}, {olcdMapOlcdExempt6, d.objs.OlcdExempt6, &ctl.Prefixes6}} {
		old := p.carried[t.name]
		if old == nil {
			r.prefixes += int(*t.count)
			continue
		}
		var n uint32
		var key []byte
		var val uint8
		it := old.Iterate()
		for it.Next(&key, &val) {
			if err := t.to.Update(key, val, ebpf.UpdateAny); err != nil {
				r.lostPrefixes++ // full: max_prefixes is below what was pinned
				continue
			}
			n++
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("carry: read pinned %s: %w", t.name, err)
		}
		*t.count = n
		r.prefixes += int(n)
	}
	if err := d.objs.OlcdCtl.Set(&ctl); err != nil {
		return fmt.Errorf("carry: write control record: %w", err)
	}
	return nil
}

// carryTimed drops the timed ports whose histogram slot is past this
// config's (response_ports lowered, or timing turned off) from the carried
// timed-port index: the histograms start afresh (the flow group is
// renewed), the slots of the others stay.
func (d *Datapath) carryTimed() (kept, lost int, err error) {
	if err := d.objs.OlcdRports.Get(d.rports); err != nil {
		return 0, 0, fmt.Errorf("carry: read timed-port index: %w", err)
	}
	limit := uint16(0)
	if d.cfg.ResponseSample != 0 {
		limit = uint16(respSlots(d.cfg))
	}
	for pi := range d.rports.Slot {
		for port, slot := range d.rports.Slot[pi] {
			switch {
			case slot == 0:
			case slot >= limit:
				d.rports.Slot[pi][port] = 0
				lost++
			default:
				kept++
			}
		}
	}
	if err := d.objs.OlcdRports.Set(d.rports); err != nil {
		return 0, 0, fmt.Errorf("carry: write timed-port index: %w", err)
	}
	return kept, lost, nil
}
