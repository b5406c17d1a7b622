#!/usr/bin/env bash
# Installs the Debian packages the demo and the end-to-end tests need, if missing:
# the hub, its proxy and PyJWT for the demo; chromium for the browser tests; the
# PostgreSQL server for the session history's tests (hack/postgres.sh starts it).
set -o errexit -o nounset -o pipefail
pkgs=(jupyterhub node-configurable-http-proxy python3-jwt chromium postgresql)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]} with apt (first time: ~2 min)" >&2
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
