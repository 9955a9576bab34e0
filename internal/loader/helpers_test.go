package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/olcd/olcd/internal/testutil"
)

// Return codes the tests compare against (linux/bpf.h, linux/pkt_cls.h).
const (
	xdpDrop    = 1
	xdpPass    = 2
	xdpTx      = 3
	tcActShot  = 2
	tcActUnspc = 0xffffffff // TC_ACT_UNSPEC (-1): pass, let the next program run
)

// requireRoot skips tests that load BPF programs.
func requireRoot(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t, "loads BPF programs (BPF_PROG_TEST_RUN)")
}

// loadTest loads a datapath closed at the end of the test.
func loadTest(t testing.TB, cfg Config) *Datapath {
	t.Helper()
	requireRoot(t)
	d, err := Load(cfg, nil)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load: %+v", ve)
		}
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return d
}

// hook names one of the two programs.
type hook string

const (
	hookXDP hook = "xdp"
	hookTC  hook = "tc"
)

var hooks = []hook{hookXDP, hookTC}

func (d *Datapath) prog(h hook) *ebpf.Program {
	if h == hookXDP {
		return d.objs.OlcdXdp
	}
	return d.objs.OlcdTc
}

// verdict is a program result in hook-independent terms.
type verdict string

const (
	verdictPass verdict = "pass"
	verdictDrop verdict = "drop"
)

func toVerdict(t testing.TB, h hook, ret uint32) verdict {
	t.Helper()
	switch {
	case h == hookXDP && ret == xdpPass, h == hookTC && ret == tcActUnspc:
		return verdictPass
	case h == hookXDP && ret == xdpDrop, h == hookTC && ret == tcActShot:
		return verdictDrop
	}
	t.Fatalf("%s program returned %#x, neither pass nor drop", h, ret)
	return ""
}

// run runs one frame through a program with BPF_PROG_TEST_RUN and returns
// the verdict and the frame as the program left it.
func run(t testing.TB, d *Datapath, h hook, frame []byte) (verdict, []byte) {
	t.Helper()
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	ret, err := d.prog(h).Run(opts)
	if err != nil {
		t.Fatalf("run %s program: %v", h, err)
	}
	return toVerdict(t, h, ret), opts.DataOut
}

func stats(t testing.TB, d *Datapath) Stats {
	t.Helper()
	s, err := d.Stats()
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return s
}

// sub returns a - b field by field.
func (a Counters) sub(b Counters) Counters {
	return Counters{
		NewConns:       a.NewConns - b.NewConns,
		Passed:         a.Passed - b.Passed,
		Dropped:        a.Dropped - b.Dropped,
		Marked:         a.Marked - b.Marked,
		WouldDrop:      a.WouldDrop - b.WouldDrop,
		Exempt:         a.Exempt - b.Exempt,
		Stale:          a.Stale - b.Stale,
		SYNRetransmits: a.SYNRetransmits - b.SYNRetransmits,
		Rejected:       a.Rejected - b.Rejected,
		WouldReject:    a.WouldReject - b.WouldReject,
	}
}

// totalNew sums NewConns over every port and "other".
func (s Stats) totalNew() uint64 {
	n := s.Other.NewConns
	for _, c := range s.Ports {
		n += c.NewConns
	}
	return n
}

// ipv4Checksum returns the one's complement sum of an IPv4 header; 0 means
// the checksum field is right.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// must is testutil.Must, under the name this package's tests use.
var must = testutil.Must

// bpfFilters lists the bpf filters of the interface named ifname, in the
// current netns, under each parent (netlink.HANDLE_MIN_INGRESS, _EGRESS);
// an interface without a clsact qdisc has none (the kernel answers EINVAL).
func bpfFilters(ifname string, parents ...uint32) ([]*netlink.BpfFilter, error) {
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, err
	}
	defer nl.Close()
	l, err := nl.LinkByName(ifname)
	if err != nil {
		return nil, err
	}
	var bfs []*netlink.BpfFilter
	for _, parent := range parents {
		fs, err := listFilters(nl, l, parent)
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return nil, err
		}
		for _, f := range fs {
			if bf, ok := f.(*netlink.BpfFilter); ok {
				bfs = append(bfs, bf)
			}
		}
	}
	return bfs, nil
}

// olcdFilterLeft names a filter of olcd's (FilterPrefix) left on ifname's
// ingress or egress, in the current netns; nil when there is none.
func olcdFilterLeft(ifname string) error {
	bfs, err := bpfFilters(ifname, netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		return err
	}
	for _, bf := range bfs {
		if strings.HasPrefix(bf.Name, FilterPrefix) {
			return fmt.Errorf("%s still has filter %q", ifname, bf.Name)
		}
	}
	return nil
}
