#!/usr/bin/env bash
# Must-show 2 of issue 28: the README's install and first-ten-minutes
# commands, as written, on a fresh Debian 12, by a user with sudo.
#
#   scripts/test-release-first10.sh      (root; part of make test-release)
#
# The commands are not copied here: they are read from README.md's sh blocks
# under the headings below, in order, and run line by line as the user
# "walker" (sudo without a password, as on a cloud image) in a fresh chroot
# (scripts/debian12-chroot.sh) inside a network namespace of its own with a
# veth pair, so olcd attaches to real interfaces and nothing on the host. The
# README's yaml block of step 4 is written into /etc/olcd/olcd.yaml in place
# of `ports: auto`, as the reader would. After some commands the walk checks
# what the README says they do (the check is keyed by the command's text,
# and a check whose command is gone fails the walk): a README whose
# commands stop working, or stop doing what it says, fails this script.
#
# The chroot has no systemd as PID 1, so /usr/local/sbin/systemctl in it
# is the walk's stand-in for systemd's service manager: it runs the
# installed unit's own ExecStart (waiting, as Type=notify does, until the
# daemon answers) and ExecReload (its exit status is systemctl reload's),
# creates RuntimeDirectory and LogsDirectory, and passes every other verb
# (enable, disable, is-enabled) to the real systemctl. The unit itself is
# verified under systemd by scripts/check-unit.sh and test-release.sh.
#
# OLCD_README: the README to walk (default README.md), so that a changed
# copy can be tried. OLCD_CHROOT_CACHE: see scripts/debian12-chroot.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
readme=$(realpath "${OLCD_README:-README.md}")
out=$repo/out/test-release-first10
version=v0.1.0 # the version the README's file names spell
start=$SECONDS

