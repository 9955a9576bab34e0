package daemon

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/testutil"
)

// TestFailedStartLeavesNothing starts the daemon where it must fail and
// checks that nothing it created is left: as nobody (no capabilities: the
// error names them and no directory is created), and as root with the
// metrics address taken (the admin socket directory and the decision log
// were created by then, and go again).
func TestFailedStartLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t, "runs a child as nobody and takes the capabilities' place")
	if os.Getenv("OLCD_LEFTOVER_CHILD") != "" {
		t.Skip("in the child")
	}
	base, err := os.MkdirTemp("", "olcd-leftovers-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	// Anyone may create in it, as in /tmp: the sticky bit keeps the
	// socket directory check content.
	if err := os.Chmod(base, 0o777|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}

	t.Run("nobody", func(t *testing.T) {
		bin := filepath.Join(base, "daemon.test")
		data, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(bin)
		root := filepath.Join(base, "nobody")
		c := exec.Command(bin, "-test.run=^TestFailedStartChild$", "-test.v")
		c.Env = append(os.Environ(), "OLCD_LEFTOVER_CHILD="+root)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "run error: olcd lacks CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN") {
			t.Errorf("the run as nobody did not name the missing capabilities:\n%s", out)
		}
		checkGone(t, root)
	})

	t.Run("metrics-address-taken", func(t *testing.T) {
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		root := filepath.Join(base, "root")
		err = runFailing(root, busy.Addr().String(), func() error { return nil })
		if err == nil || !strings.Contains(err.Error(), "listen for metrics") {
			t.Fatalf("run: %v, want the metrics listen error", err)
		}
		checkGone(t, root)
	})
}

// TestFailedStartChild is the child of TestFailedStartLeavesNothing.
func TestFailedStartChild(t *testing.T) {
	root := os.Getenv("OLCD_LEFTOVER_CHILD")
	if root == "" {
		t.Skip("only run as the child of TestFailedStartLeavesNothing")
	}
	err := runFailing(root, "off", loader.CheckPrivileges)
	t.Logf("run error: %v", err)
}

// runFailing runs a daemon on the embedded default whose admin socket and
// decision log lie under root (which does not exist yet).
func runFailing(root, metrics string, check func() error) error {
	orig := checkPrivileges
	checkPrivileges = check
	defer func() { checkPrivileges = orig }()
	d, err := New(Options{
		AdminSocket:    filepath.Join(root, "run", "olcd", "olcd.sock"),
		DecisionLog:    filepath.Join(root, "log", "olcd", "decisions.jsonl"),
		MetricsAddress: metrics,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.Run(ctx)
}

func checkGone(t *testing.T, root string) {
	t.Helper()
	if _, err := os.Lstat(root); !errors.Is(err, fs.ErrNotExist) {
		var left []string
		_ = filepath.WalkDir(root, func(p string, _ fs.DirEntry, _ error) error {
			left = append(left, p) // what a walk error leaves out is not what the test asks
			return nil
		})
		t.Errorf("the failed start left %v", left)
	}
}
