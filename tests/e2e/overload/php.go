package overload

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The php backend: Debian's nginx in front of php-fpm with a static pool,
// the way a PHP application is deployed. Its capacity is the pool's
// children, each held by a script that spends a little CPU and then waits
// 20 ms (a database or an API call): 4 ÷ ~21 ms ≈ 190 req/s at a small
// share of the CPU quota.
const (
	// PHPChildren is php-fpm's pm.max_children (pm = static).
	PHPChildren = 4
	// phpScript spins a little (~0.5 ms of CPU) and sleeps 20 ms.
	phpScript = `<?php
$x = 0;
for ($i = 0; $i < 20000; $i++) { $x = ($x * 31 + $i) % 1000003; }
usleep(20000);
header('Connection: close');
echo "ok $x\n";
`
)

// phpPackages maps the commands the php backend runs to their Debian
// packages.
var phpPackages = map[string]string{"nginx": "nginx-light", "php-fpm": "php-fpm"}

// lookCmd finds a command in PATH or /usr/sbin; "php-fpm" matches the
// versioned binary Debian installs (php-fpm8.2).
func lookCmd(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		if m, _ := filepath.Glob(filepath.Join(dir, name+"*")); len(m) > 0 {
			slices.Sort(m)
			return m[len(m)-1]
		}
	}
	return ""
}

// depsScript finds the project's install step, scripts/deps.sh, above the
// working directory or beside the binary's directory (bin/../scripts).
func depsScript() string {
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			dirs = append(dirs, d)
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(filepath.Dir(exe)))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "scripts", "deps.sh")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// phpCommands returns the nginx and php-fpm binaries, installing their
// packages when missing through scripts/deps.sh (group test, which lists
// them), or apt-get without it. The harness runs as root.
func phpCommands() (nginx, fpm string, err error) {
	var missing []string
	for cmd, pkg := range phpPackages {
		if lookCmd(cmd) == "" {
			missing = append(missing, pkg)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		argv := append([]string{"apt-get", "install", "-y", "--no-install-recommends"}, missing...)
		if s := depsScript(); s != "" {
			argv = []string{s, "test"}
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("the php backend needs %s: %s: %w\n%s", strings.Join(missing, " "), strings.Join(argv, " "), err, out)
		}
	}
	nginx, fpm = lookCmd("nginx"), lookCmd("php-fpm")
	if nginx == "" || fpm == "" {
		return "", "", errors.New("nginx or php-fpm still missing after installing nginx-light php-fpm")
	}
	return nginx, fpm, nil
}

// startPHP writes the configs of php-fpm and nginx into the run's
// directory and starts both in the backend's cgroup, nginx listening on
// the work port.
func (h *Harness) startPHP() error {
	nginx, fpm, err := phpCommands()
	if err != nil {
		return err
	}
	dir := filepath.Join(h.opt.OutDir, "php")
	if err := os.MkdirAll(filepath.Join(dir, "www"), 0o755); err != nil {
		return err
	}
	sock := filepath.Join(dir, "php-fpm.sock")
	files := map[string]string{
		"www/index.php": phpScript,
		// pm = static: the pool is the capacity; the listen backlog
		// and the rest are Debian's defaults.
		"php-fpm.conf": fmt.Sprintf(`[global]
error_log = %[1]s/php-fpm.log
pid = %[1]s/php-fpm.pid
daemonize = no
[www]
user = root
group = root
listen = %[2]s
pm = static
pm.max_children = %[3]d
`, dir, sock, PHPChildren),
		// worker_connections sized for the connections a 3 C open
		// loop keeps open (requests wait up to the clients' timeout).
		"nginx.conf": fmt.Sprintf(`user root;
worker_processes 1;
worker_rlimit_nofile 16384;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log;
events { worker_connections 8192; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	keepalive_timeout 0;
	server {
		listen %[2]s:%[3]d;
		root %[1]s/www;
		location / {
			include /etc/nginx/fastcgi_params;
			fastcgi_param SCRIPT_FILENAME $document_root/index.php;
			fastcgi_pass unix:%[4]s;
		}
	}
}
`, dir, h.net.HostIP, WorkPort, sock),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	_ = os.Remove(sock)
	p, _, err := h.startInCgroup("php-fpm", false, fpm, "-F", "-R", "-y", filepath.Join(dir, "php-fpm.conf"))
	if err != nil {
		return err
	}
	h.backends = append(h.backends, p)
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if i == 100 {
			return fmt.Errorf("php-fpm did not create %s within 10 s (see %s)", sock, filepath.Join(dir, "php-fpm.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	p, _, err = h.startInCgroup("nginx", false, nginx, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	if err != nil {
		return err
	}
	h.backends = append(h.backends, p)
	return nil
}
