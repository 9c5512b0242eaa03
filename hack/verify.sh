#!/usr/bin/env bash
# Fails when generated code or manifests, gofmt or go mod tidy are stale.
# Run after `make generate` (make verify does both).
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
# Per run, not a fixed /tmp path: two verifies at once (two checkouts on
# one machine) restored each other's go.mod into the wrong module.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unformatted=$(gofmt -l $(git ls-files --cached --others --exclude-standard '*.go'))
if [ -n "$unformatted" ]; then
  echo "verify: gofmt would change these files (run gofmt -w):"; echo "$unformatted"; fail=1
fi
for m in . hack/tools hack/kubebin hack/cniplugins hack/helm hack/metallb hack/containerd; do
  (cd "$m" && cp go.mod "$tmp/go.mod" && cp go.sum "$tmp/go.sum" && go mod tidy >/dev/null 2>&1 \
    && if ! cmp -s go.mod "$tmp/go.mod" || ! cmp -s go.sum "$tmp/go.sum"; then \
         echo "verify: go mod tidy changed $m/go.mod or go.sum: commit the tidied files"; \
         cp "$tmp/go.mod" go.mod; cp "$tmp/go.sum" go.sum; exit 1; fi) || fail=1
done
# Generated files must match what is committed (make generate just ran).
if ! git diff --quiet -- api config charts docs/install.md; then
  echo "verify: generated files are stale (run make generate and commit):"; git diff --stat -- api config charts docs/install.md; fail=1
fi
if [ -n "$(git ls-files --others --exclude-standard -- api config charts)" ]; then
  echo "verify: generated files not committed:"; git ls-files --others --exclude-standard -- api config charts; fail=1
fi
[ "$fail" = 0 ] && echo "verify: ok"
exit "$fail"
