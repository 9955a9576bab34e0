package loader

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/olcd/olcd/internal/olc"
)

// TestTakeOverResized: a restart whose datapath section sized a map
// otherwise (max_ports up and down, syn_table_size, max_prefixes,
// selection, response_ports, the sketch's width) takes the pinned datapath
// over instead of refusing it: the maps of another size (and the .bss) are
// recreated and pinned over the old ones, the others adopted; the
// policies, drop probabilities, mode, heartbeat and exception prefixes that
// fit are carried, so the new program drops a SYN before the new olcd
// writes anything; until Attach the old program stays attached, and
// Attach replaces it on the same link with the new one, which uses the
// pinned maps. The next take-over at the same sizes adopts everything.
func TestTakeOverResized(t *testing.T) {
	spec, err := loadOlcd()
	must(t, err)
	all := pinnedMaps(spec)
	// The maps max_ports sizes (olcd_even too, with selection: even).
	byMaxPorts := []string{olcdMapOlcdPolicies, olcdMapOlcdStats, olcdMapOlcdCaps, olcdMapOlcdCeil, olcdMapOlcdFairSlots}
	v4 := func(n int) []netip.Prefix {
		var out []netip.Prefix
		for i := range n {
			out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), 32))
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		from, to func(*Config)
		ports    int // policies written before the restart
		prefixes int // exception prefixes written before it
		// want are the maps recreated (the .bss is, with any of them).
		want []string
		// keptPrefixes is how many exception prefixes the restart carries.
		keptPrefixes int
	}{
		{"max_ports up", func(c *Config) {}, func(c *Config) { c.MaxPorts = 32 }, 3, 2, byMaxPorts, 2},
		{"max_ports down past used slots", func(c *Config) { c.MaxPorts = 32 }, func(c *Config) { c.MaxPorts = 16 }, 18, 0, byMaxPorts, 0},
		{"syn_table_size", func(c *Config) {}, func(c *Config) { c.SYNTableSize = 4 * olc.DefaultSYNTableSize }, 1, 0,
			[]string{olcdMapOlcdSyns}, 0},
		{"max_prefixes down", func(c *Config) {}, func(c *Config) { c.MaxPrefixes = 4 }, 1, 6,
			[]string{olcdMapOlcdExempt4, olcdMapOlcdExempt6}, 4},
		{"selection", func(c *Config) {}, func(c *Config) { c.Selection = SelectEven }, 1, 0,
			[]string{olcdMapOlcdEven}, 0},
		{"response_ports", func(c *Config) { c.ResponseSample, c.ResponsePorts = 1, 4 }, func(c *Config) { c.ResponsePorts = 2 }, 3, 0,
			[]string{olcdMapOlcdRhist, olcdMapOlcdFlows, olcdMapOlcdFstats}, 0},
		{"fair_width", func(c *Config) {}, func(c *Config) { c.FairWidth = 8192 }, 1, 0,
			[]string{olcdMapOlcdFairCm, olcdMapOlcdFairSlots}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := pinTestDir(t)
			n := newTestNet(t)
			cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Hour, FlowTableSize: 64}
			tc.from(&cfg)
			d := loadPinned(t, cfg)
			n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
			var pol []PortPolicy
			for i := range tc.ports {
				pol = append(pol, PortPolicy{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: uint16(8080 + i)},
					Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1})
			}
			must(t, d.SetPolicies(pol))
			must(t, d.SetExceptions(nil, v4(tc.prefixes)))
			must(t, d.SetMode(olc.ModeEnforce))
			must(t, d.Heartbeat())
			ifindex := d.Attachments()[0].Ifindex
			old := ingressProgram(t, n, "tc", ifindex)
			before := pinnedMapIDs(t, dir, all)

			next := cfg
			tc.to(&next)
			var kept []olc.PortKey
			for k, slot := range d.slots {
				if int(slot) <= next.MaxPorts {
					kept = append(kept, k)
				}
			}
			slices.SortFunc(kept, func(a, b olc.PortKey) int { return int(a.Port) - int(b.Port) })
			must(t, d.Release())

			d = takeOver(t, next)
			// A resized member of a renewable group renews the group.
			want := map[string]bool{".bss": true}
			for _, name := range tc.want {
				want[name] = true
				for _, m := range groupOf(name) {
					want[m] = true
				}
			}
			for _, name := range all {
				id := pinnedMapID(t, dir, name)
				if mine := mapID(t, d.objs.byName(name)); id != mine {
					t.Errorf("%s: pinned map %d is not this datapath's %d", name, id, mine)
				}
				if recreated := id != before[name]; recreated != want[name] {
					t.Errorf("%s: recreated %v, want %v", name, recreated, want[name])
				}
			}
			var got []olc.PortKey
			for _, p := range d.Policies() {
				got = append(got, p.Key)
				if p.DropProbability != 1 || p.Mode != olc.ModeEnforce {
					t.Errorf("policy of %s carried as %+v, want enforce at p 1", p.Key, p)
				}
			}
			if !slices.Equal(got, kept) {
				t.Errorf("ports carried %v, want %v (those within max_ports %d)", got, kept, next.MaxPorts)
			}
			if len(d.prefixes) != tc.keptPrefixes {
				t.Errorf("exception prefixes carried %d, want %d", len(d.prefixes), tc.keptPrefixes)
			}
			if v, _ := run(t, d, hookTC, syn4(kept[0].Port, 1)); v != verdictDrop {
				t.Errorf("SYN to %s on the new program before any write: %s, want drop", kept[0], v)
			}
			if got := ingressProgram(t, n, "tc", ifindex); got != old {
				t.Errorf("program %d attached before Attach, want the old one %d still", got, old)
			}
			n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
			if a := d.attachments[0]; !a.takenOver {
				t.Errorf("attachment %+v: not taken over in place", a.Attachment)
			}
			now := ingressProgram(t, n, "tc", ifindex)
			if mine := must1(t)(progID(d.objs.OlcdTc)); now != mine {
				t.Fatalf("attached program %d, want the new one %d", now, mine)
			}
			if ids := mapIDs(t, now); !slices.Contains(ids, pinnedMapID(t, dir, olcdMapOlcdPolicies)) {
				t.Errorf("the attached program's maps %v lack the pinned policies", ids)
			}
			must(t, d.Heartbeat())

			after := pinnedMapIDs(t, dir, all)
			must(t, d.Release())
			d = takeOver(t, next)
			checkAdopted(t, dir, all, after)
			n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
			must(t, d.Close())
		})
	}
}

