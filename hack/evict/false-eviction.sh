#!/bin/bash
# Fast endpoint eviction in the lab (docs/benchmarks.md, "Phase 2 in about a
# second" and "A false eviction costs no request"): forced false evictions and
# agent stalls under load.
#
#   hack/evict/false-eviction.sh false RUNS    node-2's agent SIGSTOPped AND its kernel's ARP
#                                              replies / neighbour advertisements dropped for 6 s:
#                                              its peers' own ARP/NDP check gets no answer, they
#                                              confirm it dead and mark echo-2 NotReady; the
#                                              kubelet stand-in (alive) takes it back
#   hack/evict/false-eviction.sh control RUNS  the same fault with fast eviction OFF: first
#                                              replaces every node's agent by one started with
#                                              --fast-endpoint-eviction=false (they stay until
#                                              `lab down`); what the fault costs by itself
#   hack/evict/false-eviction.sh stall RUNS    node-2's agent SIGSTOPped for 6 s, its kernel
#                                              alive: nothing may be marked
#
# During `false` and `control`, every other namespace (nodes, client, control
# plane) holds a permanent neighbour entry for node-2's addresses, so the data
# path (cross-node pod traffic, the kubelet's API connection) needs no ARP/NDP
# answer from node-2 while the agents' check (its own packet-socket probe,
# which reads no neighbour table) still gets none: the fault hits the
# eviction's signal only. PIN=0 leaves the neighbour tables alone (the first
# series of this experiment: the ARP block then also cut cross-node traffic).
#
# HOLD_KUBELET=1 also SIGSTOPs node-2's kubelet stand-in (its pods keep running) for the 6 s:
# the lab's stand-in takes a foreign Ready=False back within milliseconds, on the pod's update
# event, before the EndpointSlice controller has published it, while a real kubelet does it at its
# status manager's next full sync, every 10 s; held, the eviction reaches kube-proxy and the
# endpoint is out for seconds, as it would be with a real kubelet.
#
# Needs a running lab (bin/mooring lab up), root, curl and nft; MOORING_LAB_DIR and
# MOORING (the mooring binary, default bin/mooring) as for the lab. Every run sends
# 10 requests/s to the demo Service from the client namespace, each a new connection
# with a 1 s timeout, and prints what happened; failed requests are listed with
# their time relative to the cut.
set -euo pipefail
mode=${1:?false, control or stall}; runs=${2:-10}
case $mode in false | control | stall) ;; *) echo "mode: false, control or stall" >&2; exit 2 ;; esac
lab=${MOORING_LAB_DIR:-/run/mooring-lab}; mooring=$(realpath "${MOORING:-bin/mooring}")
pin=${PIN:-1}; holdkubelet=${HOLD_KUBELET:-0}; victim=node-2
export MOORING_LAB_DIR=$lab KUBECONFIG=$lab/kubeconfig PATH=$lab/bin:$PATH
out=$(mktemp -d /tmp/mooring-evict.XXXXXX)
inlab() { "$mooring" lab exec "$@"; }
cat > "$out/load.sh" <<'LOAD'
#!/bin/sh
# one line per request: <unix time> <http code> <pod that answered>
n=$(( $1 * 10 )); i=0
while [ $i -lt $n ]; do
  ( r=$(curl -s --max-time 1 -w ' code=%{http_code}' http://10.213.0.100/)
    code=${r##*code=}; pod=$(echo "$r" | sed -n 's/.*pod=\([^ ]*\).*/\1/p')
    echo "$(date +%s.%N) $code ${pod:--}" ) &
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
kubeletpid() { pgrep -f "mooring lab kubelet --kubeconfig=$lab/cluster.kubeconfig --node-name=$1( |$)" | head -1; }
agentpid() { pgrep -f "mooring agent --kubeconfig=$lab/cluster.kubeconfig --node-name=$1( |$)" | head -1; }
marked() { cat "$lab"/logs/mooring-agent-node-*.log "$out"/agent-*.log 2>/dev/null | grep -c "pods of a dead node marked NotReady" || true; }
status=$("$mooring" lab status)
hosts=$(awk '$2=="node"||$2=="client"||$2=="control-plane"{print $1}' <<< "$status")
read -r v4 v6 mac < <(awk -v n=$victim '$1==n{print $3, $4, $5}' <<< "$status")
pinning() { # add|del: node-2's neighbour entries on every other namespace
  [ "$pin" = 1 ] || return 0
  for h in $hosts; do
    [ "$h" = $victim ] && continue
    for a in $v4 $v6; do
      if [ "$1" = add ]; then inlab "$h" -- ip neigh replace "$a" lladdr "$mac" dev eth0 nud permanent
      else inlab "$h" -- ip neigh del "$a" dev eth0 2>/dev/null || true; fi
    done
  done
}
if [ "$mode" = control ]; then
  # Fast eviction off: the lab's agents (started with --fast-endpoint-eviction)
  # leave gracefully and agents without it take their place.
  for h in $hosts; do
    case $h in node-*) ;; *) continue ;; esac
    p=$(agentpid "$h"); [ -n "$p" ] && kill -TERM "$p"
    while [ -n "$p" ] && kill -0 "$p" 2>/dev/null; do sleep 0.1; done
    setsid "$mooring" lab exec "$h" -- "$mooring" agent --kubeconfig="$lab/cluster.kubeconfig" --node-name="$h" \
      --fast-endpoint-eviction=false > "$out/agent-$h.log" 2>&1 < /dev/null &
  done
  echo "agents restarted without fast eviction (logs in $out); waiting 15 s for gossip and the hold-down"
  sleep 15
