// Package setup tests scripts/deps.sh, the one install step that `make
// demo`, `make test` and .ci/run share, against mocked machines: PATH holds
// only fake id, dpkg-query and apt-get (plus the few coreutils the script
// calls), and OLCD_DEPS_ROOT points every file check at a fake root, so each
// case is a machine with exactly the packages it names. It also tests
// scripts/test-log.sh, make test's log and closing summary.
package setup

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// machine describes one mocked host.
type machine struct {
	uid      int
	noApt    bool     // apt-get absent
	aptFails bool     // apt-get install exits 100
	dpkg     []string // packages dpkg-query reports as installed
	files    []string // files under the fake root (programs are made executable)
	noDpkg   bool     // dpkg-query absent (a non-Debian host)
}

// everything is a fake root holding every program and file the groups check.
var everything = []string{
	"/usr/bin/make", "/usr/sbin/ip", "/usr/sbin/nft", "/usr/sbin/sysctl", "/usr/bin/systemd-analyze", "/usr/sbin/nginx",
	"/usr/sbin/php-fpm8.2", "/usr/sbin/haproxy", "/usr/bin/prometheus", "/usr/bin/promtool", "/usr/bin/clang-format-14",
	"/usr/sbin/mariadbd", "/usr/bin/mariadb-install-db", "/usr/sbin/debootstrap",
	"/usr/bin/clang-14", "/usr/bin/llvm-strip-14", "/usr/include/linux/bpf.h",
}

func without(list []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(s string) bool { return slices.Contains(drop, s) })
}

func TestDeps(t *testing.T) {
	for _, tc := range []struct {
		name     string
		m        machine
		args     []string
		wantCode int
		wantOut  string   // substring of stdout+stderr; "" means no output at all
		wantApt  []string // apt-get invocations, in order
	}{
		{
			name: "all present as files: nothing printed, no apt-get",
			m:    machine{uid: 0, files: everything, noDpkg: true},
			args: []string{"all"},
		},
		{
			name: "all present per dpkg although not on PATH",
			m: machine{uid: 0, dpkg: []string{"make", "iproute2", "nftables", "procps", "systemd", "nginx-full", "php-fpm",
				"haproxy", "prometheus", "clang-format-14", "mariadb-server", "debootstrap"}},
			args: []string{"test"},
		},
		{
			name:    "root with apt: installs exactly what is missing, says so",
			m:       machine{uid: 0, files: without(everything, "/usr/sbin/nft", "/usr/sbin/haproxy", "/usr/bin/promtool")},
			args:    []string{"test"},
			wantOut: "deps: installing nftables haproxy prometheus",
			wantApt: []string{"update -q", "install -y -q --no-install-recommends nftables haproxy prometheus"},
		},
		{
			name:    "nginx from another package counts; php-fpm found by its versioned binary",
			m:       machine{uid: 0, dpkg: []string{"nginx-core"}, files: without(everything, "/usr/sbin/nginx", "/usr/sbin/ip")},
			args:    []string{"test"},
			wantOut: "deps: installing iproute2 (",
			wantApt: []string{"update -q", "install -y -q --no-install-recommends iproute2"},
		},
		{
			name:     "not root: one line naming the packages, exit 1, no apt-get",
			m:        machine{uid: 1000, files: without(everything, "/usr/sbin/nft", "/usr/sbin/php-fpm8.2")},
			args:     []string{"test"},
			wantCode: 1,
			wantOut:  "deps: missing packages: nftables php-fpm (not root:",
		},
		{
			name:     "root without apt-get",
			m:        machine{uid: 0, noApt: true, noDpkg: true, files: without(everything, "/usr/bin/clang-14")},
			args:     []string{"build"},
			wantCode: 1,
			wantOut:  "deps: missing packages: clang-14 (no apt-get:",
		},
		{
			name:    "run group only checks what make demo needs",
			m:       machine{uid: 0, files: []string{"/usr/bin/make", "/usr/sbin/ip", "/usr/sbin/nft", "/usr/sbin/sysctl"}},
			args:    []string{"run"},
			wantOut: "",
		},
		{
			name:    "demo group: the php backend's nginx and php-fpm, not what only make test starts",
			m:       machine{uid: 0, files: []string{"/usr/bin/make", "/usr/sbin/ip", "/usr/sbin/nft", "/usr/sbin/sysctl"}},
			args:    []string{"-n", "demo"},
			wantOut: "deps: would install: nginx-light php-fpm\n",
		},
		{
			name:    "build group is separate from test",
			m:       machine{uid: 0, files: without(everything, "/usr/bin/clang-14", "/usr/include/linux/bpf.h")},
			args:    []string{"test"},
			wantOut: "",
		},
		{
			name:    "groups overlap: each package once",
			m:       machine{uid: 0, files: nil},
			args:    []string{"-n", "run", "test", "all"},
			wantOut: "deps: would install: make iproute2 nftables procps nginx-light php-fpm systemd haproxy prometheus clang-format-14 mariadb-server debootstrap clang-14 llvm-14 linux-libc-dev\n",
		},
		{
			name:    "dry run as non-root: exit 0, nothing installed",
			m:       machine{uid: 1000, files: without(everything, "/usr/bin/llvm-strip-14")},
			args:    []string{"--dry-run", "all"},
			wantOut: "deps: would install: llvm-14\n",
		},
		{
			name:     "apt-get failure is reported with its output",
			m:        machine{uid: 0, aptFails: true, files: without(everything, "/usr/sbin/haproxy")},
			args:     []string{"test"},
			wantCode: 1,
			wantOut:  "E: Unable to locate package haproxy",
			wantApt:  []string{"update -q", "install -y -q --no-install-recommends haproxy"},
		},
		{
			name:     "unknown group",
			m:        machine{uid: 0, files: everything},
			args:     []string{"tests"},
			wantCode: 2,
			wantOut:  "usage: scripts/deps.sh",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, apt := runDeps(t, tc.m, tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, out)
			}
			if tc.wantOut == "" && out != "" {
				t.Errorf("output %q, want none", out)
			}
			if !strings.Contains(out, tc.wantOut) {
				t.Errorf("output %q does not contain %q", out, tc.wantOut)
			}
			if strings.Count(strings.TrimSpace(out), "\n") > 0 && tc.wantCode == 1 && len(tc.wantApt) == 0 {
				t.Errorf("refusal takes %d lines, want one:\n%s", strings.Count(out, "\n"), out)
			}
			if !slices.Equal(apt, tc.wantApt) {
				t.Errorf("apt-get calls %q, want %q", apt, tc.wantApt)
			}
		})
	}
}

