package loader

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// TestMapMemory checks the memory model of estimateMapMemory against what
// the running kernel accounts for each map, so that the figures for other
// CPU counts (BenchmarkMapMemory, docs/datapath.md) rest on a checked model.
func TestMapMemory(t *testing.T) {
	ncpu, err := ebpf.PossibleCPU()
	must(t, err)
	cfgs := []Config{{}, {MaxPorts: 100, SYNTableSize: 1000, MaxPrefixes: 10},
		{MaxPorts: 10, ResponseSample: 1, ResponsePorts: 10, FlowTableSize: 1000}, {MaxPorts: 50, Selection: SelectEven}}
	for _, cfg := range cfgs {
		t.Run(fmt.Sprintf("ports=%d/timed=%d/%s", cfg.MaxPorts, cfg.ResponsePorts, cfg.Selection), func(t *testing.T) {
			d := loadTest(t, cfg)
			var ps []netip.Prefix
			for i := range 7 {
				ps = append(ps, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16))
			}
			for i := range 3 {
				ps = append(ps, netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 1, 0xd, 0xb8, byte(i)}), 48))
			}
			must(t, d.SetExceptions(nil, ps))
			want, err := estimateMapMemory(cfg, ncpu, 7, 3)
			must(t, err)
			got := kernelMapMemory(t, d)
			for _, u := range want {
				name, _, _ := strings.Cut(u.name, " ")
				if got[name] != u.bytes {
					t.Errorf("%s: kernel accounts %d bytes, model says %d", name, got[name], u.bytes)
				}
				delete(got, name)
			}
			for name := range got {
				t.Errorf("map %s is not in the model", name)
			}
		})
	}
}

// kernelMapMemory returns the memlock of every map the programs use.
func kernelMapMemory(t *testing.T, d *Datapath) map[string]uint64 {
	t.Helper()
	info, err := d.objs.OlcdXdp.Info()
	must(t, err)
	ids, ok := info.MapIDs()
	if !ok {
		t.Fatal("kernel reports no map ids for the program")
	}
	out := map[string]uint64{}
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		must(t, err)
		mi, err := m.Info()
		m.Close()
		must(t, err)
		bytes, ok := mi.Memlock()
		if !ok && mi.Type != ebpf.LPMTrie {
			t.Fatalf("map %s: kernel reports no memlock", mi.Name)
		}
		out[mi.Name] = bytes
	}
	return out
}

// BenchmarkMapMemory reports the BPF map memory of the default
// configuration (1024 ports, 8192 remembered SYNs, 1024 exception prefixes
// per family, all in use) for 2, 64 and 256 CPUs, in MiB. Goal: ≤ 4 MiB at 64
// CPUs. Nothing is timed: the figures come from the model TestMapMemory
// checks against the kernel.
//
// timing=on is the daemon's default: response timing on, 32 timed ports,
// 16384 flows. selection=even adds the even selection's accumulators.
func BenchmarkMapMemory(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"off", Config{}}, {"on", Config{ResponseSample: 1}}, {"off/selection=even", Config{Selection: SelectEven}}} {
		for _, ncpu := range []int{2, 64, 256} {
			benchMapMemory(b, fmt.Sprintf("timing=%s/cpus=%d", c.name, ncpu), c.cfg, ncpu)
		}
	}
}

func benchMapMemory(b *testing.B, name string, cfg Config, ncpu int) {
	{
		b.Run(name, func(b *testing.B) {
			var us []mapUsage
			for range b.N {
				var err error
				us, err = estimateMapMemory(cfg, ncpu, olc.DefaultMaxPrefixes, olc.DefaultMaxPrefixes)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(totalUsage(us))/(1<<20), "MiB")
			for _, u := range us {
				if strings.HasPrefix(u.name, "olcd_stats") {
					b.ReportMetric(float64(u.bytes)/(1<<20), "stats-MiB")
				}
				if strings.HasPrefix(u.name, "olcd_rhist") || strings.HasPrefix(u.name, "olcd_flows") {
					b.ReportMetric(float64(u.bytes)/(1<<20), strings.TrimPrefix(u.name, "olcd_")+"-MiB")
				}
			}
		})
	}
}
