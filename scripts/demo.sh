#!/usr/bin/env bash
# make demo-default: olcd on its embedded default (no config file) protecting a test
# node built from two network namespaces and a veth pair, nothing else:
#
#   [client netns] 10.203.0.2 ── veth ── 10.203.0.1 [node netns]
#                                                    loadgen serve :8080
#                                                    olcd run (embedded default)
#
# The server reads a request line, waits for its one worker (closing the
# connection unanswered after 1 s, as a server's queue timeout does) and
# spends 10 ms of it on each connection: its capacity is 100 connections/s. Phases: calm traffic; a noisy neighbour burns every
# CPU while the port keeps up (the defaults have no CPU guard: olcd reads the
# port's own response time); three times the capacity while olcd observes
# (it counts what it would shed); the operator switches to enforce and new
# connections are shed at TC; calm again and olcd recovers to p = 0.
# Every load is bounded; the namespaces are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "demo: needs root (network namespaces, BPF): run 'sudo make demo-default'" >&2
	exit 1
fi
for t in ip tc; do
	command -v $t >/dev/null || { echo "demo: '$t' missing: apt-get install iproute2" >&2; exit 1; }
done
mountpoint -q /sys/fs/bpf 2>/dev/null || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true

OLCD=${OLCD:-bin/olcd}
[ -x "$OLCD" ] || { echo "demo: $OLCD missing: run 'make build'" >&2; exit 1; }
work=$(mktemp -d /tmp/olcd-demo.XXXXXX)
go build -o "$work/loadgen" ./tests/loadgen

id=$$
NODE=olcd-demo-node-$id
CLIENT=olcd-demo-client-$id
VN=odn$id
VC=odc$id
VN=${VN:0:15}
VC=${VC:0:15}
SOCK=$work/olcd.sock
pids=()

