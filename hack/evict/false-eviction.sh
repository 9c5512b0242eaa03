#!/bin/bash
# Fast endpoint eviction in the lab (docs/benchmarks.md, "Phase 2 in about a
# second"): forced false evictions and agent stalls under load.
#
#   hack/evict/false-eviction.sh false RUNS   node-2's agent SIGSTOPped AND its ARP/NDP
#                                             replies dropped for 6 s: its peers confirm it
#                                             dead and mark echo-2 NotReady; the kubelet
#                                             stand-in (alive) takes it back
#   hack/evict/false-eviction.sh stall RUNS   node-2's agent SIGSTOPped for 6 s, its kernel
#                                             alive: nothing may be marked
#
# Needs a running lab (bin/mooring lab up), root, curl and nft; MOORING_LAB_DIR and
# MOORING (the mooring binary, default bin/mooring) as for the lab. Every run sends
# 10 requests/s to the demo Service from the client namespace, each a new connection
# with a 1 s timeout, and prints what happened.
set -euo pipefail
mode=${1:?false or stall}; runs=${2:-10}
lab=${MOORING_LAB_DIR:-/run/mooring-lab}; mooring=${MOORING:-bin/mooring}
export MOORING_LAB_DIR=$lab KUBECONFIG=$lab/kubeconfig PATH=$lab/bin:$PATH
out=$(mktemp -d /tmp/mooring-evict.XXXXXX)
cat > "$out/load.sh" <<'LOAD'
#!/bin/sh
n=$(( $1 * 10 )); i=0
while [ $i -lt $n ]; do
  ( code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 http://10.213.0.100/); echo "$(date +%s.%N) $code" ) &
  sleep 0.1; i=$((i+1))
done
wait
LOAD
chmod +x "$out/load.sh"
cat > "$out/block.nft" <<'NFT'
table arp evictblock {
  chain out {
    type filter hook output priority 0;
    arp operation reply drop
  }
}
table ip6 evictblock6 {
  chain out {
    type filter hook output priority 0;
    icmpv6 type nd-neighbor-advert drop
  }
}
NFT
marked() { cat "$lab"/logs/mooring-agent-node-*.log | grep -c "pods of a dead node marked NotReady" || true; }
for run in $(seq "$runs"); do
  agent=$(pgrep -f "mooring agent --kubeconfig=$lab/cluster.kubeconfig --node-name=node-2")
  before=$(marked)
  # The watch ends by itself after the run (a pipeline's pid is its last
  # command's, so it could not be killed reliably).
  timeout 24 kubectl get pod echo-2 --watch --output-watch-events \
    -o jsonpath='{.type} {.object.status.conditions[?(@.type=="Ready")].status}{"\n"}' |
    while read -r l; do echo "$(date +%s.%N) $l"; done > "$out/$run.watch" 2>&1 &
  "$mooring" lab exec client -- "$out/load.sh" 20 > "$out/$run.load" 2>&1 &
  load=$!
  sleep 4
  kill -STOP "$agent"; t0=$(date +%s.%N)
  [ "$mode" = false ] && "$mooring" lab exec node-2 -- nft -f "$out/block.nft"
  sleep 6
  if [ "$mode" = false ]; then
    "$mooring" lab exec node-2 -- nft delete table arp evictblock
    "$mooring" lab exec node-2 -- nft delete table ip6 evictblock6
  fi
  kill -CONT "$agent"
  wait "$load"; sleep 2
  ok=$(awk '$2==200' "$out/$run.load" | wc -l); all=$(wc -l < "$out/$run.load")
  nr=$(awk '$3=="False"{print $1; exit}' "$out/$run.watch")
  if [ -n "$nr" ]; then
    back=$(awk -v t="$nr" '$3=="True" && $1>t {print $1; exit}' "$out/$run.watch")
    echo "run $run: NotReady $(echo "$nr - $t0" | bc) s after the cut, Ready again $(echo "${back:-0} - $nr" | bc) s later; pods marked $(( $(marked) - before )); requests ok $ok/$all"
  else
    echo "run $run: never NotReady; pods marked $(( $(marked) - before )); requests ok $ok/$all"
  fi
  wait # the watch
  sleep 4
done
echo "logs in $out"
