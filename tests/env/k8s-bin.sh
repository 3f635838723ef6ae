#!/usr/bin/env bash
# Builds (once) and caches the real Kubernetes binaries the tests, the demo and CI run against:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes), etcd, kwok, helm and
# the CNCF distribution registry (an OCI registry for the Helm tests), all from the Go module proxy, and
# Cluster API's CRDs (downloaded with the sigs.k8s.io/cluster-api module, for the discovery test),
# krew (the plugin's install test), kstatus and luahealth (tests/env/tools), promtool (checks the alerting rules) and prometheus (the server rollout metric gates ask in tests). Nothing here is ever committed; the cache lives outside the work tree,
# keyed by version, and a warm run only checks the version stamps.
#
# Why a wrapper module: k8s.io/kubernetes and etcd's server module carry replace directives, which
# `go install pkg@version` refuses; a throwaway main module pins the staging modules instead
# (see docs/testenv.md §1-§3).
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.13}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
HELM_VERSION=${HELM_VERSION:-3.21.4}
REGISTRY_VERSION=${REGISTRY_VERSION:-3.0.0}
CAPI_VERSION=${CAPI_VERSION:-1.11.0}
KREW_VERSION=${KREW_VERSION:-0.4.3}
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-0.316.0}
CLI_UTILS_VERSION=${CLI_UTILS_VERSION:-0.37.2}
GOPHER_LUA_VERSION=${GOPHER_LUA_VERSION:-1.1.2}
CACHE=${CLUSTERNET_CACHE:-$HOME/.cache/clusternet}
OUT=${CLUSTERNET_K8S_BIN:-$CACHE/k8s-v$KUBE_VERSION}
BUILD=$CACHE/build

export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
mkdir -p "$OUT" "$BUILD"

