#!/usr/bin/env bash
# The one list of system packages olcd's targets need, and the one step that
# installs them. `make demo`, `make test` and .ci/run call it; so can users:
#
#   scripts/deps.sh [-n] GROUP...     GROUP: run | demo | test | build | all
#
#   run    what every olcd run needs around it: ip (iproute2), nft
#          (nftables), sysctl (procps), and make itself (a fresh machine can
#          run this script before make)
#   demo   run + what `make demo` starts: nginx and php-fpm (the php backend)
#   test   demo + what `make test` and `make demo-full` start: systemd-analyze,
#          haproxy, prometheus and promtool, clang-format-14 (make vet),
#          mariadbd (the db backend of make demo-full) and debootstrap
#          (scripts/test-release.sh's Debian 12 chroot)
#   build  what `make generate` / `make check-generate` compile with: the
#          pinned clang-14 and llvm-14 (llvm-strip-14), linux-libc-dev; the
#          libbpf headers are vendored in bpf/include (a plain `go build`
#          needs none of these)
#   all    test + build (what CI installs)
#
# A package counts as present when dpkg says it is installed or its program
# or file is there (a source build counts). Nothing missing: prints nothing,
# runs no apt-get at all. Missing, as root with apt-get: says what it installs
# and installs it. Missing otherwise: one line naming the packages, exit 1.
# -n (dry run) prints what it would install and exits 0 without installing.
#
# OLCD_DEPS_ROOT prefixes every file it checks (tests point it at a fake
# root); PATH is the only other thing it consults.
set -euo pipefail

root=${OLCD_DEPS_ROOT:-}

# Each entry: package to install | what proves it present (cmd:NAME,
# file:PATH or glob:PATTERN; all must hold) | other package names that also
# satisfy it. Keep it the only list: .ci/run and the Makefile read nothing
# else.
pkgs_run=(
	"make|cmd:make|"
	"iproute2|cmd:ip|"
	"nftables|cmd:nft|"
	"procps|cmd:sysctl|"
)
pkgs_demo=(
	"nginx-light|cmd:nginx|nginx nginx-core nginx-full nginx-extras"
	"php-fpm|glob:/usr/sbin/php-fpm*|"
)
pkgs_test=(
	"systemd|cmd:systemd-analyze|"
	"haproxy|cmd:haproxy|"
	"prometheus|cmd:prometheus cmd:promtool|"
	"clang-format-14|cmd:clang-format-14|"
	"mariadb-server|cmd:mariadbd cmd:mariadb-install-db|"
	"debootstrap|cmd:debootstrap|"
)
# The compiler is pinned by its Debian package (bookworm: 1:14.0.6-12): the
# BPF objects are committed and must come out the same bytes (docs/lint.md).
pkgs_build=(
	"clang-14|cmd:clang-14|"
	"llvm-14|cmd:llvm-strip-14|"
	"linux-libc-dev|file:/usr/include/linux/bpf.h|"
)

usage() {
	echo "usage: scripts/deps.sh [-n] run|demo|test|build|all ..." >&2
	exit 2
}

dry=0
groups=()
for a in "$@"; do
	case $a in
	-n | --dry-run) dry=1 ;;
	run | demo | test | build | all) groups+=("$a") ;;
	*) usage ;;
	esac
done
[ ${#groups[@]} -gt 0 ] || usage

want=()
for g in "${groups[@]}"; do
	case $g in
	run) want+=("${pkgs_run[@]}") ;;
	demo) want+=("${pkgs_run[@]}" "${pkgs_demo[@]}") ;;
	test) want+=("${pkgs_run[@]}" "${pkgs_demo[@]}" "${pkgs_test[@]}") ;;
	build) want+=("${pkgs_build[@]}") ;;
	all) want+=("${pkgs_run[@]}" "${pkgs_demo[@]}" "${pkgs_test[@]}" "${pkgs_build[@]}") ;;
	esac
done

# have_cmd: on PATH, or in the sbin directories a non-root PATH lacks.
have_cmd() {
	command -v "$1" >/dev/null 2>&1 && return 0
	local d
	for d in /usr/sbin /sbin /usr/bin /bin; do
		[ -x "$root$d/$1" ] && return 0
	done
	return 1
}

have_glob() {
	local f
	for f in $root$1; do
		[ -e "$f" ] && return 0
	done
	return 1
}

dpkg_installed() {
	command -v dpkg-query >/dev/null 2>&1 || return 1
	local s
	s=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) || return 1
	[ "$s" = "install ok installed" ]
}

present() {
	local pkg=$1 checks=$2 alts=$3 c ok=1
	for c in $checks; do
		case $c in
		cmd:*) have_cmd "${c#cmd:}" || ok=0 ;;
		file:*) [ -e "$root${c#file:}" ] || ok=0 ;;
		glob:*) have_glob "${c#glob:}" || ok=0 ;;
		esac
	done
	[ $ok = 1 ] && return 0
	local p
	for p in $pkg $alts; do
		dpkg_installed "$p" && return 0
	done
	return 1
}

missing=()
seen=" "
for e in "${want[@]}"; do
	IFS='|' read -r pkg checks alts <<<"$e"
	case $seen in *" $pkg "*) continue ;; esac
	seen+="$pkg "
	present "$pkg" "$checks" "$alts" || missing+=("$pkg")
done

[ ${#missing[@]} -eq 0 ] && exit 0

if [ $dry = 1 ]; then
	echo "deps: would install: ${missing[*]}"
	exit 0
fi
uid=$(id -u 2>/dev/null || echo unknown)
if [ "$uid" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	why="not root"
	[ "$uid" = 0 ] && why="no apt-get"
	echo "deps: missing packages: ${missing[*]} ($why: install them, or run 'sudo scripts/deps.sh ${groups[*]}' on Debian/Ubuntu)" >&2
	exit 1
fi

echo "deps: installing ${missing[*]} (apt-get; scripts/deps.sh ${groups[*]})"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
	cat "$log" >&2
	echo "deps: apt-get failed installing: ${missing[*]}" >&2
	exit 1
fi
echo "deps: installed ${missing[*]}"
