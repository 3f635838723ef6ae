#!/usr/bin/env bash
# Registers a hub serving on 127.0.0.1:PORT with a test/demo parent: an ExternalName Service
# clusternet-system/clusternet-hub pointing at the loopback address (the parent's aggregator dials
# it from the same machine) upstream's two APIServices and placement.clusternet.io's and dashboard.clusternet.io's. `--delete` removes the APIServices
# again: an unavailable aggregated API stalls namespace deletion in the parent.
# usage: hub-register.sh KUBECONFIG PORT | hub-register.sh KUBECONFIG --delete
set -euo pipefail
kc=$1 port=$2
bin=${K8S_BIN:-$HOME/.cache/clusternet/k8s-v1.36.3}
kubectl() { "$bin/kubectl" --kubeconfig "$kc" "$@"; }
if [[ $port == --delete ]]; then
  kubectl delete apiservice v1alpha1.proxies.clusternet.io v1alpha1.shadow v1alpha1.placement.clusternet.io v1alpha1.dashboard.clusternet.io --ignore-not-found >/dev/null
  exit 0
fi
# apiservice GROUP GROUP_PRIORITY_MINIMUM VERSION_PRIORITY [NAME]: one v1alpha1 APIService to the hub
apiservice() {
  cat <<ONE
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: ${4:-v1alpha1.$1}}
spec:
  group: $1
  version: v1alpha1
  groupPriorityMinimum: $2
  versionPriority: $3
  insecureSkipTLSVerify: true
  service: {namespace: clusternet-system, name: clusternet-hub, port: $port}
ONE
}
kubectl create namespace clusternet-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: clusternet-hub, namespace: clusternet-system}
spec:
  type: ExternalName
  externalName: 127.0.0.1
  ports: [{name: https, port: $port, protocol: TCP}]
$(apiservice proxies.clusternet.io 1000 100)
$(apiservice shadow 1 1 v1alpha1.shadow)
$(apiservice placement.clusternet.io 1000 100)
$(apiservice dashboard.clusternet.io 1000 100)
YAML
