#!/usr/bin/env bash
# make demo-default: olcd on its embedded default (no config file) protecting a test
# node built from two network namespaces and a veth pair, nothing else:
#
#   [client netns] 10.203.0.2 ── veth ── 10.203.0.1 [node netns]
#                                                    loadgen serve :8080
#                                                    olcd run (embedded default)
#
# Phases: calm traffic; a noisy neighbour burns every CPU while olcd observes
# (it counts what it would shed); the operator switches to enforce and new
# connections are shed at TC; the neighbour stops and olcd recovers to p = 0.
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
		-rate "$1" -duration "${2}s" -timeout 1500ms
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
	pids+=($!)
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

ip netns exec "$NODE" "$work/loadgen" serve -addr 10.203.0.1:8080 -work 2ms -duration 5m 2>/dev/null &
pids+=($!)

say "starting olcd with NO config file (embedded default: observe mode, ports: auto)"
ip netns exec "$NODE" "$OLCD" run --admin-socket "$SOCK" --decision-log "$work/decisions.jsonl" \
	>"$work/olcd.log" 2>&1 &
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

say "phase 1 — calm: 50 new connections/s for 5 s"
load_and_look 50 6 "$BRIEF"

say "phase 2 — a noisy neighbour burns every CPU; olcd OBSERVES (counts would-drop, sheds nothing)"
burn 40
sleep 2
load_and_look 50 8

say "phase 3 — operator switches to ENFORCE: new connections are shed at TC, established ones are not touched"
olcd set mode enforce --socket "$SOCK"
sleep 1
load_and_look 50 8 "$BRIEF"

say "phase 4 — the neighbour stops; olcd waits its cooldown, then recovers to p = 0"
pkill -f "$work/loadgen burn" 2>/dev/null || true
t0=$(date +%s)
recovered=no
for i in 1 2 3 4 5 6 7 8; do
	load_and_look 50 4 "$LINE"
	if olcd status --socket "$SOCK" | grep -q '^no overload'; then
		recovered=yes
		break
	fi
done
if [ $recovered = yes ]; then
	echo "  recovered: drop probability back to 0 about $(( $(date +%s) - t0 ))s after the neighbour stopped"
else
	echo "  NOT recovered after $(( $(date +%s) - t0 ))s: something else keeps this host busy (cpu_busy covers"
	echo "  the whole host; see 'top'). Run the demo on an idle machine to see the recovery."
fi

say "what olcd measured (Prometheus, read from the BPF maps at scrape time)"
printf '  %-40s %s\n' \
	"new connections seen" "$(metric olcd_port_new_connections_total)" \
	"would-drop (observe phase)" "$(metric olcd_port_would_drop_total)" \
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
