#!/usr/bin/env bash
# Builds helm from Go modules into a cache folder keyed by this module's
# go.mod, go.sum and this script's commands, and prints that folder as the last line.
# A warm cache costs a hash.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/cache.sh"
key=$(cache_key "$here/build.sh" "$here/go.mod" "$here/go.sum")
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mooring/helm"
out="$cache/$key"
if [ ! -x "$out/helm" ]; then
  # One build at a time per cache: a second caller waits (saying for whom),
  # then finds it done.
  cache_lock "$cache" helm
fi
if [ ! -x "$out/helm" ]; then
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp"
  cd "$here"
  ver=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)
  # helm's default Kubernetes version (helm template, helm lint) follows its
  # client-go, as helm's own Makefile sets it: client-go v0.N -> 1.N.
  kminor=$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$ver"
  for p in pkg/lint/rules pkg/chartutil; do
    ld="$ld -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$kminor"
  done
  cache_start helm "helm $ver (make demo and the chart tests render charts/mooring with it)" \
    "$cache" "$key" "about 15 min on 2 cores when Go's build cache is cold, under a minute when warm"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$out.tmp/helm" helm.sh/helm/v3/cmd/helm
  rm -rf "$out" && mv "$out.tmp" "$out"
  ln -sfn "$key" "$cache/current"
  cache_done helm
fi
echo "$out"
