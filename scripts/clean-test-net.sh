#!/usr/bin/env bash
# Removes what a killed test run left behind in this host's network
# namespace: the named namespaces and host-side veth ends of olcd's own
# tests, recognised by the names they give them, nothing else:
#
#   testutil.Net (internal/testutil)   netns olcd-test-<8 hex>-node|peer,
#                                      veth ot<8 hex>n|p
#   the overload harness (tests/e2e)   netns olov-<5 hex>, veth olov<5 hex>h|c
#
# A leftover end holding an address in a documentation range makes
# testutil.FreeDocRange fail every root test once both ranges are held.
# .ci/run calls it before the tests; never run it while tests run on the
# host (it would take their namespaces away).
set -euo pipefail

netns_re='^(olcd-test-[0-9a-f]{8}-(node|peer)|olov-[0-9a-f]{5})$'
link_re='^(ot[0-9a-f]{8}[np]|olov[0-9a-f]{5}[hc])$'

for ns in $(ip netns list | awk '{print $1}'); do
	if [[ $ns =~ $netns_re ]]; then
		echo "clean-test-net: removing leftover netns $ns" >&2
		ip netns del "$ns"
	fi
done
# Deleting a namespace takes the veth ends in it; a host-side end goes
# with its peer, so list the links after the namespaces are gone.
for link in $(ip -br link show | awk '{sub(/@.*/, "", $1); print $1}'); do
	if [[ $link =~ $link_re ]]; then
		echo "clean-test-net: removing leftover interface $link" >&2
		ip link del "$link" 2>/dev/null || true # gone with its peer meanwhile
	fi
done
