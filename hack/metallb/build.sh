#!/usr/bin/env bash
# Builds MetalLB's controller and speaker (go.universe.tf/metallb, pinned in
# this module's go.mod) into a per-user cache folder keyed by go.mod, go.sum
# and this script's commands, copies MetalLB's CRDs (config/crd/bases in the
# module zip) and its own manifest (config/manifests/metallb-native.yaml: real
# nodes install MetalLB from it) next to them, and prints that folder as the
# last line. A warm cache costs a hash.
#
# The cache is ${XDG_CACHE_HOME:-$HOME/.cache}/mooring/metallb/<key>, with
# <cache>/current pointing at the newest build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/cache.sh"
root=$(cd "$here/../.." && pwd)
key=$(cache_key "$here/build.sh" "$here/go.mod" "$here/go.sum" "$root/hack/image/main.go" "$root/internal/image/tool.go" \
  "$root/internal/image/build.go" "$root/internal/image/image.go")
cache="${XDG_CACHE_HOME:-${HOME:?neither XDG_CACHE_HOME nor HOME is set}/.cache}/mooring/metallb"
out="$cache/$key"
done_() { [ -x "$out/controller" ] && [ -x "$out/speaker" ] && [ -d "$out/crds" ] && [ -f "$out/manifests/metallb-native.yaml" ] \
  && [ -f "$out/images/controller.oci.tar" ] && [ -f "$out/images/speaker.oci.tar" ]; }
if ! done_; then
  # One build at a time per cache: a second caller waits (saying for whom),
  # then finds it done.
  cache_lock "$cache" metallb
fi
if ! done_; then
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp/crds" "$out.tmp/manifests"
  cd "$here"
  ver=$(go list -m -f '{{.Version}}' go.universe.tf/metallb)
  cache_start metallb "MetalLB $ver's controller and speaker (the migration tests run the real MetalLB)" \
    "$cache" "$key" "about 3.5 min on 2 cores when Go's build cache is cold, under a minute when warm"
  # MetalLB v0.16.2 pins github.com/metallb/frr-k8s v0.0.27, which the Go
  # module proxy reachable here does not serve (403); v0.0.21 is served and
  # lacks one type that only MetalLB's frr-k8s BGP mode uses (AS-path
  # prepending). So the build uses v0.0.21 (go.mod's replace) with that type
  # and its Advertise field added, in a temporary copy: nothing of it is
  # kept in the repository, and the lab runs MetalLB in L2 mode only.
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
  # go mod download prints the module's folder (downloading it first on a
  # fresh machine, where go list -m would print nothing).
  dir_of() { go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'; }
  frrver=$(sed -n 's|^replace github.com/metallb/frr-k8s => github.com/metallb/frr-k8s \(v[^ ]*\)$|\1|p' go.mod)
  frr=$(dir_of "github.com/metallb/frr-k8s@$frrver")
  [ -d "$frr" ] || { echo "metallb: cannot find github.com/metallb/frr-k8s@$frrver" >&2; exit 1; }
  cp -r "$frr" "$work/frr-k8s" && chmod -R u+w "$work/frr-k8s"
  types="$work/frr-k8s/api/v1beta1/frrconfiguration_types.go"
  grep -q 'PrefixesWithCommunity \[\]CommunityPrefixes' "$types"
  sed -i 's|^\(\s*PrefixesWithCommunity \[\]CommunityPrefixes .*\)$|\1\n\tPrefixesWithAsPathPrepend []AsPathPrependPrefixes `json:"withAsPathPrepend,omitempty"`|' "$types"
  cat >"$work/frr-k8s/api/v1beta1/mooring_aspathprepend.go" <<'GO'
package v1beta1

// AsPathPrependPrefixes is added by Mooring's hack/metallb/build.sh (see there).
type AsPathPrependPrefixes struct {
	Prefixes      []string `json:"prefixes,omitempty"`
	AsPathPrepend uint8    `json:"asPathPrepend,omitempty"`
}
GO
  sed 's|^replace github.com/metallb/frr-k8s => .*$|replace github.com/metallb/frr-k8s => '"$work"'/frr-k8s|' go.mod >"$work/go.mod"
  cp go.sum "$work/go.sum"
  CGO_ENABLED=0 go build -modfile="$work/go.mod" -trimpath -ldflags "-s -w" -o "$out.tmp/controller" go.universe.tf/metallb/controller
  CGO_ENABLED=0 go build -modfile="$work/go.mod" -trimpath -ldflags "-s -w" -o "$out.tmp/speaker" go.universe.tf/metallb/speaker
  src=$(dir_of "go.universe.tf/metallb@$ver")
  cp "$src"/config/crd/bases/*.yaml "$out.tmp/crds/"
  cp "$src"/config/manifests/metallb-native.yaml "$out.tmp/manifests/"
  chmod -R u+w "$out.tmp/crds" "$out.tmp/manifests"
  # The images real nodes import (MetalLB's own cannot be pulled here), named
  # as its manifest names them: quay.io/metallb/{controller,speaker}:$ver. The
  # speaker runs as root like MetalLB's image (NET_RAW for its raw sockets);
  # the manifest runs the controller as 65534.
  (cd "$root" && go run ./hack/image tool --name controller --binary "$out.tmp/controller" --version "$ver" --out "$out.tmp/images" >/dev/null &&
    go run ./hack/image tool --name speaker --binary "$out.tmp/speaker" --version "$ver" --user 0:0 --out "$out.tmp/images" >/dev/null)
  rm -rf "$out.tmp/images/controller" "$out.tmp/images/speaker"
  echo "$ver" >"$out.tmp/VERSION"
  rm -rf "$out" && mv "$out.tmp" "$out"
  cache_done metallb
fi
ln -sfn "$key" "$cache/current"
echo "$out"
