#!/usr/bin/env bash
# Must-show of issue 28: the release as a user receives it.
#
#   scripts/test-release.sh          (make test-release; root for the chroot part)
#
# 1. builds a test release (tools/release, both architectures) into
#    out/test-release/dist and checks SHA256SUMS and each tarball's contents;
# 2. on a fresh Debian 12 chroot (debootstrap minbase + systemd, cached as a
#    tarball so reruns take seconds) with nothing but the .deb: dpkg -i,
#    olcd check-config, systemd-analyze verify, the files in place and the
#    unit disabled; an edited config kept across an upgrade; the installed
#    olcd run and killed (in a network namespace of the chroot's own, with a
#    bpffs of its own), then dpkg -r leaves only the conffiles (the edited
#    config among them) and the decision log: no socket, lock, pin or state
#    file; dpkg -P leaves nothing; a purge leaves another namespace's olcd's
#    lock; then the tarball's scripts/install.sh as the README says, and
#    its uninstall.sh leaves nothing;
# 3. reads the images back with go-containerregistry (tools/release TestImage).
#
# 4. walks the README's install and first-ten-minutes commands as written
#    (scripts/test-release-first10.sh).
#
# OLCD_CHROOT_CACHE: the cached chroot tarball (scripts/debian12-chroot.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=$repo/out/test-release
dist=$out/dist
v1=v0.1.0-test.1
v2=v0.1.0-test.2
start=$SECONDS

