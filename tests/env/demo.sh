#!/usr/bin/env bash
# demo.sh DIR: the main job on one machine: a parent and 2 child control planes on loopback, with
# clusternet's parent roles running against the parent. Stop it with demo-down.sh DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
DIR=${1:-/tmp/clusternet-demo}
say() { printf '\n==> %s\n' "$*"; }

say "building clusternet (release)"
(cd "$root" && cargo build --release)
BIN=$(bash "$here/k8s-bin.sh" | tail -n1)
export PATH="$BIN:$PATH"

if [ -f "$DIR/ready" ]; then
  say "reusing the environment in $DIR"
else
  say "starting a parent and 2 children in $DIR"
  bash "$here/env-up.sh" "$DIR" 2
fi

say "installing the Clusternet CRDs and bootstrap RBAC into the parent"
"$root/target/release/clusternet" crds | kubectl --kubeconfig "$DIR/parent.kubeconfig" apply --server-side --force-conflicts -f - >/dev/null
kubectl --kubeconfig "$DIR/parent.kubeconfig" wait --for=condition=Established crd --all --timeout=60s >/dev/null
kubectl --kubeconfig "$DIR/parent.kubeconfig" apply -f "$root/deploy/overlays/parent/bootstrap-rbac.yaml" >/dev/null
PARENT_URL=https://127.0.0.1:$(sed -n 's/^PARENT_PORT=//p' "$DIR/env")

start_bg() { # name args...
  local name=$1; shift
  if [ -f "$DIR/pids/$name.pid" ] && kill -0 "$(cat "$DIR/pids/$name.pid")" 2>/dev/null; then return; fi
  nohup "$root/target/release/clusternet" "$@" --health-bind-address=127.0.0.1:0 \
    >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! > "$DIR/pids/$name.pid"
}

HUB_PORT=${HUB_PORT:-9443}
say "starting clusternet --role=hub,scheduler,controller against the parent (hub on 127.0.0.1:$HUB_PORT)"
start_bg clusternet-parent --role=hub,scheduler,controller --kubeconfig="$DIR/parent.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$HUB_PORT"
say "registering the hub with the parent's aggregator (APIServices proxies.clusternet.io, shadow, placement.clusternet.io, dashboard.clusternet.io)"
K8S_BIN="$BIN" bash "$here/hub-register.sh" "$DIR/parent.kubeconfig" "$HUB_PORT"
for svc in v1alpha1.proxies.clusternet.io v1alpha1.shadow v1alpha1.placement.clusternet.io v1alpha1.dashboard.clusternet.io; do
  kubectl --kubeconfig "$DIR/parent.kubeconfig" wait --for=condition=Available "apiservice/$svc" --timeout=60s >/dev/null
done
# the kubectl plugin is this same binary under the name kubectl-clusternet
mkdir -p "$DIR/bin"
ln -sf "$root/target/release/clusternet" "$DIR/bin/kubectl-clusternet"
export PATH="$DIR/bin:$PATH"

for i in 1 2; do
  # child1: the parent pushes (Dual with AppPusher); child2: its agent pulls
  mode=Dual; [ "$i" = 2 ] && mode=Pull
  say "starting clusternet --role=agent in child$i ($mode; registers with the bootstrap token)"
  kubectl --kubeconfig "$DIR/child$i.kubeconfig" create namespace clusternet-system --dry-run=client -o yaml \
    | kubectl --kubeconfig "$DIR/child$i.kubeconfig" apply -f - >/dev/null
  kubectl --kubeconfig "$DIR/child$i.kubeconfig" apply -f "$root/deploy/overlays/child/rbac/rbac.yaml" >/dev/null
  start_bg "clusternet-agent-child$i" --role=agent --kubeconfig="$DIR/child$i.kubeconfig" \
    --cluster-reg-parent-url="$PARENT_URL" --cluster-reg-token="$(cat "$DIR/bootstrap-token")" \
    --cluster-reg-name="child$i" --cluster-labels="demo=true,region=region-$i" --cluster-sync-mode="$mode" \
    --cluster-status-update-frequency=20s --predictor-port=$((8080 + i))