// TestTakeOverResizedGroupOtherLayout: a renewable group whose map differs
// in its layout and its size (response_ports changed, and the histogram's
// fingerprint with it) is renewed, and the .bss is recreated as for any
// resize: the old programs keep reading their own histogram slot count
// until Attach replaces them.
func TestTakeOverResizedGroupOtherLayout(t *testing.T) {
	dir := pinTestDir(t)
	cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Hour, ResponseSample: 1, ResponsePorts: 4, FlowTableSize: 64}
	d := loadPinned(t, cfg)
	must(t, d.SetPolicies([]PortPolicy{{Key: tcp8080, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1}}))
	must(t, d.Heartbeat())
	before := pinnedMapIDs(t, dir, append(slices.Clone(flowGroup), ".bss", olcdMapOlcdPolicies))
	must(t, d.Release())
	editLayout(t, dir, func(layout *ebpf.Map) error { return layout.Update(keyOf(olcdMapOlcdRhist), uint64(1), ebpf.UpdateAny) })
	cfg.ResponsePorts = 2
	d = takeOver(t, cfg)
	checkRenewed(t, dir, d, append(slices.Clone(flowGroup), ".bss"), before)
	checkAdopted(t, dir, []string{olcdMapOlcdPolicies}, before)
	if p := d.Policies(); len(p) != 1 || p[0].DropProbability != 1 {
		t.Errorf("policies carried %+v, want tcp/8080 at p 1", p)
	}
}

// TestTakeOverResizedInterrupted: a resizing take-over that stops partway
// through pinning its new maps (a start killed there) leaves a directory
// the next start takes over: the layout it wrote first holds this build's
// fingerprints of the maps it carries (it left them out, and every later
// start refused the .bss for want of one until `olcd detach`), and a
// carried map not yet replaced, of the old size under the new size's
// fingerprint, is carried again. The policies survive both starts, the new
// program sheds before any write, and the start after that adopts all.
func TestTakeOverResizedInterrupted(t *testing.T) {
	spec, err := loadOlcd()
	must(t, err)
	all := pinnedMaps(spec)
	for _, step := range []int{0, 1, 3} { // after the first layout, the .bss, three maps
		t.Run(fmt.Sprintf("after step %d", step), func(t *testing.T) {
			dir := pinTestDir(t)
			n := newTestNet(t)
			cfg := Config{PinDir: dir, MaxPorts: 16, StaleAfter: time.Hour, FlowTableSize: 64}
			d := loadPinned(t, cfg)
			n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
			var pol []PortPolicy
			for i := range 3 {
				pol = append(pol, PortPolicy{Key: olc.PortKey{Proto: olc.ProtoTCP, Port: uint16(8080 + i)},
					Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1})
			}
			must(t, d.SetPolicies(pol))
			must(t, d.SetMode(olc.ModeEnforce))
			must(t, d.Heartbeat())
			must(t, d.Release())

			next := cfg
			next.MaxPorts = 32
			interrupted := errors.New("interrupted")
			interruptRenew = func(i int) error {
				if i == step {
					return interrupted
				}
				return nil
			}
			t.Cleanup(func() { interruptRenew = func(int) error { return nil } })
			if d, err := Load(next, nil); !errors.Is(err, interrupted) {
				if d != nil {
					_ = d.Release()
				}
				t.Fatalf("take-over: %v, want it interrupted at step %d", err, step)
			}
			interruptRenew = func(int) error { return nil }

			d = takeOver(t, next)
			var got []olc.PortKey
			for _, p := range d.Policies() {
				got = append(got, p.Key)
				if p.DropProbability != 1 || p.Mode != olc.ModeEnforce {
					t.Errorf("policy of %s carried as %+v, want enforce at p 1", p.Key, p)
				}
			}
			if len(got) != len(pol) {
				t.Errorf("ports carried %v, want the %d written", got, len(pol))
			}
			if v, _ := run(t, d, hookTC, syn4(8080, 1)); v != verdictDrop {
				t.Errorf("SYN to 8080 on the new program before any write: %s, want drop", v)
			}
			for _, name := range all {
				if id, mine := pinnedMapID(t, dir, name), mapID(t, d.objs.byName(name)); id != mine {
					t.Errorf("%s: pinned map %d is not this datapath's %d", name, id, mine)
				}
			}
			n.inServer(t, func() error { return d.Attach(n.NodeIf, olc.AttachTC) })
			must(t, d.Heartbeat())
			after := pinnedMapIDs(t, dir, all)
			must(t, d.Release())
			d = takeOver(t, next)
			checkAdopted(t, dir, all, after)
			must(t, d.Close())
		})
	}
}
