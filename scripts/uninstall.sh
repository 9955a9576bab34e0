#!/usr/bin/env bash
# Removes what scripts/install.sh installed: stops and disables the service,
# then deletes every path recorded in the install manifest. A config the
# operator edited is kept (and named); an untouched one is removed.
#
#   scripts/uninstall.sh        (DESTDIR and PREFIX as given to the install)
set -euo pipefail

case ${1:-} in
"") ;;
-h | --help)
	sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "uninstall: unexpected argument $1 (usage: [DESTDIR=...] [PREFIX=...] scripts/uninstall.sh)" >&2
	exit 2
	;;
esac

DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
share="$DESTDIR$PREFIX/share/olcd"
manifest="$share/install-manifest"
config="$DESTDIR/etc/olcd/olcd.yaml"

if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
	systemctl disable --now olcd.service 2>/dev/null || true
fi
# A stop leaves the datapath pinned for the next olcd; an uninstall has
# none: `olcd detach` removes it, a stale admin socket, this namespace's
# attach locks, and /run/olcd and /sys/fs/bpf/olcd once empty (the locks and
# pins of olcds in other network namespaces stay), as the .deb's prerm does.
if [ -z "$DESTDIR" ] && [ -x "$PREFIX/bin/olcd" ]; then
	"$PREFIX/bin/olcd" detach >/dev/null 2>&1 || echo "uninstall: olcd detach failed; run it by hand ('$PREFIX/bin/olcd detach') to remove the datapath" >&2
fi
if [ ! -f "$manifest" ]; then
	echo "uninstall: no install manifest at $manifest: nothing to remove"
	exit 0
fi

if [ -f "$config" ] && grep -qxF "$config" "$manifest" && ! cmp -s "$config" "$share/olcd.yaml.default"; then
	echo "uninstall: keeping $config: it differs from the shipped default"
	keep=$config
else
	keep=
fi

# Files first, in reverse order of creation, then directories (deepest
# first); a directory is removed only when empty, so nothing foreign goes.
mapfile -t paths < <(tac "$manifest")
for p in "${paths[@]}"; do
	case $p in */) continue ;; esac
	[ "$p" = "$keep" ] && continue
	[ "$p" = "$manifest" ] && continue
	rm -f -- "$p"
done
rm -f -- "$manifest"
for p in "${paths[@]}"; do
	case $p in */) rmdir -- "${p%/}" 2>/dev/null || true ;; esac
done
if [ -z "$DESTDIR" ]; then
	systemctl daemon-reload 2>/dev/null || true
	# The state directory (the unit's StateDirectory), which holds only
	# the state file a restart reads: the datapath it described is
	# detached. /run/olcd only when empty: never another olcd's locks.
	rm -rf /var/lib/olcd
	rmdir /run/olcd 2>/dev/null || true
fi
echo "uninstall: olcd removed from ${DESTDIR:-/}"
