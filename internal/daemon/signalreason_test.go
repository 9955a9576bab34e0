package daemon

import (
	"errors"
	"testing"

	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/sampler"
)

// TestUnavailableReason: status says why accept_queue_fill has no value
// (it said "unavailable" alone while a protected port had no listener, as
// at boot before the service listens).
func TestUnavailableReason(t *testing.T) {
	tcp := tcpPolicies
	udp := []loader.PortPolicy{{Key: olc.PortKey{Proto: olc.ProtoUDP, Port: 53}}}
	diagErr := []olc.SourceError{{Source: sampler.SourceSockDiag, Err: errors.New("netlink: protocol not supported")}}
	discoverErr := errors.New("netlink: protocol not supported")
	tests := []struct {
		name     string
		sig      olc.Signal
		snap     olc.Snapshot
		ports    []loader.PortPolicy
		discover error // ports: auto's last discovery of the listeners
		want     string
	}{
		{"no listener on the protected port", olc.AcceptQueueFill, olc.Snapshot{}, tcp(8080), nil, "no listener on tcp/8080"},
		{"none on any of them", olc.AcceptQueueFill, olc.Snapshot{}, append(tcp(80, 443), udp...), nil, "no listener on tcp/80, tcp/443"},
		{"many named, the rest counted", olc.AcceptQueueFill, olc.Snapshot{}, tcp(1, 2, 3, 4, 5), nil, "no listener on tcp/1, tcp/2, tcp/3, 2 more"},
		{"no TCP port protected", olc.AcceptQueueFill, olc.Snapshot{}, udp, nil, "no protected TCP port"},
		{"no port at all", olc.AcceptQueueFill, olc.Snapshot{}, nil, nil, "no protected TCP port"},
		{"sock_diag failed", olc.AcceptQueueFill, olc.Snapshot{Errors: diagErr}, tcp(8080), nil, "sock_diag unreadable (sources unreadable, below)"},
		{"a listener measured: no reason", olc.AcceptQueueFill, olc.Snapshot{AcceptQueueFill: map[uint16]float64{443: 0.1}}, tcp(443), nil, ""},
		// ports: auto found no port, since it could not list the
		// listeners: the sampler dumps nothing, and only the discovery
		// knows (olcd_sample_errors_total{source="sock_diag"} rises, so
		// OlcdSignalUnavailable fires: status must not say "no port").
		{"ports: auto cannot list the listeners", olc.AcceptQueueFill, olc.Snapshot{}, nil, discoverErr, "sock_diag unreadable (ports: auto cannot list the listeners: netlink: protocol not supported)"},
		{"another signal", olc.PSICPUSome, olc.Snapshot{}, tcp(8080), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unavailableReason(tt.sig, &tt.snap, tt.ports, tt.discover); got != tt.want {
				t.Errorf("unavailableReason = %q, want %q", got, tt.want)
			}
		})
	}
}
