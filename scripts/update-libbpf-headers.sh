#!/usr/bin/env bash
# Vendors the libbpf headers bpf/ includes into bpf/include/bpf/, taken from
# Debian's libbpf-dev package at a pinned version, so that `make generate`
# compiles the same source on any machine (docs/lint.md):
#
#   scripts/update-libbpf-headers.sh [DEBIAN-VERSION]   (default: the pin below)
#
# It downloads the package with apt-get (signed by the archive) and unpacks
# it with dpkg-deb; nothing is installed. bpf/include/bpf/SOURCE records the
# package, its version and each header's sha256. After an update: make
# generate, run the loader's tests, commit the headers with the objects.
set -euo pipefail
cd "$(dirname "$0")/.."

# bookworm's libbpf-dev: the libbpf 1.1.2 headers.
version=${1:-1:1.1.2-0+deb12u1}
# The headers bpf/*.c and *.h include, and what those include in turn.
headers=(bpf_helpers.h bpf_helper_defs.h bpf_endian.h)

case $version in
-h | --help)
	sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
esac
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
	{ echo "update-libbpf-headers: needs apt-get and dpkg-deb (Debian or Ubuntu)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp" # apt-get downloads as _apt
(cd "$tmp" && apt-get download -q "libbpf-dev=$version" >/dev/null) ||
	{ echo "update-libbpf-headers: apt-get download libbpf-dev=$version failed (run apt-get update; is the version still in the archive?)" >&2; exit 1; }
deb=$(ls "$tmp"/libbpf-dev_*.deb)
dpkg-deb -x "$deb" "$tmp/root"

dst=bpf/include/bpf
mkdir -p "$dst"
{
	echo "# Extracted by scripts/update-libbpf-headers.sh; do not edit the headers."
	echo "package: libbpf-dev $version ($(dpkg-deb -f "$deb" Architecture))"
	echo "license: LGPL-2.1 OR BSD-2-Clause (each header's SPDX line)"
} >"$tmp/SOURCE"
for h in "${headers[@]}"; do
	src=$tmp/root/usr/include/bpf/$h
	[ -f "$src" ] || { echo "update-libbpf-headers: $h not in libbpf-dev $version" >&2; exit 1; }
	install -m 0644 "$src" "$dst/$h"
	(cd "$dst" && sha256sum "$h") >>"$tmp/SOURCE"
done
install -m 0644 "$tmp/SOURCE" "$dst/SOURCE"
echo "update-libbpf-headers: ${headers[*]} from libbpf-dev $version in $dst"