log() { printf '[k8s-bin %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

build_kube() {
  local w=$BUILD/kube-v$KUBE_VERSION minor now ld modfile staging gd p
  mkdir -p "$w"; cd "$w"
  [ -f go.mod ] || go mod init localbuild/kube >/dev/null 2>&1
  # k8s's own go.mod exactly as the proxy serves it: derive the staging replace set from it, never by hand
  modfile=$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [ -n "$modfile" ] || { log "cannot fetch k8s.io/kubernetes@v$KUBE_VERSION go.mod"; return 1; }
  staging="v0.${KUBE_VERSION#1.}"
  for p in $(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*#\1#p' "$modfile"); do
    go mod edit -replace="$p=$p@$staging"
  done
  gd=$(sed -n 's/^godebug default=\(go[0-9.]*\)$/\1/p' "$modfile")
  if [ -n "$gd" ]; then go mod edit -godebug=default="$gd"; fi
  go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@v$KUBE_VERSION" \
    "k8s.io/kubernetes/cmd/kube-controller-manager@v$KUBE_VERSION" \
    "k8s.io/kubernetes/cmd/kube-scheduler@v$KUBE_VERSION" "k8s.io/kubernetes/cmd/kubectl@v$KUBE_VERSION"
  minor=$(echo "$KUBE_VERSION" | cut -d. -f2); now=$(date -u +%Y-%m-%dT%H:%M:%SZ); ld="-s -w"
  # without the stamp /version says v0.0.0-master, and kwokctl and helm's kubeVersion gates misbehave
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=$now"
  done
  go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ld" -o "$OUT/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
}

build_etcd() {
  local w=$BUILD/etcd-v$ETCD_VERSION
  mkdir -p "$w"; cd "$w"
  [ -f go.mod ] || go mod init localbuild/etcd >/dev/null 2>&1
  go get -tool "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3
}

# the Cluster API CRDs the Cluster API discovery tests install (Cluster and ClusterResourceSet),
# from the sigs.k8s.io/cluster-api module: only downloaded, nothing is built
fetch_capi_crds() {
  local dir
  dir=$(cd "$BUILD" && go mod download -json "sigs.k8s.io/cluster-api@v$CAPI_VERSION" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { log "cannot download sigs.k8s.io/cluster-api@v$CAPI_VERSION"; return 1; }
  mkdir -p "$OUT/capi-crds"
  cp "$dir/config/crd/bases/cluster.x-k8s.io_clusters.yaml" \
     "$dir/config/crd/bases/addons.cluster.x-k8s.io_clusterresourcesets.yaml" "$OUT/capi-crds/"
  echo "v$CAPI_VERSION" > "$OUT/capi-crds/VERSION"
}

build_kwok() {
  GOBIN=$OUT go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
}

# The image whose pods kwok never makes ready: they stay Pending on their node, as a real pod that
# cannot pull or start does, so a Deployment of it passes its progress deadline (tests: Failed
# health, rollbacks). tests/support NEVER_READY_IMAGE says the same.
NEVER_READY_IMAGE=registry.clusternet.test/never-ready:v1
STAGES_STAMP="# clusternet kwok stages 2: $KWOK_VERSION, $NEVER_READY_IMAGE"

write_kwok_stages() {
  # the stages must match the binary: take them from the same module version
  go mod download "sigs.k8s.io/kwok@v$KWOK_VERSION" >/dev/null
  local stage; stage=$(go env GOMODCACHE)/sigs.k8s.io/kwok@v$KWOK_VERSION/kustomize/stage
  { echo "$STAGES_STAMP"
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      echo '---'
      if [ "$f" = pod/fast/pod-ready.yaml ]; then
        # pod-ready, but not for a pod running the never-ready image
        awk -v img="$NEVER_READY_IMAGE" '{ print }
          /^    matchExpressions:$/ && !done { print "    - key: '"'"'.spec.containers.[].image'"'"'";
            print "      operator: '"'"'NotIn'"'"'"; print "      values:"; print "      - '"'"'" img "'"'"'"; done = 1 }' \
          "$stage/$f"
      else
        cat "$stage/$f"
      fi
    done; } > "$OUT/kwok-stages.yaml.new"
  grep -q "$NEVER_READY_IMAGE" "$OUT/kwok-stages.yaml.new" || { log "the pod-ready stage was not adapted"; return 1; }
  mv "$OUT/kwok-stages.yaml.new" "$OUT/kwok-stages.yaml"
}

build_registry() {
  GOBIN=$OUT go install -trimpath -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=v$REGISTRY_VERSION" \
    "github.com/distribution/distribution/v3/cmd/registry@v$REGISTRY_VERSION"
}

build_krew() {
  GOBIN=$OUT go install -trimpath -ldflags "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=v$KREW_VERSION" \
    "sigs.k8s.io/krew/cmd/krew@v$KREW_VERSION"
}

# promtool checks deploy/prometheus/rules.yaml; prometheus is the server a rollout's metric gates
# ask in tests (Prometheus' Go module v0.X.Y is its release 3.X.Y)
build_prom() {
  GOBIN=$OUT go install -trimpath -ldflags "-s -w" \
    "github.com/prometheus/prometheus/cmd/$1@v$PROMETHEUS_VERSION"
  echo "v$PROMETHEUS_VERSION" > "$OUT/$1.version"
}

# Two small commands the tests judge our objects with, as their consumers do; their sources are
# tests/env/tools/NAME/main.go, and the version each reports carries its source's hash, so an edit
# rebuilds it:
# - kstatus: sigs.k8s.io/cli-utils' status library (what Flux's health checks run);
# - luahealth: Argo CD health scripts (deploy/argocd) run by gopher-lua, the interpreter Argo CD
#   embeds, in Argo CD's sandbox.
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")/tools" && pwd)
tool_stamp() { echo "v$2-$(sha256sum < "$TOOLS/$1/main.go" | cut -c1-12)"; }
KSTATUS_STAMP=$(tool_stamp kstatus "$CLI_UTILS_VERSION")
LUAHEALTH_STAMP=$(tool_stamp luahealth "$GOPHER_LUA_VERSION")
build_tool() { # name stamp modules...
  local name=$1 stamp=$2 w=$BUILD/$1; shift 2
  rm -rf "$w"; mkdir -p "$w"; cd "$w"
  cp "$TOOLS/$name/main.go" .
  go mod init "localbuild/$name" >/dev/null 2>&1
  go get "$@"
  go mod tidy
  go build -trimpath -ldflags "-s -w -X main.version=$stamp" -o "$OUT/$name" .
}
build_kstatus() { build_tool kstatus "$KSTATUS_STAMP" "sigs.k8s.io/cli-utils@v$CLI_UTILS_VERSION"; }
build_luahealth() {
  build_tool luahealth "$LUAHEALTH_STAMP" "github.com/yuin/gopher-lua@v$GOPHER_LUA_VERSION" \
    "sigs.k8s.io/cli-utils@v$CLI_UTILS_VERSION"
}

build_helm() {
  local minor; minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  GOBIN=$OUT go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor" \
    "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
}

# Whether binary $1, run with the remaining arguments, prints $2. The output is captured before
# grep reads it: `cmd | grep -q` under pipefail fails whenever grep exits early and cmd then dies
# of SIGPIPE (kubectl's two-line version output did that now and then).
reports() {
  local bin=$1 want=$2 out; shift 2
  [ -x "$bin" ] || return 1
  out=$("$bin" "$@" 2>/dev/null) || true
  grep -q -- "$want" <<<"$out"
}

step() { # name version-check-cmd... ; builds when the check fails
  local name=$1 want=$2; shift 2
  if reports "$OUT/$name" "$want" "$@"; then
    log "$name ok ($want)"; return 0; fi
  log "building $name ($want)..."; local t0=$SECONDS
  # go prints every package it compiles (GOFLAGS=-v) into a log; a line every 30 s says how far
  local blog=$BUILD/$name.build.log rc=0
  ( GOFLAGS="$GOFLAGS -v" "build_$BUILDER" ) >"$blog" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && log "  $name: $(grep -c . "$blog" || true) packages so far, $((SECONDS - t0))s"
  done
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || { tail -n 20 "$blog" >&2; log "FAILED to build $name (log: $blog)"; return 1; }
  reports "$OUT/$name" "$want" "$@" || { log "$name built but does not report $want"; return 1; }
  log "$name built in $((SECONDS - t0))s"
}

BUILDER=etcd step etcd "etcd Version: $ETCD_VERSION" --version
BUILDER=kube step kube-apiserver "Kubernetes v$KUBE_VERSION" --version
for b in kube-controller-manager kube-scheduler; do BUILDER=kube step "$b" "Kubernetes v$KUBE_VERSION" --version; done
BUILDER=kube step kubectl "v$KUBE_VERSION" version --client
BUILDER=kwok step kwok "$KWOK_VERSION" --version
if [ "$(head -n 1 "$OUT/kwok-stages.yaml" 2>/dev/null)" = "$STAGES_STAMP" ]; then
  log "kwok stages ok"
else
  log "writing the kwok stages..."; write_kwok_stages || { log "FAILED to write the kwok stages"; exit 1; }
fi
BUILDER=helm step helm "v$HELM_VERSION" version --short
BUILDER=registry step registry "v$REGISTRY_VERSION" --version
BUILDER=krew step krew "v$KREW_VERSION" version
BUILDER=kstatus step kstatus "$KSTATUS_STAMP" --version
BUILDER=luahealth step luahealth "$LUAHEALTH_STAMP" --version
for p in promtool prometheus; do
  if [ -x "$OUT/$p" ] && [ "$(cat "$OUT/$p.version" 2>/dev/null)" = "v$PROMETHEUS_VERSION" ]; then
    log "$p ok (v$PROMETHEUS_VERSION)"; continue
  fi
  log "building $p (v$PROMETHEUS_VERSION, a few minutes)..."; t0=$SECONDS
  ( GOFLAGS="$GOFLAGS -v" build_prom "$p" ) >"$BUILD/$p.build.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && log "  $p: $(grep -c . "$BUILD/$p.build.log" || true) packages so far, $((SECONDS - t0))s"
  done
  wait "$pid" || { tail -n 20 "$BUILD/$p.build.log" >&2; log "FAILED to build $p"; exit 1; }
  log "$p built in $((SECONDS - t0))s"
done
if [ "$(cat "$OUT/capi-crds/VERSION" 2>/dev/null)" = "v$CAPI_VERSION" ]; then
  log "Cluster API CRDs ok (v$CAPI_VERSION)"
else
  log "fetching the Cluster API CRDs (v$CAPI_VERSION)..."; fetch_capi_crds || { log "FAILED to fetch the Cluster API CRDs"; exit 1; }
fi
echo "$OUT"
