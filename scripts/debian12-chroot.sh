#!/usr/bin/env bash
# The fresh Debian 12 system the release tests install into: debootstrap
# minbase with systemd (systemctl enable, systemd-analyze verify) and sudo
# (the README's commands are a user's with sudo), made once as a tarball and
# unpacked anew by each run. Prints the tarball's path.
#
#   scripts/debian12-chroot.sh        (root; ~2 min the first time)
#
# OLCD_CHROOT_CACHE: the tarball (default
# /var/cache/olcd/debian12-minbase-systemd-sudo.tar).
set -euo pipefail
cache=${OLCD_CHROOT_CACHE:-/var/cache/olcd/debian12-minbase-systemd-sudo.tar}
if [ -f "$cache" ]; then
	echo "$cache"
	exit 0
fi
[ "$(id -u)" = 0 ] || { echo "debian12-chroot: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || "$(dirname "$0")/deps.sh" test >&2
echo "debian12-chroot: making the Debian 12 chroot (debootstrap minbase + systemd + sudo, ~2 min, once): $cache" >&2
mkdir -p "$(dirname "$cache")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! debootstrap --variant=minbase --include=systemd,sudo bookworm "$tmp/root" http://deb.debian.org/debian >"$tmp/debootstrap.log" 2>&1; then
	tail -20 "$tmp/debootstrap.log" >&2
	echo "debian12-chroot: debootstrap failed" >&2
	exit 1
fi
tar -C "$tmp/root" -cf "$cache.tmp" . && mv "$cache.tmp" "$cache"
echo "$cache"
