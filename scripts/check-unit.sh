#!/usr/bin/env bash
# Verifies systemd/olcd.service with systemd-analyze. The unit names the
# installed binary, which a CI checkout does not have, so a copy pointing at
# the freshly built bin/olcd is verified; any warning fails the check.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v systemd-analyze >/dev/null; then
	echo "check-unit: systemd-analyze not installed (apt-get install systemd); skipped" >&2
	exit 0
fi
[ -x bin/olcd ] || { echo "check-unit: bin/olcd missing: run 'make build' first" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s#/usr/local/bin/olcd#$PWD/bin/olcd#" systemd/olcd.service >"$tmp/olcd.service"
out=$(systemd-analyze verify "$tmp/olcd.service" 2>&1) || { echo "$out" >&2; exit 1; }
# systemd-analyze also reports on units it loads as dependencies; only lines
# about our unit matter.
ours=$(printf '%s\n' "$out" | grep 'olcd.service' || true)
if [ -n "$ours" ]; then
	echo "check-unit: systemd-analyze verify reports:" >&2
	echo "$ours" >&2
	exit 1
fi
echo "check-unit: systemd/olcd.service verified"
