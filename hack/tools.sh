#!/usr/bin/env bash
# Builds the pinned control-plane binaries once into a cache folder outside the
# work tree, keyed by version, and prints that folder. Later runs reuse it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=versions.env
. "$root/hack/versions.env"
cache="${SPAWNER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jhub-spawner-tools}"
k8s_dir="$cache/kubernetes-$KUBERNETES_VERSION"
etcd_dir="$cache/etcd-$ETCD_VERSION"
kwok_dir="$cache/kwok-$KWOK_VERSION"
helm_dir="$cache/helm-$HELM_VERSION"
log() { echo "tools: $*" >&2; }
# step NAME: after a build, how long it took, so that a first run shows it is moving.
began=$SECONDS
took() { log "$1 done in $(( (SECONDS - began) / 60 )) min $(( (SECONDS - began) % 60 )) s"; began=$SECONDS; }
if [[ ! -x "$k8s_dir/kubectl" || ! -x "$etcd_dir/etcd" || ! -x "$kwok_dir/kwok" || ! -x "$helm_dir/helm" ]]; then
  log "first build of the pinned control-plane tools into $cache (15 to 30 min on 2 cores, once; later runs reuse it)"
fi

if [[ ! -x "$k8s_dir/kubectl" ]]; then
  log "building kube-apiserver, kube-scheduler, kube-controller-manager, kubectl $KUBERNETES_VERSION (first time: ~15 min on 2 cores)"
  mkdir -p "$k8s_dir.tmp"
  minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  (cd "$root/tools/k8s" && go build -trimpath -o "$k8s_dir.tmp/" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl)
  rm -rf "$k8s_dir" && mv "$k8s_dir.tmp" "$k8s_dir"
  took "Kubernetes $KUBERNETES_VERSION"
fi
if [[ ! -x "$etcd_dir/etcd" ]]; then
  log "building etcd $ETCD_VERSION (first time: ~2 min)"
  mkdir -p "$etcd_dir.tmp"
  (cd "$root/tools/etcd" && go build -trimpath -ldflags "-s -w" -o "$etcd_dir.tmp/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$etcd_dir" && mv "$etcd_dir.tmp" "$etcd_dir"
  took "etcd $ETCD_VERSION"
fi
if [[ ! -x "$kwok_dir/kwok" ]]; then
  log "installing kwok $KWOK_VERSION (first time: ~4 min)"
  mkdir -p "$kwok_dir.tmp"
  GOBIN="$kwok_dir.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  rm -rf "$kwok_dir" && mv "$kwok_dir.tmp" "$kwok_dir"
  took "kwok $KWOK_VERSION"
fi
if [[ ! -x "$helm_dir/helm" ]]; then
  log "building helm $HELM_VERSION (first time: ~5 min)"
  pinned="$(cd "$root/tools/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v3)"
  if [[ "$pinned" != "$HELM_VERSION" ]]; then
    log "tools/helm/go.mod requires helm $pinned, hack/versions.env says $HELM_VERSION"; exit 1
  fi
  # helm reports the Kubernetes version of the client-go it was built with as its default capabilities.
  kube="$(cd "$root/tools/helm" && go list -m -f '{{.Version}}' k8s.io/client-go)"
  kube_minor="${kube#v0.}"; kube_minor="${kube_minor%%.*}"
  mkdir -p "$helm_dir.tmp"
  (cd "$root/tools/helm" && go build -trimpath -o "$helm_dir.tmp/helm" \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kube_minor -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kube_minor" \
    helm.sh/helm/v3/cmd/helm)
  rm -rf "$helm_dir" && mv "$helm_dir.tmp" "$helm_dir"
  took "helm $HELM_VERSION"
fi
mkdir -p "$cache/bin"
for f in "$k8s_dir"/* "$etcd_dir/etcd" "$kwok_dir/kwok" "$helm_dir/helm"; do ln -sf "$f" "$cache/bin/$(basename "$f")"; done
echo "$cache/bin"
