#!/usr/bin/env bash
# Installs olcd: the daemon binary olcd, the offline replay tool olcd-sim
# (simulate, plots), the systemd unit, /etc/logrotate.d/olcd and a default
# /etc/olcd/olcd.yaml (observe mode), then enables and starts it under systemd.
#
#   scripts/install.sh [path/to/olcd [path/to/olcd-sim]]   (make install builds both)
#
# DESTDIR installs into a staging root (nothing is enabled then); PREFIX sets
# the binary's prefix (default /usr/local). Installing twice is harmless: an
# existing config is never overwritten, and every path the install created is
# recorded in a manifest so scripts/uninstall.sh removes exactly those.
set -euo pipefail
cd "$(dirname "$0")/.."

case ${1:-} in
-h | --help)
	sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
-*)
	echo "install: unknown option $1 (usage: scripts/install.sh [path/to/olcd [path/to/olcd-sim]])" >&2
	exit 2
	;;
esac
bin=${1:-bin/olcd}
sim=${2:-$(dirname "$bin")/olcd-sim}
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
for b in "$bin" "$sim"; do
	[ -x "$b" ] || { echo "install: $b not found or not executable: run 'make build' first" >&2; exit 1; }
done
[ -f deploy/olcd.yaml ] || { echo "install: deploy/olcd.yaml missing" >&2; exit 1; }
[ -f deploy/logrotate/olcd ] || { echo "install: deploy/logrotate/olcd missing" >&2; exit 1; }

share="$DESTDIR$PREFIX/share/olcd"
manifest="$share/install-manifest"

# mkdirs DIR: creates DIR and any missing parents, recording each one created.
mkdirs() {
	local d=$1 missing=()
	while [ ! -d "$d" ]; do missing=("$d" "${missing[@]}"); d=$(dirname "$d"); done
	for d in "${missing[@]}"; do
		mkdir -m 0755 "$d"
		created+=("$d/")
	done
}

created=()
mkdirs "$share"
touch "$manifest"

# place SRC DST MODE: installs SRC at DST, recording DST if it is new.
place() {
	local src=$1 dst=$2 mode=$3
	mkdirs "$(dirname "$dst")"
	[ -e "$dst" ] || created+=("$dst")
	install -m "$mode" "$src" "$dst.olcd-tmp"
	mv -f "$dst.olcd-tmp" "$dst"
}

place "$bin" "$DESTDIR$PREFIX/bin/olcd" 0755
place "$sim" "$DESTDIR$PREFIX/bin/olcd-sim" 0755

unit_tmp=$(mktemp)
trap 'rm -f "$unit_tmp"' EXIT
sed "s#/usr/local/bin/olcd#$PREFIX/bin/olcd#" systemd/olcd.service >"$unit_tmp"
place "$unit_tmp" "$DESTDIR/etc/systemd/system/olcd.service" 0644

# Rotation of the decision log (SIGUSR1 reopens it); harmless without logrotate.
place deploy/logrotate/olcd "$DESTDIR/etc/logrotate.d/olcd" 0644

# The shipped default is kept beside the manifest so uninstall can tell an
# untouched config (removed) from one the operator edited (kept).
place deploy/olcd.yaml "$share/olcd.yaml.default" 0644
if [ -e "$DESTDIR/etc/olcd/olcd.yaml" ]; then
	echo "install: keeping existing $DESTDIR/etc/olcd/olcd.yaml"
else
	place deploy/olcd.yaml "$DESTDIR/etc/olcd/olcd.yaml" 0644
fi

for p in "${created[@]}"; do
	grep -qxF "$p" "$manifest" || echo "$p" >>"$manifest"
done
# The manifest records itself so uninstall removes it last.
grep -qxF "$manifest" "$manifest" || echo "$manifest" >>"$manifest"

echo "install: olcd installed under ${DESTDIR:-/} (prefix $PREFIX)"
if [ -n "$DESTDIR" ]; then
	echo "install: staged under $DESTDIR: nothing was enabled; on the target run 'systemctl enable --now olcd'"
elif [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
	systemctl daemon-reload
	systemctl enable --now olcd.service
	echo "install: olcd.service enabled and started (observe mode); see 'olcd status'"
else
	echo "install: systemd is not the init system here, so no service was enabled."
	echo "install: run olcd under your supervisor with: $PREFIX/bin/olcd run --config /etc/olcd/olcd.yaml"
fi
