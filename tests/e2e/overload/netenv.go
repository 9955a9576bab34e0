package overload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/olcd/olcd/internal/testutil"
)

// pickRange returns the first two addresses of a documentation range the
// host does not use (testutil.FreeDocRange).
func pickRange() (host, client netip.Addr, err error) {
	p, err := testutil.FreeDocRange()
	if err != nil {
		return host, client, err
	}
	host = p.Addr().Next()
	return host, host.Next(), nil
}

const (
	// namePrefix starts every namespace, interface and cgroup the harness
	// creates, so that leftovers of a killed run can be found and removed.
	namePrefix = "olov"
	// lockPath serialises harness runs on a host: they share the addresses
	// above and would measure each other's load.
	lockPath = "/run/olcd-overload.lock"
)

// The names a harness gives its namespace and cgroup (olov-<id>), its veth
// ends (olov<id>h, olov<id>c) and its nftables table (olov<id>), <id> being
// five hex digits: leftovers are recognised by these, nothing else.
var (
	leftoverName  = regexp.MustCompile(`^olov-[0-9a-f]{5}$`)
	leftoverLink  = regexp.MustCompile(`^olov[0-9a-f]{5}[hc]$`)
	leftoverTable = regexp.MustCompile(`^olov[0-9a-f]{5}$`)
)

// Net is the client network namespace and the veth pair joining it to the
// host namespace.
type Net struct {
	// Netns is the client namespace's name (ip netns).
	Netns string
	// HostIf and ClientIf are the veth ends; olcd attaches to HostIf.
	HostIf, ClientIf string
	// HostIP (where the backend listens) and ClientIP are the ends'
	// addresses, from a documentation range (RFC 5737) the host does not
	// use, so nothing outside the pair can ever be reached through them.
	HostIP, ClientIP netip.Addr

	rig *testutil.Net // what newNet created; nil for a Net that only names ends
}

// newNet creates the namespace and the veth pair (testutil's rig, a /27 of
// a free documentation range, the host end in the host namespace: .1 the
// host, .2 the client, .3 to .30 for the client's extra source addresses,
// SourceAddrs) and tunes
// the client's ephemeral ports so that an open-loop attack of a few
// thousand new connections per second never runs out of them. id must be
// short: interface names have at most 15 bytes.
func newNet(id string) (n *Net, err error) {
	rig, err := testutil.Create(testutil.NetOptions{Named: true, NodeHere: true, Bits: sourceBits,
		Peer: namePrefix + "-" + id, NodeIf: namePrefix + id + "h", PeerIf: namePrefix + id + "c"})
	if err != nil {
		return nil, err
	}
	n = &Net{Netns: rig.Peer, HostIf: rig.NodeIf, ClientIf: rig.PeerIf, HostIP: rig.NodeIP, ClientIP: rig.PeerIP, rig: rig}
	// Per-namespace sysctls: the client closes a connection on every
	// timeout, each leaving a TIME_WAIT for 60 s.
	for _, s := range [][]string{
		{"ip", "netns", "exec", n.Netns, "sysctl", "-q", "-w", "net.ipv4.ip_local_port_range=1024 65000"},
		{"ip", "netns", "exec", n.Netns, "sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1"},
	} {
		if err := run(s...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

// sourceBits is the prefix length of the harness's network: room for
// maxSources source addresses of the client beside the two ends.
const (
	sourceBits = 27
	maxSources = 1<<(32-sourceBits) - 4 // less the network, the broadcast and the two ends
)

// SourceAddrs returns k source addresses of the client namespace beyond
// ClientIP (ClientIP + 1, + 2, ...), each put on ClientIf unless it is
// there (ip addr replace): clients of their own addresses (the fairness
// test). They are in the network's /27, so the host end's connected route
// answers them.
func (n *Net) SourceAddrs(k int) ([]netip.Addr, error) {
	if k > maxSources {
		return nil, fmt.Errorf("%d source addresses: the client network has room for %d", k, maxSources)
	}
	var out []netip.Addr
	a := n.ClientIP
	for range k {
		a = a.Next()
		if err := run("ip", "-n", n.Netns, "addr", "replace", a.String()+"/32", "dev", n.ClientIf); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// Close removes the namespace and the veth pair.
func (n *Net) Close() {
	if n.rig != nil {
		_ = n.rig.Close()
		n.rig = nil
	}
}

// Command returns argv run inside the client namespace.
func (n *Net) Command(argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Netns}, argv...)...)
}

// lockHost takes the host-wide harness lock, waiting for a running harness
// to finish. The lock dies with the process, so a killed run never leaves it
// held.
func lockHost(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", lockPath, err)
	}
	for i := 0; ; i++ {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", lockPath, err)
		}
		if i == 0 {
			fmt.Fprintf(os.Stderr, "overload: another harness holds %s; waiting for it\n", lockPath)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// removeLeftovers deletes what a killed harness run left behind: its
// namespaces (and with them its veth pairs), host-side interfaces, nftables
// tables and cgroups. Only names with the harness prefix are touched, and
// only while the host lock is held, so no live run is disturbed.
func removeLeftovers() {
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && leftoverName.MatchString(f[0]) {
				_ = run("ip", "netns", "del", f[0])
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if leftoverLink.MatchString(name) {
				_ = run("ip", "link", "del", name)
			}
		}
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 && f[0] == "table" && f[1] == "inet" && leftoverTable.MatchString(f[2]) {
				_ = run("nft", "delete", "table", f[1], f[2])
			}
		}
	}
	for _, root := range cgroupRoots() {
		dirs, _ := filepath.Glob(filepath.Join(root, namePrefix+"-*"))
		for _, d := range dirs {
			if !leftoverName.MatchString(filepath.Base(d)) {
				continue
			}
			killCgroup(d)
			// The killed tasks leave the cgroup asynchronously.
			_ = testutil.WaitFor(time.Second, 20*time.Millisecond, func() (bool, error) {
				err := os.Remove(d)
				return err == nil || os.IsNotExist(err), err
			})
		}
	}
}

// run runs argv and returns its output in the error when it fails.
func run(argv ...string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