say() { echo "test-release: $*"; }
fail() { echo "test-release: FAIL: $*" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out"

go -C tools/release vet ./... || fail "go vet of tools/release"

# --- 1. the release and its sums
say "building $v1 (amd64, arm64)"
go -C tools/release run . -root "$repo" -out "$dist" -version "$v1" -allow-untagged
(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match"
n=$(wc -l <"$dist/SHA256SUMS")
[ "$n" -eq "$(find "$dist" -maxdepth 1 -type f ! -name SHA256SUMS | wc -l)" ] || fail "SHA256SUMS does not cover every artifact"
say "SHA256SUMS verified ($n artifacts)"

bins=(olcd)
[ -d cmd/olcd-sim ] && bins+=(olcd-sim)
for arch in amd64 arm64; do
	top=olcd_${v1}_linux_$arch
	tgz=$dist/$top.tar.gz
	[ -f "$tgz" ] || fail "$tgz missing"
	{
		for b in "${bins[@]}"; do echo "$top/bin/$b"; done
		git ls-files -- README.md CHANGELOG.md LICENSE NOTICE LICENSES docs deploy systemd/olcd.service \
			scripts/install.sh scripts/uninstall.sh | sed "s#^#$top/#"
	} | sort >"$out/want-$arch"
	tar -tzf "$tgz" | grep -v '/$' | sort >"$out/got-$arch"
	diff -u "$out/want-$arch" "$out/got-$arch" || fail "$tgz: contents differ from the release list"
	# Every shipped file is the committed one.
	mkdir -p "$out/x-$arch"
	tar -xzf "$tgz" -C "$out/x-$arch"
	while read -r f; do
		case $f in */bin/*) continue ;; esac
		cmp -s "$out/x-$arch/$f" "$repo/${f#"$top"/}" || fail "$tgz: $f differs from the work tree"
	done <"$out/want-$arch"
	# ELF machine: 0x3e x86-64, 0xb7 AArch64 (bytes 18-19, little endian).
	want_m=3e00
	[ "$arch" = arm64 ] && want_m=b700
	for b in "${bins[@]}"; do
		m=$(od -An -tx1 -j18 -N2 "$out/x-$arch/$top/bin/$b" | tr -d ' \n')
		[ "$m" = "$want_m" ] || fail "$top/bin/$b: ELF machine $m, want $want_m"
	done
	say "$top.tar.gz: $(wc -l <"$out/got-$arch") files as listed, binaries for $arch"
done
ver=$("$out/x-amd64/olcd_${v1}_linux_amd64/bin/olcd" version)
case $ver in "olcd $v1 (commit "*", go1."*) ;; *) fail "olcd version printed '$ver'" ;; esac
say "olcd version: $ver"

# --- 3. the images (no root needed)
OLCD_RELEASE_DIST=$dist go -C tools/release test -count=1 -run TestImage . || fail "TestImage"

# --- 2. the .deb on a fresh Debian 12
if [ "$(id -u)" != 0 ]; then
	say "not root: the Debian 12 chroot part is skipped (sudo make test-release)"
	exit 0
fi
cache=$(scripts/debian12-chroot.sh) || fail "the Debian 12 chroot"
root=$out/chroot
mkdir -p "$root"
tar -C "$root" -xf "$cache"
# The chroot runs in a network namespace of its own with a veth pair, made
# here and removed at exit: the package's olcd (run below, and the prerm's
# `olcd detach`, which deletes olcd's filters on every interface of its
# namespace) touches nothing of the host's. Its /sys is that namespace's
# sysfs, with a bpffs of its own on /sys/fs/bpf for the pins.
ns=olcd-release-$$
daemon_pid=
cleanup() {
	[ -n "$daemon_pid" ] && kill -KILL "$daemon_pid" 2>/dev/null
	[ -n "${holder_pid:-}" ] && kill -KILL "$holder_pid" 2>/dev/null
	umount "$root/sys/fs/bpf" 2>/dev/null
	umount "$root/sys" 2>/dev/null
	umount "$root/proc" 2>/dev/null
	ip netns del "$ns" 2>/dev/null
	true
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link add rel0 type veth peer name rel1
for l in lo rel0 rel1; do ip -n "$ns" link set "$l" up; done
mount -t proc proc "$root/proc"
nsenter --net="/run/netns/$ns" mount -t sysfs sysfs "$root/sys"
mount -t bpf bpf "$root/sys/fs/bpf"
# inroot CMD...: CMD in the chroot and its namespace. A background job is
# started as "${inroot[@]}" CMD... &, not through the function, so that $!
# is CMD's pid (each program of the chain execs the next) and not a
# subshell's.
inroot=(nsenter --net="/run/netns/$ns" chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
inroot() { "${inroot[@]}" "$@"; }
# What the system holds, but /proc, dpkg's own database and logs, and
# /run/systemd (systemd-analyze and systemctl write state there when run).
snapshot() {
	inroot find / -xdev -path /proc -prune -o -print | grep -Ev '^/(proc$|var/lib/dpkg/|var/log/dpkg\.log|var/log/apt/|var/cache/|tmp/|root/\.|run/systemd/)' | sort
}
inroot dpkg-query -W olcd >/dev/null 2>&1 && fail "the fresh chroot already has olcd"
snapshot >"$out/before"

deb1=$(ls "$dist"/olcd_*_amd64.deb)
cp "$deb1" "$root/tmp/olcd.deb"
inroot dpkg -i /tmp/olcd.deb >"$out/dpkg-i.log" 2>&1 || { cat "$out/dpkg-i.log" >&2; fail "dpkg -i"; }
say "dpkg -i $(basename "$deb1"): installed $(inroot dpkg-query -W -f='${Version}' olcd)"
inroot olcd version | grep -qF "olcd $v1 " || fail "installed olcd version: $(inroot olcd version)"
inroot olcd check-config /etc/olcd/olcd.yaml || fail "olcd check-config /etc/olcd/olcd.yaml"
grep -qx 'mode: observe' "$root/etc/olcd/olcd.yaml" || fail "the installed config is not in observe mode"
va=$(inroot systemd-analyze verify /lib/systemd/system/olcd.service 2>&1) || { echo "$va" >&2; fail "systemd-analyze verify"; }
if printf '%s\n' "$va" | grep 'olcd.service'; then fail "systemd-analyze verify reports on olcd.service"; fi
say "olcd check-config: ok; systemd-analyze verify: clean"
for f in /usr/bin/olcd /lib/systemd/system/olcd.service /etc/olcd/olcd.yaml /etc/logrotate.d/olcd /usr/share/doc/olcd/copyright /usr/share/doc/olcd/NOTICE; do
	[ -f "$root$f" ] || fail "$f not installed"
done
for b in "${bins[@]}"; do [ -x "$root/usr/bin/$b" ] || fail "/usr/bin/$b not installed"; done
grep -qx 'ExecStart=/usr/bin/olcd run --config /etc/olcd/olcd.yaml' "$root/lib/systemd/system/olcd.service" || fail "the unit's ExecStart does not run /usr/bin/olcd"
grep -qx 'ExecReload=/usr/bin/olcd reload' "$root/lib/systemd/system/olcd.service" || fail "the unit's ExecReload is not 'olcd reload'"
grep -qx 'RuntimeDirectory=olcd' "$root/lib/systemd/system/olcd.service" || fail "the unit does not create /run/olcd"
grep -qx 'LogsDirectory=olcd' "$root/lib/systemd/system/olcd.service" || fail "the unit does not create /var/log/olcd"
en=$(inroot systemctl is-enabled olcd.service 2>&1 || true)
[ "$en" = disabled ] || fail "after install the unit is '$en', want disabled"
conff=$(inroot dpkg-query -W -f='${Conffiles}' olcd | awk '{print $1}' | sort | tr '\n' ' ')
[ "$conff" = "/etc/logrotate.d/olcd /etc/olcd/olcd.yaml " ] || fail "conffiles: '$conff'"
say "files in place; unit disabled; conffiles: $conff"

# The operator's day: enable it, edit the config, the service writes its log.
inroot systemctl enable olcd.service >/dev/null 2>&1
[ "$(inroot systemctl is-enabled olcd.service)" = enabled ] || fail "systemctl enable in the chroot"
printf '\n# edited by test-release\n' >>"$root/etc/olcd/olcd.yaml"
edited=$(sha256sum <"$root/etc/olcd/olcd.yaml")
mkdir -p "$root/var/log/olcd" && echo '{}' >"$root/var/log/olcd/decisions.jsonl"

# run_daemon: the installed olcd as the unit runs it (systemd is not PID 1
# in a chroot: the unit's directories are made as systemd would), until it
# answers and has written its state file; then killed (SIGKILL, a crash:
# it leaves its socket, its attach locks, its pins and its state file).
run_daemon() {
	mkdir -p "$root/run/olcd" "$root/var/lib/olcd"
	"${inroot[@]}" /usr/bin/olcd run --config /etc/olcd/olcd.yaml >>"$out/daemon.log" 2>&1 &
	daemon_pid=$!
	for _ in $(seq 150); do
		kill -0 "$daemon_pid" 2>/dev/null || { tail -20 "$out/daemon.log" >&2; fail "olcd run exited"; }
		inroot olcd status >/dev/null 2>&1 && [ -f "$root/var/lib/olcd/state.json" ] && break
		sleep 0.2
	done
	[ -f "$root/var/lib/olcd/state.json" ] || { tail -20 "$out/daemon.log" >&2; fail "olcd run: no answer or no state file within 30 s"; }
	[ "$(readlink "/proc/$daemon_pid/exe")" = "$root/usr/bin/olcd" ] ||
		fail "the background job's pid $daemon_pid is not the daemon's: $(readlink "/proc/$daemon_pid/exe")"
	kill -KILL "$daemon_pid"
	wait "$daemon_pid" 2>/dev/null || true
	daemon_pid=
	[ -S "$root/run/olcd/olcd.sock" ] || fail "the killed olcd left no admin socket (the test needs one)"
	ls "$root"/run/olcd/attach-*.lock >/dev/null 2>&1 || fail "the killed olcd left no attach lock (the test needs one)"
	ls "$root"/sys/fs/bpf/olcd/*/olcd_layout >/dev/null 2>&1 || fail "the killed olcd left no pinned datapath (the test needs one)"
}

# Upgrade: the edited config is kept.
go -C tools/release run . -root "$repo" -out "$out/dist2" -version "$v2" -allow-untagged -arch amd64 -only deb
cp "$out"/dist2/olcd_*_amd64.deb "$root/tmp/olcd2.deb"
inroot dpkg -i --force-confold /tmp/olcd2.deb >"$out/dpkg-upgrade.log" 2>&1 || { cat "$out/dpkg-upgrade.log" >&2; fail "dpkg -i (upgrade)"; }
inroot olcd version | grep -qF "olcd $v2 " || fail "after the upgrade: $(inroot olcd version)"
[ "$(sha256sum <"$root/etc/olcd/olcd.yaml")" = "$edited" ] || fail "the upgrade replaced the edited config"
say "upgrade to $v2: edited /etc/olcd/olcd.yaml kept"

# Remove: the conffiles (the edited config) and the log stay; nothing else.
# The package's olcd ran and crashed first: its socket, locks, pins and
# state file are the package's to remove (the prerm's olcd detach, the
# postrm).
run_daemon
say "olcd ran and was killed; it left: $(cd "$root" && ls -d run/olcd/* sys/fs/bpf/olcd/* var/lib/olcd/* | tr '\n' ' ')"
inroot dpkg -r olcd >"$out/dpkg-r.log" 2>&1 || { cat "$out/dpkg-r.log" >&2; fail "dpkg -r"; }
[ -e "$root/sys/fs/bpf/olcd" ] && fail "dpkg -r left the pins: $(find "$root/sys/fs/bpf/olcd" | tr '\n' ' ')"
snapshot >"$out/after-r"
comm -13 "$out/before" "$out/after-r" >"$out/left-r"
comm -23 "$out/before" "$out/after-r" >"$out/lost-r"
[ -s "$out/lost-r" ] && { cat "$out/lost-r" >&2; fail "dpkg -r removed files that were there before"; }
want_left=$(printf '%s\n' /etc/olcd /etc/olcd/olcd.yaml /var/log/olcd /var/log/olcd/decisions.jsonl /etc/logrotate.d/olcd)
[ -d "$root/etc/logrotate.d" ] && ! grep -qx /etc/logrotate.d "$out/before" && want_left+=$'\n/etc/logrotate.d'
diff -u <(sort <<<"$want_left") "$out/left-r" || fail "dpkg -r left more or less than the conffiles and the log"
[ "$(sha256sum <"$root/etc/olcd/olcd.yaml")" = "$edited" ] || fail "dpkg -r changed the edited config"
[ -e "$root/etc/systemd/system/multi-user.target.wants/olcd.service" ] && fail "dpkg -r left the enablement link"
say "dpkg -r: left only $(tr '\n' ' ' <"$out/left-r")"

# Purge: nothing.
inroot dpkg -P olcd >"$out/dpkg-P.log" 2>&1 || { cat "$out/dpkg-P.log" >&2; fail "dpkg -P"; }
snapshot >"$out/after-P"
diff -u "$out/before" "$out/after-P" || fail "dpkg -P left a difference"
say "dpkg -P: the system is as before the install"

# Another olcd (of another network namespace) runs: its attach lock in
# /run/olcd is never removed, with /run/olcd, by a removal or a purge of
# the package.
inroot dpkg -i /tmp/olcd.deb >"$out/dpkg-i-2.log" 2>&1 || { cat "$out/dpkg-i-2.log" >&2; fail "dpkg -i (again)"; }
other=/run/olcd/attach-1-7.lock
mkdir -p "$root/run/olcd"
"${inroot[@]}" bash -c "exec 9>$other && flock -n 9 && exec sleep 600" &
holder_pid=$!
for _ in $(seq 50); do [ -e "$root$other" ] && break; sleep 0.1; done
inroot dpkg -P olcd >"$out/dpkg-P-2.log" 2>&1 || { cat "$out/dpkg-P-2.log" >&2; fail "dpkg -P (another olcd running)"; }
[ -e "$root$other" ] || fail "dpkg -P removed the attach lock of another namespace's olcd"
inroot flock -n "$other" true && fail "the other olcd's lock is no longer held (the test's holder)"
kill "$holder_pid"
wait "$holder_pid" 2>/dev/null || true
holder_pid=
rm -f "$root$other" # as the other olcd does at its exit
rmdir "$root/run/olcd"
diff -u "$out/before" <(snapshot) || fail "dpkg -i, then -P with another olcd running, left a difference"
say "dpkg -P with another namespace's olcd running: its lock and /run/olcd kept"
# The README's tarball install, as written, on the same clean system:
# install.sh from the unpacked tarball, then uninstall.sh leaves nothing.
tar -xzf "$dist/olcd_${v1}_linux_amd64.tar.gz" -C "$root/tmp"
inroot bash -c "cd /tmp/olcd_${v1}_linux_amd64 && ./scripts/install.sh" >"$out/install.log" 2>&1 || { cat "$out/install.log" >&2; fail "tarball: scripts/install.sh"; }
inroot olcd version | grep -qF "olcd $v1 " || fail "tarball install: olcd version: $(inroot olcd version)"
inroot olcd check-config /etc/olcd/olcd.yaml >/dev/null || fail "tarball install: check-config"
grep -qx 'ExecReload=/usr/local/bin/olcd reload' "$root/etc/systemd/system/olcd.service" || fail "tarball install: the unit"
inroot bash -c "cd /tmp/olcd_${v1}_linux_amd64 && ./scripts/uninstall.sh" >"$out/uninstall.log" 2>&1 || { cat "$out/uninstall.log" >&2; fail "tarball: scripts/uninstall.sh"; }
snapshot >"$out/after-tarball"
diff -u "$out/before" "$out/after-tarball" || fail "the tarball's uninstall.sh left a difference"
say "tarball: scripts/install.sh installs (olcd version, check-config, the unit); uninstall.sh leaves nothing"
cleanup
trap - EXIT
rm -rf "$root"
say "passed in $((SECONDS - start)) s"

# --- 4. the README, as a user reads it
scripts/test-release-first10.sh || fail "the README walk (scripts/test-release-first10.sh)"
