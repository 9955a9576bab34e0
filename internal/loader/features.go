package loader

import (
	"errors"
	"log/slog"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
)

// Feature is one kernel feature the datapath uses, as this kernel answers
// a probe of it.
type Feature struct {
	// Name names the feature and the kernel that brought it.
	Name string
	// On says the kernel has it.
	On bool
	// Off says what olcd does without it (or that it cannot run): set
	// when On is false.
	Off string
}

// Features probes the kernel for what the datapath uses (docs/datapath.md,
// "Verifier matrix": the oldest kernel olcd claims is 5.9). A probe that
// cannot tell (an error other than "not supported") reports the feature on:
// the load or the attach then says what failed.
func Features() []Feature {
	probe := func(err error) bool { return !errors.Is(err, ebpf.ErrNotSupported) }
	tcx := func() error {
		_, err := link.QueryPrograms(link.QueryOptions{Target: 1, Attach: ebpf.AttachTCXIngress})
		return err
	}
	return []Feature{
		{Name: "XDP programs (4.8)", On: probe(features.HaveProgramType(ebpf.XDP)),
			Off: "attach: xdp is refused; use attach: tc"},
		{Name: "TC programs (4.1)", On: probe(features.HaveProgramType(ebpf.SchedCLS)),
			Off: "olcd cannot run: the TC programs are its only attach on such a kernel"},
		{Name: "1M-instruction programs (5.2)", On: probe(features.HaveLargeInstructions()),
			Off: "olcd cannot run: the tc program's verification walks 144 000 instructions"},
		{Name: "memory-mapped global data (5.5)", On: probe(features.HaveMapFlag(features.BPF_F_MMAPABLE)),
			Off: "olcd cannot run: the port index and the heartbeat are memory-mapped globals"},
		{Name: "tcx (6.6)", On: probe(tcx()),
			Off: "TC attaches through clsact and a cls_bpf filter named olcd_tc; a take-over replaces the filter's program"},
	}
}

// logFeatures logs the features this kernel lacks, each with what olcd
// does without it.
func logFeatures(log *slog.Logger) {
	for _, f := range Features() {
		if !f.On {
			log.Info("kernel feature off", "feature", f.Name, "consequence", f.Off)
		}
	}
}
