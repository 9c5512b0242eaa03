#!/usr/bin/env bash
# Builds the reference CNI plugins bridge, ptp, loopback and host-local
# (containernetworking/plugins, pinned in this module's go.mod) into a cache
# folder keyed by go.mod, go.sum and this script's commands (lib/cache.sh: cache_key), and prints that folder as
# the last line. A warm cache costs a hash. Static (CGO_ENABLED=0), as
# mooring-ipam is built: the latency benchmark compares the two, and a
# dynamically linked host-local pays the dynamic loader on every call.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/cache.sh"
key=$(cache_key "$here/build.sh" "$here/go.mod" "$here/go.sum")
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mooring/cniplugins"
out="$cache/$key"
bins=(bridge ptp loopback host-local)
have() { for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if ! have; then
  # One build at a time per cache: a second caller waits (saying for whom),
  # then finds it done.
  cache_lock "$cache" cniplugins
fi
if ! have; then
  cache_start cniplugins "the reference CNI plugins ${bins[*]} (the pod IPAM tests and lab wire pods through them)" \
    "$cache" "$key" "1-3 min on 2 cores when Go's build cache is cold, seconds when warm"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  cd "$here"
  pkg=github.com/containernetworking/plugins/plugins
  export CGO_ENABLED=0
  go build -trimpath -ldflags "-s -w" -o "$out.tmp/bridge" $pkg/main/bridge
  go build -trimpath -ldflags "-s -w" -o "$out.tmp/ptp" $pkg/main/ptp
  go build -trimpath -ldflags "-s -w" -o "$out.tmp/loopback" $pkg/main/loopback
  go build -trimpath -ldflags "-s -w" -o "$out.tmp/host-local" $pkg/ipam/host-local
  rm -rf "$out" && mv "$out.tmp" "$out"
  cache_done cniplugins
fi
echo "$out"
