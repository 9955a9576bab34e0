package loader

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPrivilegeErrors loads the datapath in a child process without the
// capabilities it needs (as nobody; as root with CAP_BPF, CAP_PERFMON and
// CAP_SYS_ADMIN taken out of the bounding set by setpriv) and checks that
// the error names what is missing and how to grant it, instead of the
// memlock or verifier text the kernel answers.
func TestPrivilegeErrors(t *testing.T) {
	requireRoot(t)
	if os.Getenv("OLCD_PRIVILEGE_CHILD") == "1" {
		t.Skip("in the child")
	}
	type run struct {
		name    string
		cmd     func() *exec.Cmd
		missing []string
		present []string
	}
	bin := copyForNobody(t, os.Args[0])
	self := func(wrap ...string) *exec.Cmd {
		args := append(wrap, bin, "-test.run=^TestPrivilegeChild$", "-test.v")
		c := exec.Command(args[0], args[1:]...)
		c.Env = append(os.Environ(), "OLCD_PRIVILEGE_CHILD=1")
		return c
	}
	runs := []run{
		{"nobody", func() *exec.Cmd {
			c := self()
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			return c
		}, []string{"CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN"}, nil},
	}
	if sp, err := exec.LookPath("setpriv"); err == nil {
		runs = append(runs, run{"root-without-bpf", func() *exec.Cmd {
			return self(sp, "--bounding-set", "-bpf,-perfmon,-sys_admin", "--inh-caps", "-all")
		}, []string{"CAP_BPF", "CAP_PERFMON"}, []string{"CAP_NET_ADMIN"}})
	} else {
		t.Log("setpriv not found: only the run as nobody")
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			out, err := r.cmd().CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			text := string(out)
			line := ""
			for _, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "load error:") {
					line = l
				}
			}
			if line == "" {
				t.Fatalf("child printed no load error:\n%s", text)
			}
			_, missing, ok := strings.Cut(line, "lacks ")
			missing, _, _ = strings.Cut(missing, ":")
			if !ok {
				t.Fatalf("the error names no missing capability: %s", line)
			}
			for _, c := range r.missing {
				if !strings.Contains(missing, c) {
					t.Errorf("error does not name %s as missing: %s", c, line)
				}
			}
			for _, c := range r.present {
				if strings.Contains(missing, c) {
					t.Errorf("error names %s, which the child has: %s", c, line)
				}
			}
			for _, want := range []string{"run it as root", "AmbientCapabilities="} {
				if !strings.Contains(line, want) {
					t.Errorf("error does not say how to fix it (%q): %s", want, line)
				}
			}
			if strings.Contains(line, "memlock") || strings.Contains(line, "verifier") {
				t.Errorf("error still shows the kernel's symptom: %s", line)
			}
		})
	}
}

// TestPrivilegeChild is the child of TestPrivilegeErrors: it prints what
// Load says.
func TestPrivilegeChild(t *testing.T) {
	if os.Getenv("OLCD_PRIVILEGE_CHILD") != "1" {
		t.Skip("only run as the child of TestPrivilegeErrors")
	}
	d, err := Load(Config{}, nil)
	if err == nil {
		d.Close()
		fmt.Println("load error: none")
		return
	}
	var pe *PrivilegeError
	if !errors.As(err, &pe) {
		fmt.Printf("load error: not a PrivilegeError: %v\n", err)
		return
	}
	fmt.Printf("load error: %v\n", err)
}

// TestMemlockError: the memlock failure of kernels before 5.11 names the
// capability and the systemd setting (this kernel accounts BPF memory to
// the cgroup and never gets there).
func TestMemlockError(t *testing.T) {
	err := memlockError(fmt.Errorf("failed to set memlock rlimit: %w", unix.EPERM))
	for _, want := range []string{"CAP_SYS_RESOURCE", "LimitMEMLOCK=infinity", "before 5.11"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
	if !errors.Is(err, unix.EPERM) {
		t.Errorf("%v does not wrap EPERM", err)
	}
}

// copyForNobody copies the test binary where any user can run it (go test
// builds it in a directory only root can enter).
func copyForNobody(t *testing.T, bin string) string {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "olcd-priv-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	out := dir + "/loader.test"
	must(t, os.WriteFile(out, data, 0o755))
	return out
}