fi
total_ok=0; total=0
for run in $(seq "$runs"); do
  agent=$(agentpid $victim)
  before=$(marked)
  # The watch ends by itself after the run (a pipeline's pid is its last
  # command's, so it could not be killed reliably).
  timeout 24 kubectl get pod echo-2 --watch --output-watch-events \
    -o jsonpath='{.type} {.object.status.conditions[?(@.type=="Ready")].status}{"\n"}' |
    while read -r l; do echo "$(date +%s.%N) $l"; done > "$out/$run.watch" 2>&1 &
  watches=$!
  # echo-2's endpoints as the EndpointSlice controller publishes them: did
  # the eviction reach the data path?
  timeout 24 kubectl get endpointslices -l kubernetes.io/service-name=echo --watch --output-watch-events \
    -o jsonpath='{.type} {.object.addressType} {.object.endpoints[*].targetRef.name} / {.object.endpoints[*].conditions.ready}{"\n"}' |
    while read -r l; do
      # "<time> <event> <family> <echo-2's ready, or gone>"
      echo "$(date +%s.%N) $(awk '{r="gone"; n=0; for (i=3; $i!="/"; i++) n++; for (i=3; i<3+n; i++) if ($i=="echo-2") r=$(i+n+1); print $1, $2, r}' <<< "$l")"
    done > "$out/$run.eps" 2>&1 &
  watches="$watches $!"
  inlab client -- "$out/load.sh" 20 > "$out/$run.load" 2>&1 &
  load=$!
  sleep 4
  [ "$mode" != stall ] && pinning add
  kubelet=""; [ "$holdkubelet" = 1 ] && kubelet=$(kubeletpid $victim) && kill -STOP "$kubelet"
  kill -STOP "$agent"; t0=$(date +%s.%N)
  [ "$mode" != stall ] && inlab $victim -- nft -f "$out/block.nft"
  sleep 6
  if [ "$mode" != stall ]; then
    inlab $victim -- nft delete table arp evictblock
    inlab $victim -- nft delete table ip6 evictblock6
  fi
  kill -CONT "$agent"
  [ -n "$kubelet" ] && kill -CONT "$kubelet"
  [ "$mode" != stall ] && pinning del
  wait "$load"; sleep 2
  ok=$(awk '$2==200' "$out/$run.load" | wc -l); all=$(wc -l < "$out/$run.load")
  from2=$(awk -v t="$t0" '$2==200 && $3~/echo-2/ && $1>t+6' "$out/$run.load" | wc -l)
  total_ok=$((total_ok + ok)); total=$((total + all))
  fails=$(awk -v t="$t0" '$2!=200 {printf " %+.2fs(%s)", $1-t, $2}' "$out/$run.load")
  nr=$(awk '$3=="False"{print $1; exit}' "$out/$run.watch")
  if [ -n "$nr" ]; then
    back=$(awk -v t="$nr" '$3=="True" && $1>t {print $1; exit}' "$out/$run.watch")
    what="NotReady $(echo "$nr - $t0" | bc) s after the cut, Ready again $(echo "${back:-0} - $nr" | bc) s later"
  else
    what="never NotReady"
  fi
  # the first time echo-2 is not ready in a slice after the cut, and the
  # first time after that it is ready in every slice again
  eps=$(awk -v t="$t0" '$1>t && $4!="true" && !gone {gone=$1} gone && $1>gone && $4=="true" && !($3 in back) {back[$3]=$1}
    END {if (gone) {b=0; for (f in back) if (back[f]>b) b=back[f]; printf "echo-2 endpoint not ready %.2f s after the cut for %.3f s", gone-t, (b?b-gone:-1)} else printf "echo-2 endpoint never left"}' "$out/$run.eps")
  echo "run $run: $what; $eps; pods marked $(( $(marked) - before )); requests ok $ok/$all (echo-2 after the fault: $from2)${fails:+; failed at$fails}"
  wait $watches || true
  sleep 4
done
echo "total: requests ok $total_ok/$total"
echo "logs in $out"
