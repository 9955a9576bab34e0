package loader

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Capability numbers (linux/capability.h). CAP_BPF and CAP_PERFMON exist
// since Linux 5.8; before, CAP_SYS_ADMIN stands for both.
const (
	capNetAdmin    = 12
	capSysAdmin    = 21
	capSysResource = 24
	capPerfmon     = 38
	capBPF         = 39
)

// PrivilegeError says which capabilities olcd lacks to load and attach its
// programs, and how to grant them. Load returns it before touching anything.
type PrivilegeError struct {
	// Missing names the capabilities that are not effective, e.g.
	// ["CAP_BPF", "CAP_NET_ADMIN"].
	Missing []string
}

// Error names the missing capabilities and the ways to grant them.
func (e *PrivilegeError) Error() string {
	return fmt.Sprintf("olcd lacks %s: it needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, on kernels "+
		"before 5.8) to load its programs and CAP_NET_ADMIN to attach them; run it as root, or grant them "+
		"(systemd: AmbientCapabilities=CAP_BPF CAP_PERFMON CAP_NET_ADMIN CAP_SYS_RESOURCE; "+
		"setcap cap_bpf,cap_perfmon,cap_net_admin,cap_sys_resource+ep on the binary)",
		strings.Join(e.Missing, ", "))
}

// effectiveCaps returns the calling thread's effective capability set.
// Replaced in tests.
var effectiveCaps = func() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective), nil
}

// checkPrivileges returns a *PrivilegeError when the process cannot load
// and attach the datapath; a failure to read the capabilities is not an
// error (the load itself will say).
func checkPrivileges() error {
	caps, err := effectiveCaps()
	if err != nil {
		return nil
	}
	has := func(c uint) bool { return caps&(1<<c) != 0 }
	var missing []string
	if !has(capSysAdmin) {
		if !has(capBPF) {
			missing = append(missing, "CAP_BPF")
		}
		if !has(capPerfmon) {
			missing = append(missing, "CAP_PERFMON")
		}
	}
	if !has(capNetAdmin) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if len(missing) > 0 {
		return &PrivilegeError{Missing: missing}
	}
	return nil
}

// memlockError explains a failure to lift the memlock rlimit: kernels
// before 5.11 charge BPF maps and programs to it, and raising it takes
// CAP_SYS_RESOURCE.
func memlockError(err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("raise the memlock rlimit: %w: kernels before 5.11 charge BPF memory to it "+
			"and raising it needs CAP_SYS_RESOURCE; grant it, or set LimitMEMLOCK=infinity in the systemd "+
			"unit (ulimit -l unlimited in a shell)", err)
	}
	return fmt.Errorf("raise the memlock rlimit: %w", err)
}

// loadError explains a refused load: a permission error names the
// capabilities (in a user namespace they can be present and still not
// count); anything else keeps the verifier's log in the chain.
func loadError(err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("load datapath: %w: the kernel refused the BPF objects; olcd needs CAP_BPF, "+
			"CAP_PERFMON and CAP_NET_ADMIN in the initial user namespace (a container's root is not enough: "+
			"run it on the host, or in a privileged container)", err)
	}
	return fmt.Errorf("load datapath: %w", err)
}

// CheckPrivileges returns a *PrivilegeError naming the capabilities the
// process lacks to load and attach the datapath, or nil. The daemon calls it
// before it creates anything, so that a start without them leaves nothing
// behind; Load calls it too.
func CheckPrivileges() error { return checkPrivileges() }
