#!/usr/bin/env bash
# env-up.sh DIR N [--owner-pid PID]
# Starts one parent and N child Kubernetes control planes on loopback: one shared etcd (a distinct
# --etcd-prefix per cluster) and, per cluster, kube-apiserver, kube-controller-manager,
# kube-scheduler and kwok with fake nodes, so workloads in every cluster become Available.
# Writes DIR/parent.kubeconfig, DIR/child<i>.kubeconfig (cluster-admin), DIR/bootstrap-token and
# DIR/env (ports, names); keeps pids in DIR/pids and logs in DIR/logs. Returns once every API server
# answers /readyz and every fake node is Ready. With --owner-pid, a watchdog runs env-down.sh as soon
# as that process is gone, so a crashed test run leaves nothing behind.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 2 ] || { echo "usage: env-up.sh DIR N [--owner-pid PID]" >&2; exit 2; }
DIR=$1; N=$2; OWNER=
shift 2
while [ $# -gt 0 ]; do case $1 in
  --owner-pid) OWNER=$2; shift 2;;
  *) echo "env-up.sh: unknown argument $1" >&2; exit 2;;
esac; done
[[ $N =~ ^[0-9]+$ ]] || { echo "env-up.sh: N must be a number of child clusters, got '$N'" >&2; exit 2; }
NODES=${CLUSTERNET_ENV_NODES:-2}             # fake nodes per cluster
NODE_CPU=${CLUSTERNET_ENV_NODE_CPU:-8}
NODE_MEM=${CLUSTERNET_ENV_NODE_MEMORY:-32Gi}
NODE_PODS=${CLUSTERNET_ENV_NODE_PODS:-110}
# Each kube-apiserver's Go heap limit (GOMEMLIMIT: a size, or `off`) and whether it serves
# /debug/pprof (the benches lift the one and may turn on the other)
APISERVER_MEMLIMIT=${CLUSTERNET_ENV_APISERVER_MEMLIMIT:-600MiB}
APISERVER_PROFILING=${CLUSTERNET_ENV_APISERVER_PROFILING:-false}
BOOTSTRAP_GROUP=system:bootstrappers:clusternet:register-cluster-token
t0=$SECONDS

BIN=$(bash "$here/k8s-bin.sh" | tail -n1)
export PATH="$BIN:$PATH"
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
if [ -f "$DIR/pids/etcd.pid" ] && kill -0 "$(cat "$DIR/pids/etcd.pid")" 2>/dev/null; then
  echo "env-up.sh: an environment is already running in $DIR (run env-down.sh $DIR first)" >&2; exit 1
fi
rm -rf "$DIR"/{pids,logs,pki,etcd-data,ready} && mkdir -p "$DIR"/{pids,logs,pki}
log() { printf '[env-up %s +%ss] %s\n' "$(date +%H:%M:%S)" "$((SECONDS - t0))" "$*" >&2; }
fail() { log "FAILED: $*"; log "logs are in $DIR/logs"; bash "$here/env-down.sh" "$DIR" >/dev/null 2>&1 || true; exit 1; }

start() { # name cmd... : runs in the background, records pid and log
  local name=$1; shift
  nohup "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! > "$DIR/pids/$name.pid"
}

