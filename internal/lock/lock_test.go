package lock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// helperEnv makes the test binary, re-executed by TestDeadHolderDoesNotBlock,
// take the lock named by the variable and exit without releasing it.
const helperEnv = "OLCD_LOCK_HELPER_PATH"

func TestMain(m *testing.M) {
	if p := os.Getenv(helperEnv); p != "" {
		if _, err := TryExclusive(p); err != nil {
			os.Exit(3)
		}
		os.Exit(0) // the kernel drops the lock; the file stays behind
	}
	os.Exit(m.Run())
}

func TestExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.lock")
	first, err := TryExclusive(path)
	if err != nil {
		t.Fatal(err)
	}
	// A second open file description, even in this process, is refused.
	_, err = TryExclusive(path)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second lock: %v, want ErrLocked naming %s", err, path)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after Release: %v, want removed", err)
	}
	if err := first.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	var none *File
	if err := none.Release(); err != nil {
		t.Errorf("nil Release: %v", err)
	}
	again, err := TryExclusive(path)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	_ = again.Release()
}

// A process that exits holding the lock (killed, crashed) leaves its file
// behind but not its lock: the next TryExclusive succeeds.
func TestDeadHolderDoesNotBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the dead holder's file: %v, want it left behind", err)
	}
	l, err := TryExclusive(path)
	if err != nil {
		t.Fatalf("lock after the holder died: %v", err)
	}
	_ = l.Release()
}

// A lock file removed under its holder (by hand) does not block the next
// process, and the old holder's Release leaves the new holder's file alone.
func TestRemovedUnderHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	old, err := TryExclusive(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	cur, err := TryExclusive(path)
	if err != nil {
		t.Fatalf("lock the new file: %v", err)
	}
	if err := old.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the new holder's file after the old Release: %v", err)
	}
	if _, err := TryExclusive(path); !errors.Is(err, ErrLocked) {
		t.Errorf("lock beside the new holder: %v, want ErrLocked", err)
	}
	_ = cur.Release()
}

// The holder's PID is in the lock file, for a refusal to name; a refused
// TryExclusive does not overwrite it.
func TestHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if got := Holder(path); got != 0 {
		t.Fatalf("Holder of a missing lock: %d, want 0", got)
	}
	l, err := TryExclusive(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release() }()
	if _, err := TryExclusive(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	if got := Holder(path); got != os.Getpid() {
		t.Fatalf("Holder: %d, want this process's %d", got, os.Getpid())
	}
}
