#!/usr/bin/env bash
# Checks that installing twice is harmless and that uninstall leaves the root
# as it was, in a temporary DESTDIR (a real install would touch the host).
set -euo pipefail
cd "$(dirname "$0")/.."
for b in bin/olcd bin/olcd-sim; do
	[ -x $b ] || { echo "test-install: $b missing: run 'make build' first" >&2; exit 1; }
done

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
# A pre-existing foreign file under a shared directory must survive.
mkdir -p "$root/etc/systemd/system"
echo keep >"$root/etc/systemd/system/other.service"
before=$(cd "$root" && find . -printf '%p %m %s\n' | sort)

DESTDIR=$root scripts/install.sh bin/olcd >/dev/null
first=$(cd "$root" && find . -printf '%p %m %s\n' | sort)
DESTDIR=$root scripts/install.sh bin/olcd >/dev/null
second=$(cd "$root" && find . -printf '%p %m %s\n' | sort)
[ "$first" = "$second" ] || { echo "test-install: second install changed the tree:"; diff <(echo "$first") <(echo "$second"); exit 1; }
for f in usr/local/bin/olcd usr/local/bin/olcd-sim etc/systemd/system/olcd.service etc/olcd/olcd.yaml etc/logrotate.d/olcd; do
	[ -f "$root/$f" ] || { echo "test-install: $f not installed" >&2; exit 1; }
done
if command -v logrotate >/dev/null; then
	logrotate -d -s "$root/logrotate.state" "$root/etc/logrotate.d/olcd" >/dev/null 2>&1 ||
		{ echo "test-install: logrotate rejects the installed etc/logrotate.d/olcd:" >&2; logrotate -d -s /dev/null "$root/etc/logrotate.d/olcd" >&2; exit 1; }
	rm -f "$root/logrotate.state"
fi
"$root/usr/local/bin/olcd" check-config "$root/etc/olcd/olcd.yaml" >/dev/null ||
	{ echo "test-install: installed default config does not validate" >&2; exit 1; }
"$root/usr/local/bin/olcd-sim" version >/dev/null ||
	{ echo "test-install: installed olcd-sim does not run" >&2; exit 1; }

DESTDIR=$root scripts/uninstall.sh >/dev/null
after=$(cd "$root" && find . -printf '%p %m %s\n' | sort)
if [ "$before" != "$after" ]; then
	echo "test-install: uninstall did not restore the tree:" >&2
	diff <(echo "$before") <(echo "$after") >&2
	exit 1
fi
echo "test-install: install twice + uninstall leaves the root as it was"
