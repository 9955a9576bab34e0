package loader

import (
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unsafe"

	"github.com/cilium/ebpf/btf"

	"github.com/olcd/olcd/internal/olc"
)

// TestLayout checks that Go and C agree where bpf2go does not already
// guarantee it: every shared struct has the size and member offsets of its C
// declaration (bpf/olcd.h) on this architecture and no implicit padding
// (which would differ between compilers), every map's key and value
// size is the size of the Go type the loader reads and writes it with, and
// the enum values the Go constants are converted from are the ones in BTF.
func TestLayout(t *testing.T) {
	spec, err := loadOlcd()
	if err != nil {
		t.Fatal(err)
	}
	structs := map[string]any{
		"olcd_policy":        olcdOlcdPolicy{},
		"olcd_control":       olcdOlcdControl{},
		"olcd_counters":      olcdOlcdCounters{},
		"olcd_syn_set":       olcdOlcdSynSet{},
		"olcd_lpm4_key":      olcdOlcdLpm4Key{},
		"olcd_lpm6_key":      olcdOlcdLpm6Key{},
		"olcd_port_index":    olcdOlcdPortIndex{},
		"olcd_resp_hist":     olcdOlcdRespHist{},
		"olcd_flow_counters": olcdOlcdFlowCounters{},
		"olcd_flow_set":      olcdOlcdFlowSet{},
		"olcd_resp_ctl":      olcdOlcdRespCtl{},
		"olcd_resp_ports":    olcdOlcdRespPorts{},
	}
	for name, v := range structs {
		var s *btf.Struct
		if err := spec.Types.TypeByName(name, &s); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		gt := reflect.TypeOf(v)
		if uintptr(s.Size) != gt.Size() {
			t.Errorf("%s: C size %d, Go size %d", name, s.Size, gt.Size())
		}
		var sum uint32
		for _, m := range s.Members {
			if size, err := btf.Sizeof(m.Type); err == nil {
				sum += uint32(size)
			}
			f, ok := gt.FieldByName(goName(m.Name))
			if !ok {
				t.Errorf("%s.%s: no Go field %s", name, m.Name, goName(m.Name))
				continue
			}
			if off := uintptr(m.Offset.Bytes()); off != f.Offset {
				t.Errorf("%s.%s: C offset %d, Go offset %d", name, m.Name, off, f.Offset)
			}
			if size, err := btf.Sizeof(m.Type); err != nil || uintptr(size) != f.Type.Size() {
				t.Errorf("%s.%s: C size %d (%v), Go size %d", name, m.Name, size, err, f.Type.Size())
			}
		}
		if sum != s.Size {
			t.Errorf("%s: members add up to %d bytes of %d: padding must be explicit", name, sum, s.Size)
		}
	}

	// The loader's view of a mapped response entry (resp.go) is the C one.
	var rw respWords
	var rh olcdOlcdRespHist
	if unsafe.Sizeof(rw) != unsafe.Sizeof(rh) || unsafe.Offsetof(rw.buckets) != unsafe.Offsetof(rh.Bucket) {
		t.Errorf("respWords: %d bytes, buckets at %d; olcd_resp_hist: %d bytes, buckets at %d",
			unsafe.Sizeof(rw), unsafe.Offsetof(rw.buckets), unsafe.Sizeof(rh), unsafe.Offsetof(rh.Bucket))
	}

	maps := map[string]struct{ key, value any }{
		olcdMapOlcdPolicies:  {uint32(0), olcdOlcdPolicy{}},
		olcdMapOlcdStats:     {uint32(0), olcdOlcdCounters{}},
		olcdMapOlcdUnclass:   {uint32(0), uint64(0)},
		olcdMapOlcdSyns:      {uint32(0), olcdOlcdSynSet{}},
		olcdMapOlcdExempt4:   {olcdOlcdLpm4Key{}, uint8(0)},
		olcdMapOlcdExempt6:   {olcdOlcdLpm6Key{}, uint8(0)},
		olcdMapOlcdRejTokens: {uint32(0), olcdOlcdRejectBucket{}},
		olcdMapOlcdRhist:     {uint32(0), olcdOlcdRespHist{}},
		olcdMapOlcdFlows:     {uint32(0), olcdOlcdFlowSet{}},
		olcdMapOlcdFstats:    {uint32(0), olcdOlcdFlowCounters{}},
	}
	for name, kv := range maps {
		m := spec.Maps[name]
		if m == nil {
			t.Errorf("map %s missing", name)
			continue
		}
		if k, v := reflect.TypeOf(kv.key).Size(), reflect.TypeOf(kv.value).Size(); uintptr(m.KeySize) != k || uintptr(m.ValueSize) != v {
			t.Errorf("map %s: C key/value %d/%d bytes, Go %d/%d", name, m.KeySize, m.ValueSize, k, v)
		}
	}
	for name, v := range map[string]any{"olcd_ctl": olcdOlcdControl{}, "olcd_ports": olcdOlcdPortIndex{}, "olcd_rej": olcdOlcdRejectConf{}} {
		vs := spec.Variables[name]
		if vs == nil {
			t.Errorf("variable %s missing", name)
			continue
		}
		if uintptr(vs.Size()) != reflect.TypeOf(v).Size() {
			t.Errorf("variable %s: C %d bytes, Go %d", name, vs.Size(), reflect.TypeOf(v).Size())
		}
	}

	enums := map[string]map[string]uint64{
		"olcd_mode":   {"OLCD_MODE_OFF": uint64(olc.ModeOff), "OLCD_MODE_OBSERVE": uint64(olc.ModeObserve), "OLCD_MODE_ENFORCE": uint64(olc.ModeEnforce)},
		"olcd_action": {"OLCD_ACTION_DROP": uint64(olc.ActionDrop), "OLCD_ACTION_MARK": uint64(olc.ActionMark), "OLCD_ACTION_REJECT": uint64(olc.ActionReject)},
		"olcd_class":  {"OLCD_CLASS_CRITICAL": uint64(olc.ClassCritical), "OLCD_CLASS_NORMAL": uint64(olc.ClassNormal), "OLCD_CLASS_BEST_EFFORT": uint64(olc.ClassBestEffort)},
		"olcd_proto":  {"OLCD_PROTO_TCP": uint64(olc.ProtoTCP), "OLCD_PROTO_UDP": uint64(olc.ProtoUDP)},
	}
	for name, want := range enums {
		var e *btf.Enum
		if err := spec.Types.TypeByName(name, &e); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(e.Values) != len(want) {
			t.Errorf("%s: C has %d values, Go %d", name, len(e.Values), len(want))
		}
		for _, v := range e.Values {
			if w, ok := want[v.Name]; !ok || w != v.Value {
				t.Errorf("%s: %s = %d in C, %d (%v) in Go", name, v.Name, v.Value, w, ok)
			}
		}
	}
}

// goName is bpf2go's field name for a C member: snake_case to CamelCase.
func goName(c string) string {
	var b strings.Builder
	for _, part := range strings.Split(c, "_") {
		if part == "" {
			continue
		}
		r := []rune(part)
		r[0] = unicode.ToUpper(r[0])
		b.WriteString(string(r))
	}
	return b.String()
}

// TestNoCORE: the object carries no CO-RE relocations, so it loads on kernels
// without BTF (cilium/ebpf drops the object's own BTF there), and it uses no
// kernel type it would need vmlinux BTF for.
func TestNoCORE(t *testing.T) {
	spec, err := loadOlcd()
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range spec.Programs {
		for i := range p.Instructions {
			if rel := btf.CORERelocationMetadata(&p.Instructions[i]); rel != nil {
				t.Errorf("%s: instruction %d has a CO-RE relocation (%v)", name, i, rel)
			}
		}
	}
}
