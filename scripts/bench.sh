#!/usr/bin/env bash
# Runs olcd's benchmarks side by side in one run, so figures are ratios to a
# baseline measured on the same (noisy) machine at the same time:
#   - datapath: BPF_PROG_TEST_RUN cost per packet, as ns added over an empty
#     XDP program (needs root);
#   - sampler: one tick against a fixture root and the live machine, beside
#     a plain read of the same files;
#   - controller: one Step with many ports.
# BENCH_COUNT repeats each benchmark (default 5) for benchstat-style spread.
# The daemon's own overhead over minutes is scripts/bench-daemon.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${BENCH_COUNT:-5}

echo "== datapath (ns/packet; *_over_floor is the cost added over an empty XDP program)"
if [ "$(id -u)" = 0 ]; then
	go test -run '^$' -bench 'BenchmarkDatapath' -count "$count" ./internal/loader/
else
	echo "skipped: BPF_PROG_TEST_RUN needs root"
fi

echo "== sampler (one tick)"
go test -run '^$' -bench 'BenchmarkTick' -benchmem -count "$count" ./internal/sampler/

echo "== controller (one Step)"
go test -run '^$' -bench 'BenchmarkStep' -benchmem -count "$count" ./internal/adaptive/
