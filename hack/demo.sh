#!/usr/bin/env bash
# What `make demo` runs: the one-machine lab (docs/lab.md). It builds what
# is missing — bin/mooring, the control-plane binaries (cached; ~8 min cold),
# the nft tool — then runs `bin/mooring lab up` in the foreground. Ctrl-C
# removes everything. Extra arguments go to `lab up` (e.g. --nodes 5).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "$(id -u)" != 0 ]; then
  echo "demo: the lab creates network namespaces and runs kube-proxy: run it as root" >&2
  exit 1
fi
command -v nft >/dev/null || hack/install-deps.sh
[ -x bin/mooring ] || make --no-print-directory build
kubebin=${MOORING_KUBEBIN:-$(hack/kubebin/build.sh | tail -n 1)}
exec bin/mooring lab up --kubebin "$kubebin" --crds "$root/config/crd" "$@"