done

say "waiting for both children to be Ready in the parent"
for _ in $(seq 1 120); do
  ready=$(kubectl --kubeconfig "$DIR/parent.kubeconfig" get managedclusters -A \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True || true)
  printf '\r  %s/2 children Ready' "$ready"
  [ "$ready" -ge 2 ] && break
  sleep 1
done
echo
kubectl --kubeconfig "$DIR/parent.kubeconfig" get managedclusters -A
kubectl --kubeconfig "$DIR/parent.kubeconfig" get clusterregistrationrequests

say "deploying the example: kubectl clusternet apply -f deploy/examples/demo-app/app.yaml (shadow API -> Manifests)"
for _ in $(seq 1 30); do
  kubectl --kubeconfig "$DIR/parent.kubeconfig" get --raw /apis/shadow/v1alpha1/namespaces >/dev/null 2>&1 && break
  sleep 1
done
kubectl clusternet --kubeconfig "$DIR/parent.kubeconfig" apply -f "$root/deploy/examples/demo-app/app.yaml"
kubectl --kubeconfig "$DIR/parent.kubeconfig" -n clusternet-reserved get manifests
say "...and a Subscription: kubectl apply -f deploy/examples/demo-app/subscription.yaml"
kubectl --kubeconfig "$DIR/parent.kubeconfig" apply -f "$root/deploy/examples/demo-app/subscription.yaml"

say "waiting for the example to run in both children"
ok=
for _ in $(seq 1 120); do
  line=""
  done_count=0
  for i in 1 2; do
    avail=$(kubectl --kubeconfig "$DIR/child$i.kubeconfig" -n demo get deployment web -o jsonpath='{.status.availableReplicas}' 2>/dev/null || true)
    line="$line child$i: ${avail:-0}/3 available;"
    [ "${avail:-0}" = 3 ] && done_count=$((done_count + 1))
  done
  printf '\r  %s' "$line"
  if [ "$done_count" = 2 ]; then ok=1; break; fi
  sleep 1
done
echo
[ -n "$ok" ] || { echo "the example did not converge; see $DIR/logs" >&2; exit 1; }
say "status flowing back to the parent (Subscription demo-app, status.aggregatedStatuses)"
for _ in $(seq 1 30); do
  summary=$(kubectl --kubeconfig "$DIR/parent.kubeconfig" get subscription demo-app -n default \
    -o jsonpath='{range .status.aggregatedStatuses[*]}{.kind} {.name}: available={.feedStatusSummary.available} replicas={.feedStatusSummary.replicaStatus.availableReplicas}{"\n"}{end}')
  if [ -n "$summary" ] && ! grep -q 'available= ' <<<"$summary"; then break; fi
  sleep 1
done
echo "$summary"
kubectl --kubeconfig "$DIR/parent.kubeconfig" get bases,descriptions -A

CHART_PORT=${CHART_PORT:-8879}
say "a Helm chart too: tests/charts/hello from a chart repository on 127.0.0.1:$CHART_PORT; kubectl apply -f deploy/examples/demo-app/chart.yaml"
export HELM_CACHE_HOME="$DIR/helm/cache" HELM_CONFIG_HOME="$DIR/helm/config" HELM_DATA_HOME="$DIR/helm/data"
mkdir -p "$DIR/charts"
helm package "$root/tests/charts/hello" -d "$DIR/charts" >/dev/null
helm repo index "$DIR/charts" --url "http://127.0.0.1:$CHART_PORT"
if ! { [ -f "$DIR/pids/chart-repo.pid" ] && kill -0 "$(cat "$DIR/pids/chart-repo.pid")" 2>/dev/null; }; then
  command -v python3 >/dev/null || { echo "the demo's chart repository is served with python3 -m http.server; install python3" >&2; exit 1; }
  nohup python3 -m http.server "$CHART_PORT" --bind 127.0.0.1 --directory "$DIR/charts" \
    >"$DIR/logs/chart-repo.log" 2>&1 </dev/null &
  echo $! > "$DIR/pids/chart-repo.pid"
