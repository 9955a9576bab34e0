// Package debpkg finds the Debian-packaged programs the tests run against
// (haproxy, nginx, ...) and installs them when they are missing and the test
// runs as root, through the project's shared install step: `scripts/deps.sh
// test` (the group of what the tests start) when the script exists, apt-get
// for the one package otherwise. Tests that cannot have the program skip
// with the reason Find returns.
package debpkg

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
)

var installMu sync.Mutex

// Find returns the path of program, installing Debian package pkg when it
// is missing and the process runs as root. Errors (the reason to skip):
// missing and not root, or the install failed (with its output).
func Find(program, pkg string) (string, error) {
	if p, err := look(program); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%s not installed and not root to install it (apt-get install -y %s)", program, pkg)
	}
	installMu.Lock()
	defer installMu.Unlock()
	if p, err := look(program); err == nil {
		return p, nil
	}
	var cmd *exec.Cmd
	if deps := depsScript(); deps != "" {
		cmd = exec.Command(deps, "test")
	} else {
		cmd = exec.Command("apt-get", "install", "-y", "--no-install-recommends", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("install %s: %s: %w\n%s", pkg, strings.Join(cmd.Args, " "), err, out)
	}
	return look(program)
}

// look finds program on PATH or in the sbin directories Debian installs
// daemons to (not on a normal user's PATH).
func look(program string) (string, error) {
	if p, err := exec.LookPath(program); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(dir, program)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	// A versioned binary, as Debian installs php-fpm (php-fpm8.2): the
	// newest.
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		if m, _ := filepath.Glob(filepath.Join(dir, program+"[0-9]*")); len(m) > 0 {
			slices.Sort(m)
			return m[len(m)-1], nil
		}
	}
	return "", errors.New(program + " not found")
}

// depsScript returns scripts/deps.sh of this checkout, or "".
func depsScript() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	p := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "deps.sh")
	if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
		return p
	}
	return ""
}
