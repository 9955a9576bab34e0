// Package overload is the harness behind `make demo` and the end-to-end
// overload suite (tests/e2e/overload_test.go): it answers, with real TCP
// traffic on this machine, whether olcd keeps a service alive at three times
// its capacity and still admits what the service can serve.
//
// The pieces, each started and removed by the harness:
//
//	client netns ──veth── host
//	  attacker (vegeta,       backend: HTTP, ~5 ms of CPU per request, in a
//	  open loop, a new        cgroup with a 1-CPU quota; health port beside it
//	  connection per request) olcd on TC ingress of the host-side veth
//	                          (or nftables `limit rate`, or aegis BBR in the app)
//
// A run is a Scenario (phases of offered load, as multiples of the calibrated
// capacity C, and capacity changes) under a Variant (none, observe, enforce,
// static, inapp; enforce-reject: olcd with the reject action). The load is
// the open-loop attacker, or for a scenario with Client ClientClosedPool
// (ClosedPool3x) a pool of 64 blocking clients (RunClosedPool: one request of
// at most 2 s in flight per client, scheduled, missed due times skipped), as
// thread pools and connection-per-query worker pools load a service:
// `olcd-overload demo -scenarios closed-pool-3x -variants enforce,enforce-reject`. Calibrate finds C with a step load. Results come back per
// phase (offered, goodput within the SLO, latency percentiles, errors,
// timeouts, SYN drop ratio, backend CPU) and as a time series per second,
// which Report prints, writes as JSON and plots. Beside the harness's own
// HTTP backends, Backend php is Debian's nginx + php-fpm (php.go) and db
// Debian's MariaDB with connection-per-query database clients (mariadb.go,
// scenario db-closed-pool-3x), each a private instance the harness starts
// in the backend's cgroup.
//
// The harness needs root: it creates a network namespace, a veth pair, a
// cgroup and nftables rules, and olcd loads BPF programs.
package overload
