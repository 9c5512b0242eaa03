#!/usr/bin/env bash
# Fails when generated code or manifests, gofmt or go mod tidy are stale.
# Run after `make generate` (make verify does both).
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
unformatted=$(gofmt -l $(git ls-files --cached --others --exclude-standard '*.go'))
if [ -n "$unformatted" ]; then
  echo "verify: gofmt would change these files (run gofmt -w):"; echo "$unformatted"; fail=1
fi
for m in . hack/tools hack/kubebin hack/cniplugins hack/helm hack/metallb hack/containerd; do
  (cd "$m" && cp go.mod /tmp/verify.go.mod && cp go.sum /tmp/verify.go.sum && go mod tidy >/dev/null 2>&1 \
    && if ! cmp -s go.mod /tmp/verify.go.mod || ! cmp -s go.sum /tmp/verify.go.sum; then \
         echo "verify: go mod tidy changed $m/go.mod or go.sum: commit the tidied files"; \
         cp /tmp/verify.go.mod go.mod; cp /tmp/verify.go.sum go.sum; exit 1; fi) || fail=1
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