fi
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$CHART_PORT") 2>/dev/null && break; sleep 0.2; done
sed "s#http://127.0.0.1:8879#http://127.0.0.1:$CHART_PORT#" "$root/deploy/examples/demo-app/chart.yaml" \
  | kubectl --kubeconfig "$DIR/parent.kubeconfig" apply -f -
ok=
for _ in $(seq 1 120); do
  line=""
  done_count=0
  for i in 1 2; do
    st=$(helm --kubeconfig "$DIR/child$i.kubeconfig" status hello -n demo-chart -o json 2>/dev/null \
      | sed -n 's/.*"status":"\([a-z-]*\)".*/\1/p' || true)
    line="$line child$i: ${st:-not yet};"
    [ "$st" = deployed ] && done_count=$((done_count + 1))
  done
  printf '\r  release hello: %s' "$line"
  if [ "$done_count" = 2 ]; then ok=1; break; fi
  sleep 1
done
echo
[ -n "$ok" ] || { echo "the chart was not released; see $DIR/logs and kubectl get helmreleases -A" >&2; exit 1; }
for i in 1 2; do
  echo "child$i: helm list -n demo-chart"
  helm --kubeconfig "$DIR/child$i.kubeconfig" list -n demo-chart
done
kubectl --kubeconfig "$DIR/parent.kubeconfig" get helmcharts,helmreleases -A

say "reaching child2 through its agent's tunnel: kubectl clusternet --cluster-id=... get pods -n demo"
CHILD2_ID=$(kubectl --kubeconfig "$DIR/parent.kubeconfig" get managedclusters -A -l clusters.clusternet.io/cluster-name=child2 -o jsonpath='{.items[0].spec.clusterId}')
kubectl clusternet --kubeconfig "$DIR/parent.kubeconfig" --cluster-id="$CHILD2_ID" \
  --child-kubeconfig="$DIR/child2.kubeconfig" get pods -n demo

cat <<TXT

The demo is running:
  children:  kubectl --kubeconfig $DIR/parent.kubeconfig get managedclusters -A -o wide
  a child:   kubectl --kubeconfig $DIR/child1.kubeconfig get nodes
  logs:      $DIR/logs/ (clusternet-parent.log, clusternet-agent-child1.log, kube-apiserver, kwok, ...)
  kubectl:   $BIN/kubectl matches the servers (v1.36)
  plugin:    export PATH=$DIR/bin:$BIN:\$PATH  (kubectl clusternet = $DIR/bin/kubectl-clusternet)
  dashboard: kubectl clusternet --kubeconfig $DIR/parent.kubeconfig dashboard
             then open http://127.0.0.1:50750/ (--no-browser only prints it; --port N for another port)
Try: stop an agent (kill \$(cat $DIR/pids/clusternet-agent-child1.pid)) and watch child1 turn
Ready=Unknown and get tainted after 3 missed heartbeats (60s), then run \`just demo\` again.
Stop everything with: just demo-down $DIR

Look around:
  kubectl --kubeconfig $DIR/child1.kubeconfig -n demo get deploy,pods,svc
  kubectl --kubeconfig $DIR/parent.kubeconfig get subscription demo-app -o yaml     # bindingClusters, aggregatedStatuses
  kubectl clusternet --kubeconfig $DIR/parent.kubeconfig get deploy -n demo           # the shadow API
  kubectl clusternet --kubeconfig $DIR/parent.kubeconfig scale deploy/web -n demo --replicas=2   # children follow
  kubectl clusternet --kubeconfig $DIR/parent.kubeconfig --cluster-id=$CHILD2_ID --child-kubeconfig=$DIR/child2.kubeconfig get nodes
  kubectl --kubeconfig $DIR/parent.kubeconfig delete subscription demo-app          # removed from every child
  helm --kubeconfig $DIR/child2.kubeconfig history hello -n demo-chart               # the chart's release
  kubectl --kubeconfig $DIR/parent.kubeconfig delete subscription demo-chart        # uninstalled everywhere
TXT
