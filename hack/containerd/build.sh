#!/usr/bin/env bash
# Builds containerd, containerd-shim-runc-v2 and ctr (github.com/containerd/
# containerd/v2, pinned in this module's go.mod) into a per-user cache folder
# keyed by go.mod, go.sum and this script's commands, and prints that folder as the last
# line. A warm cache costs a hash. The lab's real nodes run them
# (`mooring lab up --runtime=containerd`, docs/lab.md) with Debian's runc.
#
# Static (CGO_ENABLED=0) and without the btrfs, devmapper and zfs
# snapshotters: the nodes use overlayfs, and those need cgo or kernel
# headers this machine does not have.
#
# The cache is ${MOORING_CONTAINERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mooring/containerd}/<key>,
# with <cache>/current pointing at the newest build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/cache.sh"
key=$(cache_key "$here/build.sh" "$here/go.mod" "$here/go.sum")
cache="${MOORING_CONTAINERD_CACHE:-${XDG_CACHE_HOME:-${HOME:?neither XDG_CACHE_HOME nor HOME is set}/.cache}/mooring/containerd}"
out="$cache/$key"
bins=(containerd containerd-shim-runc-v2 ctr)
done_() { for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if ! done_; then
  # One build at a time per cache: a second caller waits (saying for whom),
  # then finds it done.
  cache_lock "$cache" containerd
fi
if ! done_; then
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp"
  cd "$here"
  mod=github.com/containerd/containerd/v2
  ver=$(go list -m -f '{{.Version}}' "$mod")
  cache_start containerd "containerd $ver, containerd-shim-runc-v2 and ctr (the lab's real nodes run them)" \
    "$cache" "$key" "2-4 min on 2 cores when Go's build cache is cold, seconds when warm"
  export CGO_ENABLED=0
  tags="no_btrfs no_devmapper no_zfs"
  ld="-s -w -X $mod/version.Version=$ver -X $mod/version.Package=$mod"
  go build -trimpath -tags "$tags" -ldflags "$ld" -o "$out.tmp/containerd" $mod/cmd/containerd
  go build -trimpath -tags "$tags" -ldflags "$ld" -o "$out.tmp/containerd-shim-runc-v2" $mod/cmd/containerd-shim-runc-v2
  go build -trimpath -tags "$tags" -ldflags "$ld" -o "$out.tmp/ctr" $mod/cmd/ctr
  rm -rf "$out" && mv "$out.tmp" "$out"
  cache_done containerd
fi
ln -sfn "$key" "$cache/current"
echo "$out"
