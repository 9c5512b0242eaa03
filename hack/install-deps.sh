#!/usr/bin/env bash
# Installs the Debian packages Mooring's tests and lab use, when missing.
# nftables: the lab's service data plane (kube-proxy nftables mode).
# iproute2, iputils-ping, curl: debugging inside lab namespaces.
# podman, runc, ca-certificates: the image smoke test runs `make image`'s
# archive (runc: crun fails on this host's hybrid cgroups); the image copies
# Debian's CA bundle.
# frr: the BGP lab router and the BGP tests' peers (bgpd, bfdd, zebra, vtysh,
# run per network namespace by internal/frr; the host's own frr service is
# never started or used).
# bird2: the second router the BGP speaker is tested against
# (internal/bgpspeaker/e2e_bird_linux_test.go runs bird per network
# namespace with its own config and socket; the host's bird service is
# never started or used).
set -euo pipefail
pkgs=(nftables iproute2 iputils-ping curl)
# kubectl: the kubectl-mooring plugin's end-to-end test (cmd/mooring) runs
# `kubectl plugin list` and `kubectl mooring status`. Any kubectl will do;
# Debian's kubernetes-client (1.20) only when no other is on $PATH.
command -v kubectl >/dev/null 2>&1 || pkgs+=(kubernetes-client)
pkgs+=(podman runc ca-certificates)
pkgs+=(frr bird2)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: missing Debian packages: ${missing[*]} (run as root, or apt-get install them; README.md says what each is for)" >&2
  exit 0
fi
echo "install-deps: installing the Debian packages ${missing[*]}, because the lab and the tests use them and they are missing (README.md says what each is for); expect 1-3 min (apt-get update, then the download)" >&2
t0=$SECONDS
# Another apt or dpkg (an unattended upgrade, a second clone's make) holds
# its locks: say whom we wait for, and wait (up to 10 min) instead of failing.
holder=$(lslocks -n -u -o PID,PATH 2>/dev/null | awk '$2 ~ /^\/var\/lib\/(dpkg\/lock|apt\/lists\/lock)/ {print $1; exit}')
if [ -n "$holder" ]; then
  echo "install-deps: waiting for apt/dpkg's lock, held by PID $holder ($(ps -o args= -p "$holder" 2>/dev/null | cut -c1-60))" >&2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The tests and the lab run their own FRR daemons per network namespace; the
# service the package just installed would route the machine itself.
if [[ " ${missing[*]} " == *" frr "* ]] && [ -d /run/systemd/system ]; then
  systemctl disable --now frr.service >/dev/null 2>&1 || true
fi
if [[ " ${missing[*]} " == *" bird2 "* ]] && [ -d /run/systemd/system ]; then
  systemctl disable --now bird.service >/dev/null 2>&1 || true
fi
echo "install-deps: installed in $((SECONDS - t0)) s" >&2
