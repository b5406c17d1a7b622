#!/usr/bin/env bash
# The demo: a local Kubernetes control plane, spawnerd, and a real JupyterHub
# with configurable-http-proxy, all on 127.0.0.1. One Ctrl-C stops everything.
set -o errexit -o nounset -o pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
: "${DEVCLUSTER_BIN_DIR:?run through make demo}"
state="${DEMO_DIR:-$(mktemp -d -t spawner-demo-XXXX)}"
mkdir -p "$state/hub"
hub_port="${HUB_PORT:-8081}" proxy_port="${PROXY_PORT:-8000}" proxy_api_port="${PROXY_API_PORT:-8001}" spawnerd_port="${SPAWNERD_PORT:-8090}"

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo "demo: stopping" >&2
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  echo "demo: stopped; logs are in $state" >&2
}
trap cleanup INT TERM EXIT

secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
export SPAWNERD_SHARED_SECRET="$(secret)" SPAWNERD_HUB_TOKEN="$(secret)" CONFIGPROXY_AUTH_TOKEN="$(secret)"
export NODE_PATH=/usr/share/nodejs

echo "demo: starting the local cluster (logs: $state/cluster/logs)" >&2
"$root/bin/devcluster" up --dir "$state/cluster" --bin-dir "$DEVCLUSTER_BIN_DIR" --nodes "$root/deploy/demo/nodes.yaml" \
  > "$state/devcluster.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do
  grep -q '^KUBECONFIG=' "$state/devcluster.log" && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$state/devcluster.log" >&2; exit 1; }
  sleep 0.2
done
export KUBECONFIG="$state/cluster/admin.kubeconfig"
# The reservation engine keeps bookings and leases as custom resources.
"$DEVCLUSTER_BIN_DIR/kubectl" apply -f "$root/deploy/helm/spawnerd/crds/gpureservations.yaml" >&2

echo "demo: starting spawnerd on 127.0.0.1:$spawnerd_port" >&2
"$root/bin/spawnerd" serve --config "$root/deploy/demo/spawner.yaml" --listen "127.0.0.1:$spawnerd_port" \
  --hub-api-url "http://127.0.0.1:$hub_port/hub/api" --proxy-api-url "http://127.0.0.1:$proxy_api_port" \
  --namespace default --leader-elect=false \
  > "$state/spawnerd.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do
  curl -fsS "http://127.0.0.1:$spawnerd_port/readyz" >/dev/null 2>&1 && break
  kill -0 "${pids[1]}" 2>/dev/null || { cat "$state/spawnerd.log" >&2; exit 1; }
  sleep 0.2
done

echo "demo: starting JupyterHub and configurable-http-proxy" >&2
(cd "$state/hub" && HUB_PORT=$hub_port PROXY_PORT=$proxy_port PROXY_API_PORT=$proxy_api_port \
  SPAWNERD_URL="http://127.0.0.1:$spawnerd_port" HUB_DATA_DIR="$state/hub" HUB_ADMIN_USER=admin \
  exec /usr/bin/python3 -m jupyterhub -f "$root/deploy/demo/jupyterhub_config.py") > "$state/jupyterhub.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do
  curl -fsS "http://127.0.0.1:$proxy_port/hub/api" >/dev/null 2>&1 && break
  kill -0 "${pids[2]}" 2>/dev/null || { tail -40 "$state/jupyterhub.log" >&2; exit 1; }
  sleep 0.2
done
cat <<MSG

  JupyterHub is ready:  http://127.0.0.1:$proxy_port/
  Log in with any user name and any password ("admin" is an admin), pick the
  CPU or GPU profile, and start your server.

  kubectl: export KUBECONFIG=$KUBECONFIG  (kubectl is in $DEVCLUSTER_BIN_DIR)
  Servers: curl with a token is in the README; logs are in $state
  Ctrl-C stops everything.

MSG
wait -n "${pids[@]}" || true