cleanup() {
	set +e
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	ip netns del "$NODE" 2>/dev/null
	ip netns del "$CLIENT" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
olcd() { ip netns exec "$NODE" "$OLCD" "$@"; }
load() { # load RATE SECONDS: new connections from the client namespace
	ip netns exec "$CLIENT" "$work/loadgen" connect -target 10.203.0.1:8080 \
		-rate "$1" -duration "${2}s" -timeout 1500ms -request
}
load_and_look() { # load RATE SECONDS FILTER: status is taken in the middle of the load
	load "$1" "$2" >"$work/load.out" &
	local lp=$!
	sleep $(( $2 / 2 + 1 ))
	if [ -n "${3:-}" ]; then olcd status --socket "$SOCK" | sed -n "$3"; else olcd status --socket "$SOCK"; fi
	wait $lp
	echo "  client: $(cat "$work/load.out")"
}
BRIEF='/^no overload\|^OVERLOAD/,/^$/p;/^PORT/,/^$/p'
LINE='/^no overload\|^OVERLOAD/p;/^tcp\//p'

burn() { # burn SECONDS: a noisy neighbour on every CPU of the node
	"$work/loadgen" burn -duration "${1}s" &
	burnpid=$!
	pids+=($burnpid)
}
metric() { # metric NAME: sum of a metric's samples on the node
	ip netns exec "$NODE" bash -c "exec 3<>/dev/tcp/127.0.0.1/9477; printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; cat <&3" |
		awk -v m="$1" '$1 ~ "^"m"({|$)" {s += $2} END {printf "%d", s}'
}

say "building the test node: netns $NODE + $CLIENT, veth $VN <-> $VC"
ip netns add "$NODE"
ip netns add "$CLIENT"
ip link add "$VN" netns "$NODE" type veth peer name "$VC" netns "$CLIENT"
ip -n "$NODE" addr add 10.203.0.1/24 dev "$VN"
ip -n "$CLIENT" addr add 10.203.0.2/24 dev "$VC"
for ns in "$NODE" "$CLIENT"; do ip -n "$ns" link set lo up; done
ip -n "$NODE" link set "$VN" up
ip -n "$CLIENT" link set "$VC" up

ip netns exec "$NODE" "$work/loadgen" serve -addr 10.203.0.1:8080 -work 10ms -workers 1 -max-wait 1s -request -duration 5m 2>/dev/null &
pids+=($!)

say "starting olcd with NO config file (embedded default: observe mode, ports: auto)"
# Its state file in the demo's directory and nothing pinned: the demo
# leaves nothing on the host (the default /var/lib/olcd state file would
# hand a later olcd this demo's live override, mode enforce).
ip netns exec "$NODE" "$OLCD" run --admin-socket "$SOCK" --decision-log "$work/decisions.jsonl" \
	--state-dir "$work/state" --pin-dir off >"$work/olcd.log" 2>&1 &
pids+=($!)
# Until the first tick: before it, status answers "starting".
for _ in $(seq 1 50); do
	st=$(olcd status --socket "$SOCK" 2>/dev/null) && ! grep -q '^starting' <<<"$st" && break
	sleep 0.2
done
olcd status --socket "$SOCK" >/dev/null || { cat "$work/olcd.log"; exit 1; }
sed 's/^/  olcd| /' "$work/olcd.log"
# Port discovery runs at start and every 10 s; the server is already up.
olcd status --socket "$SOCK"

say "phase 1 — calm: 30 new connections/s (the server answers 100/s) for 6 s"
load_and_look 30 6 "$BRIEF"

say "phase 2 — a noisy neighbour burns every CPU; the port keeps up, so olcd sheds nothing"
echo "  (olcd reads the port's own response time; the node's CPU pressure, psi_cpu_some, is shown"
echo "  in status but is no default guard: it reads the neighbour's work as well)"
burn 12
sleep 2
load_and_look 30 8
kill "$burnpid" 2>/dev/null || true

say "phase 3 — three times the capacity (300/s); olcd OBSERVES (counts would-drop, sheds nothing)"
load_and_look 300 8 "$BRIEF"

say "phase 4 — operator switches to ENFORCE: new connections are shed at TC, established ones are not touched"
olcd set mode enforce --socket "$SOCK"
sleep 1
load_and_look 300 8 "$BRIEF"

say "phase 5 — calm again: olcd lets go, back to p = 0"
t0=$(date +%s)
recovered=no
for i in 1 2 3 4 5 6 7 8; do
	load_and_look 30 4 "$LINE"
	if olcd status --socket "$SOCK" | grep -q '^no overload'; then
		recovered=yes
		break
	fi
done
if [ $recovered = yes ]; then
	echo "  recovered: drop probability back to 0 about $(( $(date +%s) - t0 ))s after the overload stopped"
else
	echo "  NOT recovered after $(( $(date +%s) - t0 ))s: the port's response time stays above its target"
	echo "  (see the RESPONSE table of olcd status); run the demo on an idle machine to see the recovery."
fi

say "what olcd measured (Prometheus, read from the BPF maps at scrape time)"
printf '  %-40s %s\n' \
	"new connections seen" "$(metric olcd_port_new_connections_total)" \
	"would-drop (observe phases)" "$(metric olcd_port_would_drop_total)" \
	"dropped at TC (enforce phase)" "$(metric olcd_port_dropped_total)" \
	"SYN retransmits of dropped SYNs" "$(metric olcd_port_syn_retransmits_total)"

say "decision log (why olcd did what it did; the last port records)"
if command -v python3 >/dev/null; then
	grep -v '"port":"node"' "$work/decisions.jsonl" | tail -n 8 | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    what = r["msg"] + (" %s %.3f -> %.3f" % (r["port"], r["from"], r["to"]) if "from" in r else "")
    print("  %s  %-44s %s" % (r["time"][11:23], what, r.get("reason", "")))'
else
	tail -n 6 "$work/decisions.jsonl" | cut -c1-240
fi

say "stopping olcd (SIGTERM) and checking that nothing of it remains"
kill -TERM "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
left=$(ip netns exec "$NODE" tc filter show dev "$VN" ingress 2>/dev/null)
xdp=$(ip -n "$NODE" link show "$VN" | grep -c 'xdp' || true)
if [ -z "$left" ] && [ "$xdp" = 0 ]; then
	echo "  no tc filter, no XDP program left on $VN"
else
	echo "  LEFT BEHIND: $left (xdp: $xdp)"; exit 1
fi
say "demo done"
