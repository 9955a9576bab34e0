package daemon

import (
	"slices"
	"testing"

	"github.com/olcd/olcd/internal/rules"
)

// TestSamplerConfig: the sampler reads the real root, the configured
// cgroup and the accept queues of the protected TCP ports (not UDP ones).
func TestSamplerConfig(t *testing.T) {
	cfg, _, err := rules.Load("../rules/testdata/valid-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ports := (&engine{}).resolvePorts(cfg)
	sc := samplerConfig(cfg, tcpPorts(ports))
	if sc.Root != "/" || sc.Cgroup != "system.slice/nginx.service" || !slices.Equal(sc.TCPPorts, []uint16{443, 80, 8080}) {
		t.Errorf("sampler config %+v", sc)
	}
}