say() { echo "first10: $*"; }
fail() { echo "first10: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || { say "not root: skipped (the chroot, the network namespace and BPF need root)"; exit 0; }

# --- The README's blocks.
# block HEADING [LANG]: every fenced block of LANG (sh) under the heading line
# HEADING, up to the next heading (of any level), with the
# line number of each line ("N<TAB>text"), list indentation removed; a block
# starts with a line "N<TAB>```".
block() {
	awk -v want="$1" -v lang="${2:-sh}" '
		/^#+ / { in_sec = ($0 == want); next }
		!in_sec { next }
		{ line = $0; sub(/^[ \t]+/, "", line) }
		!in_blk && line == "```" lang { in_blk = 1; print NR "\t```"; next }
		in_blk && line == "```" { in_blk = 0; next }
		in_blk { sub(/^   /, ""); print NR "\t" $0 }
	' "$readme"
}
sums=$(block "## Install")
deb=$(block "### Debian or Ubuntu: the .deb")
tarball=$(block "### Any Linux with systemd: the tarball")
first10=$(block "## The first ten minutes")
first10_yaml=$(block "## The first ten minutes" yaml)
for v in sums deb tarball first10 first10_yaml; do
	[ -n "${!v}" ] || fail "$readme: no block for '$v' under its heading (renamed? the walk reads the headings)"
done

# --- A v0.1.0 release, named as the README names its files.
rm -rf "$out"
mkdir -p "$out"
say "building $version (amd64: tarball, .deb)"
go -C tools/release run . -root "$repo" -out "$out/dist" -version "$version" -allow-untagged -arch amd64 -only tar,deb >"$out/release.log" 2>&1 ||
	{ cat "$out/release.log" >&2; fail "tools/release"; }
for f in $(printf '%s\n' "$deb" "$tarball" | grep -oE 'olcd_[A-Za-z0-9._~-]+\.(deb|tar\.gz)' | sort -u); do
	[ -f "$out/dist/$f" ] || fail "README names $f, the release has: $(cd "$out/dist" && ls | tr '\n' ' ')"
done

# --- The fresh system: a user with sudo, the walk's systemctl.
cache=$(scripts/debian12-chroot.sh) || fail "the Debian 12 chroot"
root=$out/chroot
mkdir -p "$root"
tar -C "$root" -xf "$cache"
chroot "$root" useradd -m -s /bin/bash walker
echo 'walker ALL=(ALL) NOPASSWD:ALL' >"$root/etc/sudoers.d/walker"
chmod 0440 "$root/etc/sudoers.d/walker"
mkdir -p "$root/home/walker/dl"
cp "$out"/dist/* "$root/home/walker/dl/"
chroot "$root" chown -R walker:walker /home/walker/dl
mkdir -p "$root/run/systemd/system" # what install.sh looks for: systemd is the init here
echo "127.0.1.1 $(hostname)" >>"$root/etc/hosts" # as the installer writes it (sudo resolves the host name)
cat >"$root/usr/local/sbin/systemctl" <<'SHIM'
#!/bin/bash
# The README walk's stand-in for systemd's service manager (see
# scripts/test-release-first10.sh): start, stop, reload and is-active run
# the installed unit's own lines; every other verb is the real systemctl's.
set -u
real=/usr/bin/systemctl
# No service manager runs here: the real systemctl works on the files only.
export SYSTEMD_OFFLINE=1
now=0
args=()
for a in "$@"; do
	case $a in --now) now=1 ;; *) args+=("$a") ;; esac
done
verb=${args[0]:-}
unit=${args[1]:-olcd}
unit=${unit%.service}
unitfile=
for d in /etc/systemd/system /lib/systemd/system /usr/lib/systemd/system; do
	[ -f "$d/$unit.service" ] && { unitfile=$d/$unit.service; break; }
done
key() { sed -n "s/^$1=//p" "$unitfile" | head -1; }
pidf=/var/lib/walk-$unit.pid
running() { [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; }
start() {
	running && return 0
	[ -n "$unitfile" ] || { echo "Unit $unit.service not found." >&2; return 5; }
	for d in $(key RuntimeDirectory); do mkdir -p "/run/$d"; done
	for d in $(key LogsDirectory); do mkdir -p "/var/log/$d"; done
	# shellcheck disable=SC2046
	setsid $(key ExecStart) >>"/var/log/walk-$unit.log" 2>&1 </dev/null &
	echo $! >"$pidf"
	# Type=notify: start returns once the daemon is up (it answers).
	for _ in $(seq 300); do
		running || { echo "$unit.service failed to start:" >&2; tail -20 "/var/log/walk-$unit.log" >&2; return 1; }
		olcd status >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "$unit.service: no answer within 30 s" >&2
	return 1
}
stop() {
	running || { rm -f "$pidf"; return 0; }
	kill -TERM "$(cat "$pidf")"
	for _ in $(seq 100); do running || break; sleep 0.1; done
	running && kill -KILL "$(cat "$pidf")"
	rm -f "$pidf"
}
case $verb in
daemon-reload) exit 0 ;;
enable)
	$real enable "$unit.service" || exit
	[ "$now" = 1 ] && { start || exit; }
	exit 0
	;;
disable)
	[ "$now" = 1 ] && stop
	exec $real disable "$unit.service"
	;;
start) start ;;
stop) stop ;;
restart) stop && start ;;
reload)
	running || { echo "Job for $unit.service failed: the unit is not active." >&2; exit 1; }
	# shellcheck disable=SC2046
	MAINPID=$(cat "$pidf") $(key ExecReload) || { echo "Job for $unit.service failed because the control process exited with error code." >&2; exit 1; }
	;;
is-active) running && echo active || { echo inactive; exit 3; } ;;
*) exec $real "$@" ;;
esac
SHIM
chmod 0755 "$root/usr/local/sbin/systemctl"

# --- The walk: the README's lines, each echoed with its line number, and
# the checks of what the README says they do.
checks_done=/home/walker/checks # in the chroot
emit_block() { # NAME BLOCK: a subshell from ~/dl running the block's lines
	echo "( cd ~/dl"
	local n text
	while IFS=$'\t' read -r n text; do
		[ "$text" = '```' ] && continue
		case $text in '' | \#*) continue ;; esac
		if [ "$text" = __YAML__ ]; then
			emit_yaml
			continue
		fi
		printf 'echo %q\n' "+ README.md:$n: $text"
		printf '%s\n' "$text"
		check_after "$text"
	done <<<"$2"
	echo ")"
}
# check_after CMD: the check that follows a README command, by its text.
check_after() {
	case $1 in
	"sudo systemctl enable --now olcd"*)
		echo 'walk_mode OBSERVE; echo "check: olcd runs, in observe mode (the shipped config)"'
		echo "echo enable >>$checks_done" ;;
	"sudo ./scripts/uninstall.sh"*)
		echo '[ ! -e /usr/local/bin/olcd ] || { echo "check: uninstall.sh left /usr/local/bin/olcd" >&2; exit 1; }'
		echo '! sudo systemctl is-active olcd >/dev/null || { echo "check: olcd still runs after uninstall.sh" >&2; exit 1; }'
		echo '[ ! -e /sys/fs/bpf/olcd ] || { echo "check: uninstall.sh left the pinned datapath: $(sudo find /sys/fs/bpf/olcd)" >&2; exit 1; }'
		echo '[ ! -e /run/olcd ] || { echo "check: uninstall.sh left /run/olcd: $(sudo ls -A /run/olcd)" >&2; exit 1; }'
		echo 'echo "check: uninstall.sh removed olcd, stopped it, detached its datapath and removed /run/olcd"'
		echo "echo uninstall >>$checks_done" ;;
	"sudo systemctl reload olcd"*)
		echo 'walk_port tcp/443 enforce; walk_port tcp/80 observe; echo "check: after the reload tcp/443 enforces and tcp/80 observes"'
		echo "echo reload >>$checks_done" ;;
	"sudo olcd set mode off"*)
		echo 'walk_mode OFF; echo "check: the kill switch is in force"'
		echo "echo off >>$checks_done" ;;
	"sudo olcd reload"*)
		echo 'walk_mode OBSERVE; walk_port tcp/443 enforce; echo "check: olcd reload returned to the file: observe, tcp/443 enforcing"'
		echo "echo back >>$checks_done" ;;
	esac
}
yaml=$(printf '%s\n' "$first10_yaml" | cut -f2- | grep -v '^```$')
# emit_yaml: step 4's yaml block into the config in place of "ports: auto",
# as a reader edits the file.
emit_yaml() {
	echo 'echo "+ README.md step 4: its yaml block into /etc/olcd/olcd.yaml, in place of ports: auto"'
	echo 'grep -qx "ports: auto" /etc/olcd/olcd.yaml'
	echo "cat >/tmp/ports.yaml <<'YAML'"
	printf '%s\n' "$yaml"
	echo 'YAML'
	echo "awk 'FNR == NR { y = y \$0 \"\\n\"; next } \$0 == \"ports: auto\" { printf \"%s\", y; next } { print }' /tmp/ports.yaml /etc/olcd/olcd.yaml | sudo tee /etc/olcd/olcd.yaml.new >/dev/null"
	echo 'sudo mv /etc/olcd/olcd.yaml.new /etc/olcd/olcd.yaml'
	echo 'olcd check-config /etc/olcd/olcd.yaml'
}
[ "$(printf '%s\n' "$yaml" | head -1)" = "ports:" ] || fail "README step 4's yaml block no longer starts with 'ports:': $(printf '%s\n' "$yaml" | head -1)"
{
	echo 'set -eo pipefail'
	# The status is read whole first: a reader that stops early (head,
	# grep -q) would make olcd status die of SIGPIPE under pipefail.
	cat <<'EOF'
walk_mode() {
	local s
	s=$(sudo olcd status)
	[[ ${s%%$'\n'*} == *"mode $1 "* ]] || { echo "check: want mode $1, olcd status says:" >&2; echo "$s" >&2; exit 1; }
}
walk_port() {
	local s
	s=$(sudo olcd status)
	grep -E "^$1 +[a-z-]+ +$2 " <<<"$s" >/dev/null || { echo "check: want $1 in mode $2, olcd status says:" >&2; echo "$s" >&2; exit 1; }
}
EOF
	echo 'echo "== README: check the sums"'
	emit_block sums "$sums"
	echo 'echo "== README: the tarball"'
	emit_block tarball "$tarball"
	echo 'echo "== README: the .deb"'
	emit_block deb "$deb"
	echo 'echo "== README: the first ten minutes"'
	# Step 4's yaml block goes into the config in place of "ports: auto",
	# before the block that reloads.
	emit_block first10 "$(printf '%s\n' "$first10" | awk -F'\t' -v y="$(printf '%s\n' "$first10_yaml" | head -1 | cut -f1)" '
		!done && $1 + 0 > y + 0 { print "0\t__YAML__"; done = 1 } { print }')"
	# The README's claim that a refused file fails the reload and keeps
	# the running config.
	cat <<'EOF'
echo "+ walk: a refused config: systemctl reload fails, the running config stays"
sudo cp /etc/olcd/olcd.yaml /tmp/good.yaml
echo "mode: sometimes" | sudo tee /etc/olcd/olcd.yaml >/dev/null
if sudo systemctl reload olcd; then echo "check: systemctl reload succeeded on a refused config" >&2; exit 1; fi
walk_mode OBSERVE
sudo cp /tmp/good.yaml /etc/olcd/olcd.yaml
echo "check: the refused reload exited 1 and olcd kept running its config"
EOF
} >"$out/walk.sh"
cp "$out/walk.sh" "$root/home/walker/walk.sh"
: >"$root$checks_done"
chroot "$root" chown walker:walker "$checks_done"

# --- A network namespace with a veth pair, made here and removed at exit.
ns=olcd-walk-$$
ip netns add "$ns"
cleanup() {
	# The daemon, if the walk left it running (by its pid file).
	if [ -f "$root/var/lib/walk-olcd.pid" ]; then
		kill -TERM "$(cat "$root/var/lib/walk-olcd.pid")" 2>/dev/null || true
	fi
	ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
ip -n "$ns" link add walk0 type veth peer name walk1
for l in lo walk0 walk1; do ip -n "$ns" link set "$l" up; done

say "walking $(basename "$readme") as user walker in $ns ($(wc -l <"$out/walk.sh") lines of walk.sh)"
set +e
ip netns exec "$ns" unshare -m --propagation private bash -c '
	set -e
	r=$1
	mount -t proc proc "$r/proc"
	mount -t sysfs sysfs "$r/sys"
	mount --rbind /sys/fs/cgroup "$r/sys/fs/cgroup"
	mount --rbind /dev "$r/dev"
	cp /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
	rc=0
	chroot "$r" su - walker -c "bash walk.sh" || rc=$?
	chroot "$r" /usr/local/sbin/systemctl stop olcd || true
	exit $rc
' walk "$root" 2>&1 | tee "$out/walk.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || fail "a README command or its check failed (exit $rc): $out/walk.log, the daemon's log in the chroot's /var/log/walk-olcd.log"
for c in uninstall enable reload off back; do
	grep -qx "$c" "$root$checks_done" || fail "the check after '$c' never ran: the README no longer has its command"
done
say "every README command ran; checks: $(tr '\n' ' ' <"$root$checks_done")"
rm -rf "$root"
say "passed in $((SECONDS - start)) s"
