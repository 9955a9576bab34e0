package overload

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/olcd/olcd/internal/debpkg"
	"github.com/olcd/olcd/internal/testutil"
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

// phpCommands returns the nginx and php-fpm binaries, installing their
// Debian packages (nginx-light, php-fpm) when missing and root (debpkg).
func phpCommands() (nginx, fpm string, err error) {
	if nginx, err = debpkg.Find("nginx", "nginx-light"); err != nil {
		return "", "", fmt.Errorf("the php backend: %w", err)
	}
	if fpm, err = debpkg.Find("php-fpm", "php-fpm"); err != nil {
		return "", "", fmt.Errorf("the php backend: %w", err)
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
	keepalive_timeout %[5]s;
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
`, dir, h.net.HostIP, WorkPort, sock, phpKeepAlive(h.keepAlive)),
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
	if err := testutil.WaitFor(10*time.Second, 100*time.Millisecond, func() (bool, error) {
		_, err := os.Stat(sock)
		return err == nil, err
	}); err != nil {
		return fmt.Errorf("php-fpm did not create %s: %w (see %s)", sock, err, filepath.Join(dir, "php-fpm.log"))
	}
	p, _, err = h.startInCgroup("nginx", false, nginx, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	if err != nil {
		return err
	}
	h.backends = append(h.backends, p)
	return nil
}

// phpKeepAlive is nginx's keepalive_timeout: 0 (every request its own
// connection) unless the clients keep theirs open, then 75 s, nginx's
// default, far above the 6 s between a keep-alive client's requests at
// 0.5 C (KeepAliveClients / (0.5 × C) at C = 200/s).
func phpKeepAlive(keepAlive bool) string {
	if keepAlive {
		return "75s"
	}
	return "0"
}