# Free loopback ports, all taken at once so they do not collide with each other.
CLUSTERS=(parent); for i in $(seq 1 "$N"); do CLUSTERS+=("child$i"); done
read -r -a PORTS <<<"$(python3 - "$(( ${#CLUSTERS[@]} + 2 ))" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
)"
ETCD_PORT=${PORTS[0]}; ETCD_PEER=${PORTS[1]}
# a per-environment prefix keeps two environments apart even if they ever shared an etcd
PREFIX=/clusternet-env-$(basename "$DIR")-$$
{ echo "ETCD=http://127.0.0.1:$ETCD_PORT"; echo "CLUSTERS=\"${CLUSTERS[*]}\""; } > "$DIR/env"

# --- PKI: one CA, serving cert, client certs and front-proxy CA per cluster (ECDSA: fast to make) ---
pki() { # dir
  local d=$1; mkdir -p "$d"
  ca() { openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -sha256 -days 3650 \
          -keyout "$d/$1.key" -out "$d/$1.crt" -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" \
          -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null; }
  leaf() { local name=$1 subj=$2 ca=$3 eku=$4 san=${5:-}
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -sha256 \
      -keyout "$d/$name.key" -out "$d/$name.csr" -subj "$subj" 2>/dev/null
    { echo "basicConstraints=critical,CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
      echo "extendedKeyUsage=$eku"; if [ -n "$san" ]; then echo "subjectAltName=$san"; fi; } > "$d/$name.ext"
    openssl x509 -req -in "$d/$name.csr" -CA "$d/$ca.crt" -CAkey "$d/$ca.key" -CAcreateserial -sha256 \
      -days 3650 -out "$d/$name.crt" -extfile "$d/$name.ext" 2>/dev/null
    rm -f "$d/$name.csr" "$d/$name.ext"; }
  ca ca kube-test-ca
  ca front-proxy-ca kube-test-front-proxy-ca
  # 10.231.0.1: the host end of the network namespace a test may put a child agent in (tests/support Netns)
  leaf apiserver "/CN=kube-apiserver" ca serverAuth \
    "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.0.0.1,IP:10.231.0.1"
  leaf admin "/O=system:masters/CN=kubernetes-admin" ca clientAuth
  leaf kcm "/CN=system:kube-controller-manager" ca clientAuth
  leaf scheduler "/CN=system:kube-scheduler" ca clientAuth
  leaf front-proxy-client "/CN=front-proxy-client" front-proxy-ca clientAuth
  openssl ecparam -name prime256v1 -genkey -noout -out "$d/sa.key" 2>/dev/null
  openssl ec -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
}
kubeconfig() { # out server ca name (crt key | token TOKEN)
  kubectl config set-cluster "$4" --server="$2" --certificate-authority="$3" --embed-certs=true --kubeconfig="$1" >/dev/null
  if [ "$5" = token ]; then
    kubectl config set-credentials "$4-admin" --token="$6" --kubeconfig="$1" >/dev/null
  else
    kubectl config set-credentials "$4-admin" --client-certificate="$5" --client-key="$6" --embed-certs=true --kubeconfig="$1" >/dev/null
  fi
  kubectl config set-context "$4" --cluster="$4" --user="$4-admin" --kubeconfig="$1" >/dev/null
  kubectl config use-context "$4" --kubeconfig="$1" >/dev/null
}

log "generating PKI for ${CLUSTERS[*]}"
for c in "${CLUSTERS[@]}"; do pki "$DIR/pki/$c" & done; wait

log "starting etcd on 127.0.0.1:$ETCD_PORT"
start etcd etcd --name=clusternet-env --data-dir="$DIR/etcd-data" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster="clusternet-env=http://127.0.0.1:$ETCD_PEER" --unsafe-no-fsync=true --log-level=warn \
  --quota-backend-bytes=4294967296
for _ in $(seq 1 100); do curl -sf --max-time 1 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null && break; sleep 0.2; done
curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null || fail "etcd did not become healthy"

i=2
for c in "${CLUSTERS[@]}"; do
  port=${PORTS[$i]}; i=$((i + 1)); P=$DIR/pki/$c
  echo "${c^^}_PORT=$port" >> "$DIR/env"
  # The admin kubeconfig authenticates with a bearer token rather than a client certificate, so that
  # `kubectl --kubeconfig X --token T` really acts as T (a client certificate would win over it).
  admin_token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
  echo "$admin_token,kubernetes-admin,uid-kubernetes-admin,\"system:masters\"" > "$P/tokens.csv"
  kubeconfig "$DIR/$c.kubeconfig" "https://127.0.0.1:$port" "$P/ca.crt" "$c" token "$admin_token"
  kubeconfig "$P/kcm.kubeconfig" "https://127.0.0.1:$port" "$P/ca.crt" "$c" "$P/kcm.crt" "$P/kcm.key"
  kubeconfig "$P/scheduler.kubeconfig" "https://127.0.0.1:$port" "$P/ca.crt" "$c" "$P/scheduler.crt" "$P/scheduler.key"
  log "starting kube-apiserver for $c on 127.0.0.1:$port"
  # --endpoint-reconciler-type=none: a loopback advertise address is refused by the lease reconciler
  GOMEMLIMIT=$APISERVER_MEMLIMIT start "$c-kube-apiserver" kube-apiserver \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" --etcd-prefix="$PREFIX/$c" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
    --service-account-issuer="https://127.0.0.1:$port" \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC \
    --enable-bootstrap-token-auth=true --token-auth-file="$P/tokens.csv" \
    --requestheader-client-ca-file="$P/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-uid-headers=X-Remote-Uid --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$P/front-proxy-client.crt" --proxy-client-key-file="$P/front-proxy-client.key" \
    --endpoint-reconciler-type=none --allow-privileged=true --enable-priority-and-fairness=false \
    --profiling="$APISERVER_PROFILING" --v=1
done

for c in "${CLUSTERS[@]}"; do
  ok=
  for _ in $(seq 1 360); do
    if kubectl --kubeconfig="$DIR/$c.kubeconfig" get --raw /readyz >/dev/null 2>&1; then ok=1; break; fi
    kill -0 "$(cat "$DIR/pids/$c-kube-apiserver.pid")" 2>/dev/null || fail "kube-apiserver for $c exited: $(tail -n 5 "$DIR/logs/$c-kube-apiserver.log")"
    sleep 0.5
  done
  [ -n "$ok" ] || fail "kube-apiserver for $c not ready after 180s"
  log "$c kube-apiserver ready"
done

for c in "${CLUSTERS[@]}"; do
  P=$DIR/pki/$c
  start "$c-kube-controller-manager" kube-controller-manager --kubeconfig="$P/kcm.kubeconfig" --secure-port=0 \
    --leader-elect=false --use-service-account-credentials=true --service-account-private-key-file="$P/sa.key" \
    --root-ca-file="$P/ca.crt" --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
    --controllers='*,bootstrapsigner,tokencleaner' --cluster-name="$c" --v=1
  cat > "$P/scheduler.yaml" <<YAML
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $P/scheduler.kubeconfig}
leaderElection: {leaderElect: false}
YAML
  start "$c-kube-scheduler" kube-scheduler --config="$P/scheduler.yaml" --secure-port=0 --v=1
  # a throwaway HOME: kwok always loads ~/.kwok/kwok.yaml first when it exists
  mkdir -p "$DIR/kwok-home/$c"
  HOME="$DIR/kwok-home/$c" start "$c-kwok" kwok --kubeconfig="$DIR/$c.kubeconfig" --config="$BIN/kwok-stages.yaml" \
    --manage-all-nodes=true --cidr=10.244.0.0/16 --node-lease-duration-seconds=40
  for n in $(seq 0 $((NODES - 1))); do cat <<YAML
---
apiVersion: v1
kind: Node
metadata:
  name: $c-node-$n
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {kubernetes.io/hostname: $c-node-$n, kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok}
status:
  capacity: {cpu: "$NODE_CPU", memory: $NODE_MEM, pods: "$NODE_PODS"}
  allocatable: {cpu: "$NODE_CPU", memory: $NODE_MEM, pods: "$NODE_PODS"}
YAML
  done > "$DIR/pki/$c/nodes.yaml"
  kubectl --kubeconfig="$DIR/$c.kubeconfig" apply -f "$DIR/pki/$c/nodes.yaml" >/dev/null || fail "cannot create fake nodes in $c"
done

# --- bootstrap token + the RBAC Clusternet agents register with (docs/spec/registration.md §1) ---
rand() { python3 -c 'import secrets, string, sys; a = sys.argv[2]; print("".join(secrets.choice(a) for _ in range(int(sys.argv[1]))))' "$1" "$2"; }
TOKEN_ID=$(rand 6 abcdefghijklmnopqrstuvwxyz0123456789)
TOKEN_SECRET=$(rand 16 abcdefghijklmnopqrstuvwxyz0123456789)
kubectl --kubeconfig="$DIR/parent.kubeconfig" apply -f - >/dev/null <<YAML || fail "cannot create the bootstrap token"
apiVersion: v1
kind: Secret
metadata: {name: bootstrap-token-$TOKEN_ID, namespace: kube-system}
type: bootstrap.kubernetes.io/token
stringData:
  token-id: "$TOKEN_ID"
  token-secret: "$TOKEN_SECRET"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: "$BOOTSTRAP_GROUP"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "clusternet:system:bootstrapping"}
rules:
- apiGroups: [clusters.clusternet.io]
  resources: [clusterregistrationrequests]
  verbs: [get, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "clusternet:system:bootstrapping"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "clusternet:system:bootstrapping"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "$BOOTSTRAP_GROUP"}
YAML
[[ "$TOKEN_ID.$TOKEN_SECRET" =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]] || fail "generated a malformed bootstrap token"
echo "$TOKEN_ID.$TOKEN_SECRET" > "$DIR/bootstrap-token"

for c in "${CLUSTERS[@]}"; do
  kubectl --kubeconfig="$DIR/$c.kubeconfig" wait --for=condition=Ready node --all --timeout=120s >/dev/null \
    || fail "fake nodes in $c did not become Ready (see $DIR/logs/$c-kwok.log)"
done
# the service-account controller must have run before workloads can be created in new namespaces
for c in "${CLUSTERS[@]}"; do
  for _ in $(seq 1 120); do
    kubectl --kubeconfig="$DIR/$c.kubeconfig" -n default get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5
  done
done

if [ -n "$OWNER" ]; then
  # watchdog: tear everything down once the owner (a test binary) is gone, however it ended
  nohup bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec bash "$2" "$3"' _ "$OWNER" "$here/env-down.sh" "$DIR" \
    >"$DIR/logs/watchdog.log" 2>&1 </dev/null &
  echo $! > "$DIR/pids/watchdog.pid"
fi
date +%s > "$DIR/ready"
log "ready: ${#CLUSTERS[@]} clusters in $((SECONDS - t0))s; kubeconfigs in $DIR"
