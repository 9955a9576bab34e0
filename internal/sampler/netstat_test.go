package sampler

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/olcd/olcd/internal/olc"
)

func TestParseListenOverflows(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		v      uint64
		found  bool
		errHas string
	}{
		{
			name: "typical",
			in:   "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 1 42 43\nIpExt: InNoRoutes\nIpExt: 0\n",
			v:    42, found: true,
		},
		{
			name: "TcpExt after another section",
			in:   "IpExt: InNoRoutes InTruncatedPkts\nIpExt: 0 0\nTcpExt: ListenOverflows\nTcpExt: 7",
			v:    7, found: true,
		},
		{name: "no TcpExt", in: "IpExt: InNoRoutes\nIpExt: 0\n"},
		{name: "no ListenOverflows column", in: "TcpExt: SyncookiesSent\nTcpExt: 1\n"},
		{name: "empty", in: ""},
		{name: "header without values", in: "TcpExt: ListenOverflows\n", errHas: "line 1: TcpExt header without a value line"},
		{name: "values line of another section", in: "TcpExt: ListenOverflows\nIpExt: 1\n", errHas: "line 2"},
		{name: "too few values", in: "TcpExt: A B ListenOverflows\nTcpExt: 1 2\n", errHas: "no value for ListenOverflows (column 3)"},
		{name: "negative value", in: "TcpExt: ListenOverflows\nTcpExt: -1\n", errHas: "not an unsigned integer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, found, err := parseListenOverflows([]byte(tc.in))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v, want one containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil || v != tc.v || found != tc.found {
				t.Fatalf("got %d %v %v, want %d %v", v, found, err, tc.v, tc.found)
			}
		})
	}
}

func TestParseListenOverflowsRealFile(t *testing.T) {
	if _, found, err := parseListenOverflows([]byte(readTestdata(t, "proc/netstat-real"))); err != nil || !found {
		t.Fatalf("found %v, err %v", found, err)
	}
}

func TestListenOverflowsPerSecond(t *testing.T) {
	netstat := func(n int) string {
		return "TcpExt: SyncookiesSent ListenOverflows\nTcpExt: 0 " + strconv.Itoa(n) + "\n"
	}
	before := mkTree(t, map[string]string{"proc/net/netstat": netstat(100)})
	after := mkTree(t, map[string]string{"proc/net/netstat": netstat(130)})
	snap := sampleRoots(t, before, after, Config{}, 0.5)
	if v, ok := snap.Get(olc.ListenOverflowsPerS); !ok || math.Abs(v-60) > 1e-9 {
		t.Fatalf("listen_overflows_per_s = %v (ok %v), want 60", v, ok)
	}
	// A counter that went backwards (network namespace recreated) is not a rate.
	snap = sampleRoots(t, after, before, Config{}, 0.5)
	if v, ok := snap.Get(olc.ListenOverflowsPerS); ok {
		t.Fatalf("listen_overflows_per_s = %v after a reset, want unavailable", v)
	}
}
