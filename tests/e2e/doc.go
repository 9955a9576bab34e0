// Package e2e holds the end-to-end tests of the built olcd binary. Each test
// builds cmd/olcd and tests/loadgen, creates a "node" and a "peer" network
// namespace joined by a veth pair (names carry the test's pid and a random
// suffix), runs `olcd run` in the node namespace against a loadgen server,
// opens connections from the peer namespace and checks what the daemon
// reports (status JSON, Prometheus metrics, decision log) against the traffic
// it sent and against the kernel's own view of the attachments.
//
// The tests need root (network namespaces, BPF) and skip without it, and in
// -short mode. Everything they create is removed in t.Cleanup; every process
// they start is killed there.
package e2e
