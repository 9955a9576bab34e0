#!/usr/bin/env bash
# make test's log (Makefile, test), so that the run ends with a summary:
#
#   scripts/test-log.sh run LOG CMD...   runs CMD, its output (stdout and stderr)
#                                        on the terminal and appended to LOG; exits
#                                        with CMD's status, so a failing step still
#                                        stops make there
#   scripts/test-log.sh summary LOG      every step passed, and the GOAL MISSED lines
#                                        of the whole log (a figure short of a stretch
#                                        goal, logged by a test that passed), or none
set -uo pipefail

usage() {
	echo "usage: scripts/test-log.sh run LOG CMD... | summary LOG" >&2
	exit 2
}
[ $# -ge 2 ] || usage
op=$1 log=$2
shift 2
case $op in
run)
	[ $# -ge 1 ] || usage
	printf '== %s\n' "$*" >>"$log"
	"$@" 2>&1 | tee -a "$log"
	exit "${PIPESTATUS[0]}"
	;;
summary)
	[ -f "$log" ] || { echo "test-log: no log $log" >&2; exit 1; }
	misses=$(grep -v '^== ' "$log" | grep 'GOAL MISSED' | sed 's/^[[:space:]]*//')
	echo
	echo "make test: every step passed (their output: $log)"
	if [ -z "$misses" ]; then
		echo "GOAL MISSED: none"
	else
		echo "GOAL MISSED: $(wc -l <<<"$misses") figure(s) short of a stretch goal, above the test's pass threshold:"
		sed 's/^/  /' <<<"$misses"
	fi
	;;
*) usage ;;
esac
