package daemon

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/sampler"
)

// TestAutoPortsManagement: under ports: auto, a listener on a management
// port (SSH by default) is not protected and the status says why; an
// empty exceptions.management protects it again.
func TestAutoPortsManagement(t *testing.T) {
	listeners := []sampler.Listener{
		{Addr: netip.MustParseAddrPort("0.0.0.0:22")},
		{Addr: netip.MustParseAddrPort("[::]:22")},
		{Addr: netip.MustParseAddrPort("0.0.0.0:80")},
		{Addr: netip.MustParseAddrPort("0.0.0.0:2222")},
		{Addr: netip.MustParseAddrPort("127.0.0.1:8080")},
	}
	tests := []struct {
		name, doc string
		ports     []uint16
		exempt    []api.ExemptListener
	}{
		{"default", "mode: enforce\n", []uint16{80, 2222},
			[]api.ExemptListener{{Proto: "tcp", Port: 22, Reason: "exceptions.management"}}},
		{"management off", "exceptions: {management: []}\n", []uint16{22, 80, 2222}, nil},
		{"two management ports", "exceptions: {management: [22, 2222]}\n", []uint16{80},
			[]api.ExemptListener{{Proto: "tcp", Port: 22, Reason: "exceptions.management"}, {Proto: "tcp", Port: 2222, Reason: "exceptions.management"}}},
		{"exception port", "exceptions: {ports: [{port: 80}]}\n", []uint16{2222},
			[]api.ExemptListener{{Proto: "tcp", Port: 22, Reason: "exceptions.management"}, {Proto: "tcp", Port: 80, Reason: "exceptions.ports"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := rules.Parse([]byte(tt.doc), "t.yaml")
			if err != nil {
				t.Fatal(err)
			}
			var got []uint16
			for _, p := range autoPorts(cfg, listeners) {
				got = append(got, p.Key.Port)
			}
			if !slices.Equal(got, tt.ports) {
				t.Errorf("protected %v, want %v", got, tt.ports)
			}
			if ex := exemptListeners(cfg, listeningPorts(listeners)); !slices.Equal(ex, tt.exempt) {
				t.Errorf("exempt listeners %+v, want %+v", ex, tt.exempt)
			}
		})
	}
}

// TestAutoPortsSkipSSH: a daemon on ports: auto with a real listener on
// tcp/22 (sshd, or the test's own) gives it no policy, programs it as an
// exception, and shows it in the status as exempt with the reason; a live
// `exceptions: {management: []}` protects it.
func TestAutoPortsSkipSSH(t *testing.T) {
	ln, err := net.Listen("tcp", "0.0.0.0:22")
	switch {
	case err == nil:
		t.Cleanup(func() { ln.Close() })
	case errors.Is(err, syscall.EADDRINUSE): // sshd listens already
	default:
		t.Skipf("cannot listen on tcp/22: %v", err)
	}
	d := startTestDaemon(t, "mode: enforce\ninterfaces: [olcdtest0]\nports: auto\n")
	ssh := olc.PortKey{Proto: olc.ProtoTCP, Port: 22}
	if slices.ContainsFunc(d.eng.ports, func(p loader.PortPolicy) bool { return p.Key == ssh }) {
		t.Fatalf("tcp/22 protected under ports: auto: %v", portNames(d.eng.ports))
	}
	d.publish()
	st := d.Status()
	if !slices.Contains(st.Exceptions, "tcp/22 (management)") ||
		!slices.Contains(st.ListenersExempt, api.ExemptListener{Proto: "tcp", Port: 22, Reason: "exceptions.management"}) {
		t.Errorf("status exceptions %q, exempt listeners %+v: want tcp/22 as a management port", st.Exceptions, st.ListenersExempt)
	}
	if got := d.datapathPorts(t); slices.Contains(got, "tcp/22") {
		t.Errorf("tcp/22 has a policy in the datapath: %v", got)
	}
	cfg, _, err := d.eng.cfg.Patch([]byte("exceptions: {management: []}"), "patch")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.apply(cfg); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(d.eng.ports, func(p loader.PortPolicy) bool { return p.Key == ssh }) || !slices.Contains(d.datapathPorts(t), "tcp/22") {
		t.Errorf("with management: [] tcp/22 not protected: %v", portNames(d.eng.ports))
	}
	d.publish()
	if st := d.Status(); len(st.ListenersExempt) != 0 || strings.Contains(strings.Join(st.Exceptions, ","), "tcp/22") {
		t.Errorf("with management: [] status still exempts: %q %+v", st.Exceptions, st.ListenersExempt)
	}
	d.tick()
	d.noErrorsLogged(t)
}
