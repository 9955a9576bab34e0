#!/usr/bin/env bash
# Datapath benchmark: runs BenchmarkDatapath (internal/loader) COUNT times and
# prints, per sub-benchmark, the median / min / max over the runs of the cost
# the XDP program adds over an empty XDP program measured in the same run
# (over-floor-ns/pkt) and of the ratio to it (x-floor), against the goals of
# docs/datapath.md. The reject path (BenchmarkDatapathReject) is measured with
# one run per call against the empty program run the same way, at most
# 400000 runs each whatever BENCHTIME says. Needs root (BPF_PROG_TEST_RUN).
#
#   scripts/bench-datapath.sh [COUNT [BENCHTIME]]    defaults: 10, 16000000x
#
# A VM shares its CPUs with other work: single runs scatter by tens of
# percent, so read the median. The raw `go test` output is kept in
# $OUT (default bench-datapath.txt in the current directory).
set -euo pipefail
cd "$(dirname "$0")/.."

count=${1:-10}
benchtime=${2:-16000000x}
out=${OUT:-bench-datapath.txt}

if [ "$(id -u)" != 0 ]; then
	echo "bench-datapath: needs root (BPF_PROG_TEST_RUN)" >&2
	exit 1
fi

go test -run '^$' -bench '^Benchmark(Datapath|DatapathReject|ResponseTiming)$' -benchtime "$benchtime" -count "$count" \
	./internal/loader | tee "$out" >&2

awk '
function median(list,    n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++)
		for (j = i + 1; j <= n; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	lo = a[1]; hi = a[n]
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^Benchmark(Datapath|DatapathReject|ResponseTiming)\// {
	name = $1; if (name ~ /^BenchmarkResponseTiming/) { sub(/^BenchmarkResponseTiming\//, "rt:", name) }
	sub(/^BenchmarkDatapath(Reject)?\//, "", name); sub(/-[0-9]+$/, "", name)
	if (!(name in seen)) { seen[name] = 1; order[++k] = name }
	for (i = 3; i < NF; i++) {
		if ($(i + 1) == "over-floor-ns/pkt") over[name] = over[name] " " $i
		# fair-over-syn-p50: its "floor" is the SYN path without fairness.
		if ($(i + 1) == "over-syn-p50-ns/pkt") over[name] = over[name] " " $i
		if ($(i + 1) == "syn-p50-fair-ns/pkt") ns[name] = ns[name] " " $i
		if ($(i + 1) == "x-floor") ratio[name] = ratio[name] " " $i
		if ($(i + 1) == "ns/pkt") ns[name] = ns[name] " " $i
		if ($(i + 1) == "delta-ns") delta[name] = delta[name] " " $i
	}
}
END {
	goal["ack"] = 5; goal["syn-p50"] = 30; goal["ipv6-hbh-syn"] = 35; goal["reject"] = 60; goal["fair-over-syn-p50"] = 15
	printf "%-16s %10s %22s %22s %8s\n", "sub-benchmark", "ns/pkt", "over floor ns (min-max)", "x floor (min-max)", "goal"
	for (i = 1; i <= k; i++) {
		n = order[i]
		m = median(ns[n])
		if (n == "floor") { printf "%-16s %10.2f\n", n, m; continue }
		o = median(over[n]); olo = lo; ohi = hi
		r = median(ratio[n]); rlo = lo; rhi = hi
		g = (n in goal) ? sprintf("<= %d %s", goal[n], o <= goal[n] ? "ok" : "MISSED") : ""
		printf "%-22s %10.2f %8.2f (%5.2f-%5.2f) %8.2f (%4.2f-%4.2f) %s\n", n, m, o, olo, ohi, r, rlo, rhi, g
		med[n] = o
	}
	# Response timing: this object minus the pre-timing one, chunk by chunk.
	if ("rt:syn-p50" in delta) {
		printf "\nresponse timing, delta-ns (this object - pre-timing object, paired per chunk; egress: - empty TC program):\n"
		split("syn-p50 ack data-unsampled data-sampled egress-unsampled egress-sampled", rn, " ")
		g2["syn-p50"] = 2; g2["data-unsampled"] = 5; g2["data-sampled"] = 40; g2["egress-unsampled"] = 5
		for (j = 1; j <= 6; j++) {
			n = "rt:" rn[j]
			d = median(delta[n])
			ok = ""
			if (rn[j] in g2) ok = sprintf("goal %s%d %s", rn[j] == "syn-p50" ? "+-" : "<= ", g2[rn[j]], (rn[j] == "syn-p50" ? (d <= 2 && d >= -2) : d <= g2[rn[j]]) ? "ok" : "MISSED")
			printf "  %-18s %+6.2f ns (%+.2f..%+.2f)  %s\n", rn[j], d, lo, hi, ok
		}
	}
}' "$out"
