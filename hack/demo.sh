#!/usr/bin/env bash
# The demo: a local Kubernetes control plane, spawnerd, and a real JupyterHub
# with configurable-http-proxy, all on 127.0.0.1. One Ctrl-C stops everything,
# in order: the hub's servers (through the hub), the hub, spawnerd, the cluster.
#
# Environment (all optional): DEMO_DIR (state folder, default a new temporary
# one), HUB_PORT (8081), PROXY_PORT (8000), PROXY_API_PORT (8001), SPAWNERD_PORT (8090).
set -o errexit -o nounset -o pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
: "${DEVCLUSTER_BIN_DIR:?run through make demo}"
state="${DEMO_DIR:-$(mktemp -d -t spawner-demo-XXXX)}"
mkdir -p "$state/hub"
state="$(cd "$state" && pwd)"
hub_port="${HUB_PORT:-8081}" proxy_port="${PROXY_PORT:-8000}" proxy_api_port="${PROXY_API_PORT:-8001}" spawnerd_port="${SPAWNERD_PORT:-8090}"
hub_api="http://127.0.0.1:$hub_port/hub/api"

# Each service runs in a session of its own (setsid), so that Ctrl-C reaches
# only this script, which then stops them one after the other.
cluster_pid="" spawnerd_pid="" hub_pid=""
stop_process() { # name pid seconds: TERM, then KILL after the grace time
  local name="$1" pid="$2" grace="$3"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
  echo "demo: stopping $name" >&2
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $((grace * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "demo: $name did not stop in ${grace}s; killing it" >&2
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  # Whatever it started in its session and left behind (the hub's proxy, say).
  kill -KILL -- "-$pid" 2>/dev/null || true
}
cleanup() {
  # A second Ctrl-C must not cut the ordered stop short; it is bounded anyway.
  trap '' INT TERM
  trap - EXIT
  if [[ -n "$hub_pid" ]] && kill -0 "$hub_pid" 2>/dev/null; then
    echo "demo: stopping the hub's servers through the hub" >&2
    /usr/bin/python3 "$root/hack/hub-stop-servers.py" "$hub_api" "$state/hub-admin-token" 8 || true
  fi
  stop_process JupyterHub "$hub_pid" 5
  stop_process spawnerd "$spawnerd_pid" 5
  stop_process "the local cluster" "$cluster_pid" 15
  echo "demo: stopped; logs are in $state" >&2
}
trap cleanup INT TERM EXIT

# The secrets live in files (mode 0600) in the state folder, so that an admin
# of the demo can use them too.
secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
umask 077
# hub-token is spawnerd's (it may only stop servers); hub-admin-token is the
# demo's own, for listing and stopping every server on Ctrl-C.
for f in shared-secret hub-token hub-admin-token proxy-token; do secret > "$state/$f"; done
umask 022
export SPAWNERD_HUB_TOKEN="$(cat "$state/hub-token")" CONFIGPROXY_AUTH_TOKEN="$(cat "$state/proxy-token")"
export DEMO_HUB_ADMIN_TOKEN="$(cat "$state/hub-admin-token")"
export NODE_PATH=/usr/share/nodejs

echo "demo: starting the local cluster (logs: $state/cluster/logs)" >&2
setsid "$root/bin/devcluster" up --dir "$state/cluster" --bin-dir "$DEVCLUSTER_BIN_DIR" --nodes "$root/deploy/demo/nodes.yaml" \
  > "$state/devcluster.log" 2>&1 &
cluster_pid=$!
for _ in $(seq 600); do
  grep -q '^KUBECONFIG=' "$state/devcluster.log" && break
  kill -0 "$cluster_pid" 2>/dev/null || { cat "$state/devcluster.log" >&2; exit 1; }
  sleep 0.2
done
grep -q '^KUBECONFIG=' "$state/devcluster.log" || { echo "demo: the cluster did not come up in 120 s" >&2; exit 1; }
export KUBECONFIG="$state/cluster/admin.kubeconfig"
# The reservation engine keeps bookings and leases as custom resources.
"$DEVCLUSTER_BIN_DIR/kubectl" apply -f "$root/deploy/helm/spawnerd/crds/gpureservations.yaml" >&2

echo "demo: starting spawnerd on 127.0.0.1:$spawnerd_port" >&2
setsid "$root/bin/spawnerd" serve --config "$root/deploy/demo/spawner.yaml" --listen "127.0.0.1:$spawnerd_port" \
  --shared-secret-file "$state/shared-secret" \
  --hub-api-url "$hub_api" --proxy-api-url "http://127.0.0.1:$proxy_api_port" \
  --namespace default --leader-elect=false --history-dsn "sqlite://$state/history.db" \
  > "$state/spawnerd.log" 2>&1 &
spawnerd_pid=$!
for _ in $(seq 300); do
  curl -fsS "http://127.0.0.1:$spawnerd_port/readyz" >/dev/null 2>&1 && break
  kill -0 "$spawnerd_pid" 2>/dev/null || { cat "$state/spawnerd.log" >&2; exit 1; }
  sleep 0.2
done

echo "demo: starting JupyterHub and configurable-http-proxy" >&2
(cd "$state/hub" && HUB_PORT=$hub_port PROXY_PORT=$proxy_port PROXY_API_PORT=$proxy_api_port \
  SPAWNERD_URL="http://127.0.0.1:$spawnerd_port" SPAWNERD_SHARED_SECRET_FILE="$state/shared-secret" \
  HUB_DATA_DIR="$state/hub" HUB_ADMIN_USER=admin \
  exec setsid /usr/bin/python3 -m jupyterhub -f "$root/deploy/demo/jupyterhub_config.py") > "$state/jupyterhub.log" 2>&1 &
hub_pid=$!
for _ in $(seq 300); do
  curl -fsS "http://127.0.0.1:$proxy_port/hub/api" >/dev/null 2>&1 && break
  kill -0 "$hub_pid" 2>/dev/null || { tail -40 "$state/jupyterhub.log" >&2; exit 1; }
  sleep 0.2
done

# A ready-made admin command line: spawnerd's admin CLI with this demo's URL and secret.
cat > "$state/spawnerd-admin" <<SH
#!/bin/sh
# spawnerd's admin CLI against this demo, e.g.: $state/spawnerd-admin servers
exec "$root/bin/spawnerd" admin --url "http://127.0.0.1:$spawnerd_port" --shared-secret-file "$state/shared-secret" "\$@"
SH
chmod 0700 "$state/spawnerd-admin"
cat <<MSG

  JupyterHub is ready:  http://127.0.0.1:$proxy_port/
  Log in with any user name and any password ("admin" is an admin), pick the
  CPU or GPU profile, and start your server.

  Console: http://127.0.0.1:$proxy_port/services/spawnerd/ (log in as admin; every
           other user gets a status page there), also in the hub's Services menu
  Admin:   $state/spawnerd-admin servers
           $state/spawnerd-admin why alice
           $state/spawnerd-admin classes
           (the shared secret is in $state/shared-secret, mode 0600)
  kubectl: KUBECONFIG=$KUBECONFIG $DEVCLUSTER_BIN_DIR/kubectl get pods -A
  Logs:    $state
  Ctrl-C stops everything.

MSG
echo "demo: ready" >&2
wait -n "$cluster_pid" "$spawnerd_pid" "$hub_pid" || true
