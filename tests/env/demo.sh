#!/usr/bin/env bash
# demo.sh DIR: the main job on one machine: a parent and 2 child control planes on loopback, with
# clusternet's parent roles running against the parent. Stop it with demo-down.sh DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
DIR=${1:-/tmp/clusternet-demo}
say() { printf '\n==> %s\n' "$*"; }

say "building clusternet (release)"
(cd "$root" && cargo build --release --quiet)
BIN=$(bash "$here/k8s-bin.sh" | tail -n1)
export PATH="$BIN:$PATH"

if [ -f "$DIR/ready" ]; then
  say "reusing the environment in $DIR"
else
  say "starting a parent and 2 children in $DIR"
  bash "$here/env-up.sh" "$DIR" 2
fi

say "installing the Clusternet CRDs into the parent"
"$root/target/release/clusternet" crds | kubectl --kubeconfig "$DIR/parent.kubeconfig" apply --server-side -f - >/dev/null
kubectl --kubeconfig "$DIR/parent.kubeconfig" create namespace clusternet-system --dry-run=client -o yaml \
  | kubectl --kubeconfig "$DIR/parent.kubeconfig" apply -f - >/dev/null

say "starting clusternet --role=hub,scheduler,controller against the parent"
nohup "$root/target/release/clusternet" --role=hub,scheduler,controller \
  --kubeconfig="$DIR/parent.kubeconfig" --health-bind-address=127.0.0.1:0 \
  >"$DIR/logs/clusternet-parent.log" 2>&1 </dev/null &
echo $! > "$DIR/pids/clusternet-parent.pid"
for _ in $(seq 1 60); do
  grep -q "acquired leadership" "$DIR/logs/clusternet-parent.log" 2>/dev/null && break; sleep 0.5
done
kubectl --kubeconfig "$DIR/parent.kubeconfig" -n clusternet-system get leases

cat <<TXT

The demo is running:
  parent:   kubectl --kubeconfig $DIR/parent.kubeconfig get crds | grep clusternet
  children: kubectl --kubeconfig $DIR/child1.kubeconfig get nodes   (child2 likewise)
  logs:     $DIR/logs/ (clusternet-parent.log, kube-apiserver, kwok, ...)
  kubectl:  $BIN/kubectl matches the servers (v1.36)
Stop it with: just demo-down $DIR

Not there yet: agents registering the children and an example application deployed to them
through a Subscription (see the open issues); this demo grows with them.
TXT