// runDeps runs scripts/deps.sh on the mocked machine m and returns its exit
// code, its combined output and the apt-get calls it made.
func runDeps(t *testing.T, m machine, args ...string) (int, string, []string) {
	t.Helper()
	dir := t.TempDir()
	bin, root, aptLog := filepath.Join(dir, "bin"), filepath.Join(dir, "root"), filepath.Join(dir, "apt.log")
	mustMkdir(t, bin)
	for _, f := range m.files {
		p := filepath.Join(root, f)
		mustMkdir(t, filepath.Dir(p))
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script("id", `[ "$1" = -u ] && echo `+strconv.Itoa(m.uid))
	if !m.noDpkg {
		// dpkg-query -W -f='${Status}' PKG
		var cases strings.Builder
		for _, p := range m.dpkg {
			cases.WriteString(p + ") printf 'install ok installed'; exit 0;; ")
		}
		script("dpkg-query", `for a; do last=$a; done; case $last in `+cases.String()+`*) echo "dpkg-query: no packages found matching $last" >&2; exit 1;; esac`)
	}
	if !m.noApt {
		fail := ""
		if m.aptFails {
			fail = `[ "$1" = install ] && { echo "E: Unable to locate package $last" >&2; exit 100; };`
		}
		script("apt-get", `echo "$*" >>`+aptLog+`; for a; do last=$a; done; `+fail+` exit 0`)
	}
	for _, tool := range []string{"mktemp", "cat", "rm"} { // what the script calls besides the mocks
		real, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := os.Symlink(real, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}

	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	cmd := exec.Command(bash, append([]string{"../../scripts/deps.sh"}, args...)...)
	cmd.Env = []string{"PATH=" + bin, "OLCD_DEPS_ROOT=" + root, "LC_ALL=C"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run deps.sh: %v", err)
	}
	var apt []string
	if data, err := os.ReadFile(aptLog); err == nil {
		apt = strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	return code, out.String(), apt
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
