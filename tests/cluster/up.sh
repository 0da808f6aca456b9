#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Start a throw-away control plane on 127.0.0.1: etcd + kube-apiserver + kwok, and
# kube-controller-manager running only the PersistentVolume binder (claims and volumes
# bind as on a real cluster; nothing else of the controller-manager runs).
#
#   up.sh [STATE_DIR]
#
# STATE_DIR defaults to $RB_CLUSTER_DIR, else a new mktemp dir. It receives
# the certs, keys, token file, etcd data, logs (logs/*.log), the kubeconfig
# ($STATE/kubeconfig) and an env file ($STATE/env, KEY=VALUE lines: KUBECONFIG,
# server URL, token, pids, ...). Progress goes to stderr; the only line on
# stdout is the state dir, so `state=$(up.sh)` works. Stop it with
# `down.sh STATE_DIR`. Builds the binaries first if they are not cached
# (see build.sh).
#
# Env knobs:
#   RB_CLUSTER_DIR         state dir (when no argument is given)
#   RB_UP_TIMEOUT          seconds to wait for each component (default 180)
#   RB_ETCD_ARGS           extra etcd flags (word-split)
#   RB_APISERVER_ARGS      extra kube-apiserver flags (word-split)
#   RB_KWOK_ARGS           extra kwok flags (word-split)
#   RB_KWOK_CONFIG_DIR     dir whose *.yaml are passed to kwok with --config
#                          (default tests/cluster/stages)
#   RB_NO_KWOK=1           do not start kwok
#   RB_NO_CONTROLLERS=1    do not start kube-controller-manager
#   RB_K8S_VERSION         another Kubernetes version than versions.env's K8S_VERSION
#                          (e.g. K8S_OLDEST_VERSION); built first if need be
#   RB_K8S_COMPAT=1        a compatibility control plane: no kube-controller-manager, the
#                          default version's etcd (lib.sh)
set -euo pipefail

# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

timeout_s="${RB_UP_TIMEOUT:-180}"
kwok_config_dir="${RB_KWOK_CONFIG_DIR:-$RB_CLUSTER_HOME/stages}"

for tool in curl setsid; do
  command -v "$tool" >/dev/null || rb_die "$tool not found (apt-get install -y curl util-linux)"
done

# --- binaries ---------------------------------------------------------------
"$RB_CLUSTER_HOME/build.sh" >/dev/null || rb_die "build.sh failed"
ETCD="$K8S_BIN_DIR/etcd"
APISERVER="$K8S_BIN_DIR/kube-apiserver"
KUBECTL="$K8S_BIN_DIR/kubectl"
KWOK="$KWOK_BIN_DIR/kwok"

# --- state dir --------------------------------------------------------------
state="${1:-${RB_CLUSTER_DIR:-}}"
owned=0
if [[ -z "$state" ]]; then
  state="$(mktemp -d "${TMPDIR:-/tmp}/rb-cluster.XXXXXX")"
  owned=1
fi
mkdir -p "$state"
state="$(cd "$state" && pwd)"
if [[ -f "$state/env" ]]; then
  while IFS='=' read -r key pid; do
    [[ "$key" == *_PID && -n "$pid" && -r "/proc/$pid/cmdline" ]] || continue
    if tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" | grep -qF -- "$state"; then
      rb_die "a cluster still runs in $state (pid $pid): run down.sh $state first"
    fi
  done < "$state/env"
fi
# Always a fresh cluster: drop what an earlier run left in this dir.
rm -rf "$state/etcd" "$state/logs" "$state/pki" "$state/apiserver-certs" "$state/kwok" \
  "$state/kubeconfig" "$state/env"
mkdir -p "$state/logs" "$state/pki" "$state/apiserver-certs" "$state/kwok"
rb_log "state dir: $state"

# From here on, any failure tears down whatever was started.
ETCD_PID="" APISERVER_PID="" KWOK_PID="" CONTROLLER_MANAGER_PID=""
write_env() {
  {
    echo "KUBECONFIG=$state/kubeconfig"
    echo "RB_CLUSTER_DIR=$state"
    echo "RB_CLUSTER_OWNED=$owned"
    echo "RB_APISERVER_URL=https://127.0.0.1:${apiserver_port:-}"
    echo "RB_TOKEN=$token"
    echo "RB_ETCD_URL=http://127.0.0.1:${etcd_client_port:-}"
    echo "RB_KWOK_URL=http://127.0.0.1:${kwok_port:-}"
    echo "RB_K8S_VERSION=$K8S_VERSION"
    echo "K8S_BIN_DIR=$K8S_BIN_DIR"
    echo "KWOK_BIN_DIR=$KWOK_BIN_DIR"
    echo "KUBECTL=$KUBECTL"
    echo "ETCD_PID=$ETCD_PID"
    echo "APISERVER_PID=$APISERVER_PID"
    echo "KWOK_PID=$KWOK_PID"
    echo "CONTROLLER_MANAGER_PID=$CONTROLLER_MANAGER_PID"
  } > "$state/env.tmp"
  mv "$state/env.tmp" "$state/env"
}
on_exit() {
  local rc=$?
  if (( rc != 0 )); then
    rb_log "up failed (exit $rc); last log lines:"
    local f
    for f in "$state"/logs/*.log; do
      [[ -f "$f" ]] || continue
      echo "----- $f" >&2
      tail -n 25 "$f" >&2 || true
    done
    if [[ -n "$ETCD_PID$APISERVER_PID$KWOK_PID$CONTROLLER_MANAGER_PID" ]]; then
      write_env || true
      "$RB_CLUSTER_HOME/down.sh" "$state" >&2 || true
    fi
    rb_log "state dir kept for inspection: $state"
  fi
}
trap on_exit EXIT

# --- helpers ----------------------------------------------------------------
# Print N free TCP ports on 127.0.0.1 (all bound at once, so distinct).
free_ports() {
  local n=$1
  if command -v python3 >/dev/null; then
    python3 - "$n" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
  else
    # Fallback: random ports that nothing answers on.
    local out=() p
    while (( ${#out[@]} < n )); do
      p=$(( 20000 + RANDOM % 30000 ))
      [[ " ${out[*]} " == *" $p "* ]] && continue
      if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then out+=("$p"); fi
    done
    echo "${out[*]}"
  fi
}

# wait_for NAME PID LOG CHECK-COMMAND...: poll until CHECK succeeds, the
# process dies, or the timeout passes.
wait_for() {
  local name=$1 pid=$2 log=$3; shift 3
  local deadline=$((SECONDS + timeout_s))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rb_log "$name (pid $pid) exited; see $log"
      return 1
    fi
    if (( SECONDS >= deadline )); then
      rb_log "$name not ready after ${timeout_s}s; see $log"
      return 1
    fi
    sleep 0.5
  done
}

# shellcheck disable=SC2317  # called through wait_for
apiserver_ready() {
  curl -fsSk -H "Authorization: Bearer $token" "https://127.0.0.1:$apiserver_port/healthz" &&
  curl -fsSk -H "Authorization: Bearer $token" "https://127.0.0.1:$apiserver_port/readyz"
}

port_in_use_error() { grep -qiE 'address already in use|bind: address' "$1" 2>/dev/null; }

# start NAME LOG CMD...: run CMD in its own session, detached from the
# terminal, output to LOG; sets START_PID. setsid execs in place (this shell
# is not a process-group leader in a background job), so $! is the binary.
# The command is also kept in $state/cmd/NAME, for restart.sh.
start() {
  local name=$1 log=$2; shift 2
  rb_log "starting $name: $*"
  mkdir -p "$state/cmd"
  printf '%q ' "$@" > "$state/cmd/$name"
  setsid "$@" >"$log" 2>&1 </dev/null &
  START_PID=$!
}

# --- credentials ------------------------------------------------------------
token="$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')"
printf '%s,rb-admin,rb-admin-uid,system:masters\n' "$token" > "$state/pki/tokens.csv"
chmod 600 "$state/pki/tokens.csv"
if command -v openssl >/dev/null; then
  openssl genrsa -out "$state/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$state/pki/sa.key" -pubout -out "$state/pki/sa.pub" 2>/dev/null
else
  # openssl missing (apt-get install -y openssl): use Go's crypto instead.
  rb_log "openssl not found; generating the service-account key pair with go run k8s/keygen"
  (cd "$RB_CLUSTER_HOME/k8s/keygen" && GOFLAGS=-mod=readonly go run . "$state/pki/sa.key" "$state/pki/sa.pub")
fi
[[ -s "$state/pki/sa.key" && -s "$state/pki/sa.pub" ]] || rb_die "service-account key generation failed"

# --- etcd -------------------------------------------------------------------
for attempt in 1 2 3; do
  read -r etcd_client_port etcd_peer_port < <(free_ports 2)
  etcd_log="$state/logs/etcd.log"
  # shellcheck disable=SC2086  # RB_ETCD_ARGS is deliberately word-split
  start etcd "$etcd_log" "$ETCD" \
    --name=rb \
    --data-dir="$state/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_client_port" \
    --advertise-client-urls="http://127.0.0.1:$etcd_client_port" \
    --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster="rb=http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster-state=new \
    --unsafe-no-fsync=true \
    --quota-backend-bytes=8589934592 \
    --log-level=warn \
    ${RB_ETCD_ARGS:-}
  ETCD_PID=$START_PID
  write_env
  if wait_for etcd "$ETCD_PID" "$etcd_log" curl -fsS "http://127.0.0.1:$etcd_client_port/health"; then
    break
  fi
  if (( attempt < 3 )) && port_in_use_error "$etcd_log"; then
    rb_log "etcd port clash; retrying with other ports"
    kill "$ETCD_PID" 2>/dev/null || true; wait "$ETCD_PID" 2>/dev/null || true
    rm -rf "$state/etcd"; ETCD_PID=""
    continue
  fi
  rb_die "etcd did not become healthy"
done
rb_log "etcd ready on 127.0.0.1:$etcd_client_port (pid $ETCD_PID)"

# --- kube-apiserver ---------------------------------------------------------
# Feature gates and API versions, by minor version (the names are read from that version's
# pkg/features/kube_features.go and pkg/controlplane/instance.go):
# * 1.37: Kubernetes' own gang API, scheduling.k8s.io/v1beta1 PodGroup and Workload (beta,
#   off by default) and pods' spec.schedulingGroup: GenericWorkload; the PodGroup fields
#   behind their own gates: schedulingConstraints (TopologyAwareWorkloadScheduling, alpha),
#   preemptionPolicy (PodGroupPreemptionPolicy, alpha), resourceClaims and their status
#   (DRAWorkloadResourceClaims, beta, off by default); a Job's spec.scheduling, from which
#   the Job controller makes a Workload and a PodGroup (WorkloadWithJob, alpha; the
#   controller needs it too: tests/e2e/job_controller.rs). Without a gate the API server
#   drops the field. DRA (resource.k8s.io/v1) is GA and on, its gate locked.
# * 1.33: DynamicResourceAllocation is off by default, and without it the API server drops
#   spec.resourceClaims from every pod: on (with resource.k8s.io/v1beta1), so tests can
#   send the pods rust-batch refuses.
if (( K8S_MINOR >= 37 )); then
  feature_gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true,PodGroupPreemptionPolicy=true,DRAWorkloadResourceClaims=true,WorkloadWithJob=true
  runtime_config=scheduling.k8s.io/v1beta1=true
elif (( K8S_MINOR <= 33 )); then
  feature_gates=DynamicResourceAllocation=true
  runtime_config=resource.k8s.io/v1beta1=true
else
  rb_die "no feature gates known for Kubernetes $K8S_VERSION (supported: $K8S_OLDEST_VERSION and $K8S_DEFAULT_VERSION)"
fi
for attempt in 1 2 3; do
  read -r apiserver_port < <(free_ports 1)
  apiserver_log="$state/logs/kube-apiserver.log"
  # shellcheck disable=SC2086  # RB_APISERVER_ARGS is deliberately word-split
  start kube-apiserver "$apiserver_log" "$APISERVER" \
    --etcd-servers="http://127.0.0.1:$etcd_client_port" \
    --cert-dir="$state/apiserver-certs" \
    --secure-port="$apiserver_port" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --service-cluster-ip-range=10.0.0.0/24 \
    --allow-privileged=true \
    --disable-admission-plugins=ServiceAccount \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$state/pki/sa.pub" \
    --service-account-signing-key-file="$state/pki/sa.key" \
    --token-auth-file="$state/pki/tokens.csv" \
    --feature-gates="$feature_gates" \
    --runtime-config="$runtime_config" \
    ${RB_APISERVER_ARGS:-}
  APISERVER_PID=$START_PID
  write_env
  if wait_for kube-apiserver "$APISERVER_PID" "$apiserver_log" apiserver_ready; then
    break
  fi
  if (( attempt < 3 )) && port_in_use_error "$apiserver_log"; then
    rb_log "kube-apiserver port clash; retrying with another port"
    kill "$APISERVER_PID" 2>/dev/null || true; wait "$APISERVER_PID" 2>/dev/null || true
    APISERVER_PID=""
    continue
  fi
  rb_die "kube-apiserver did not become ready"
done
rb_log "kube-apiserver ready on https://127.0.0.1:$apiserver_port (pid $APISERVER_PID)"

cat > "$state/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rb
  cluster:
    server: https://127.0.0.1:$apiserver_port
    insecure-skip-tls-verify: true
users:
- name: rb-admin
  user:
    token: $token
contexts:
- name: rb
  context:
    cluster: rb
    user: rb-admin
    namespace: default
current-context: rb
EOF
chmod 600 "$state/kubeconfig"
write_env

# --- kwok -------------------------------------------------------------------
if [[ "${RB_NO_KWOK:-0}" != 1 ]]; then
  config_args=()
  # kwok.yaml (the KwokConfiguration) first, then the Stage files.
  [[ -f "$kwok_config_dir/kwok.yaml" ]] && config_args+=(--config "$kwok_config_dir/kwok.yaml")
  for f in "$kwok_config_dir"/*.yaml; do
    [[ -f "$f" && "$(basename "$f")" != kwok.yaml ]] && config_args+=(--config "$f")
  done
  (( ${#config_args[@]} > 0 )) || rb_die "no kwok config/stage files in $kwok_config_dir"
  for attempt in 1 2 3; do
    read -r kwok_port < <(free_ports 1)
    kwok_log="$state/logs/kwok.log"
    # KWOK_WORKDIR keeps kwok from also loading ~/.kwok/kwok.yaml.
    # shellcheck disable=SC2086  # RB_KWOK_ARGS is deliberately word-split
    KWOK_WORKDIR="$state/kwok" start kwok "$kwok_log" "$KWOK" \
      --kubeconfig="$state/kubeconfig" \
      --manage-all-nodes=false \
      --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
      --server-address="127.0.0.1:$kwok_port" \
      "${config_args[@]}" \
      ${RB_KWOK_ARGS:-}
    KWOK_PID=$START_PID
    write_env
    if wait_for kwok "$KWOK_PID" "$kwok_log" curl -fsS "http://127.0.0.1:$kwok_port/healthz"; then
      break
    fi
    if (( attempt < 3 )) && port_in_use_error "$kwok_log"; then
      rb_log "kwok port clash; retrying with another port"
      kill "$KWOK_PID" 2>/dev/null || true; wait "$KWOK_PID" 2>/dev/null || true
      KWOK_PID=""
      continue
    fi
    rb_die "kwok did not become ready"
  done
  rb_log "kwok ready (pid $KWOK_PID, healthz on 127.0.0.1:$kwok_port)"
fi

# --- kube-controller-manager (the PersistentVolume binder only) ---------------
if [[ "${RB_NO_CONTROLLERS:-0}" != 1 && "$RB_K8S_COMPAT" != 1 ]]; then
  kcm_log="$state/logs/kube-controller-manager.log"
  # No serving port (tests run side by side), no leader election, the admin identity.
  start kube-controller-manager "$kcm_log" "$K8S_BIN_DIR/kube-controller-manager" \
    --kubeconfig="$state/kubeconfig" \
    --controllers=persistentvolume-binder-controller \
    --leader-elect=false \
    --secure-port=0 \
    --pvclaimbinder-sync-period=2s
  CONTROLLER_MANAGER_PID=$START_PID
  write_env
  # The PersistentVolume controller's own line (1.33 to 1.37; 1.37 no longer logs
  # "Started controller" at the default verbosity).
  wait_for kube-controller-manager "$CONTROLLER_MANAGER_PID" "$kcm_log" \
    grep -q 'Starting persistent volume controller' "$kcm_log" \
    || rb_die "kube-controller-manager did not start the PersistentVolume binder"
  rb_log "kube-controller-manager ready (pid $CONTROLLER_MANAGER_PID, PersistentVolume binder only)"
fi

write_env
rb_log "cluster up: export KUBECONFIG=$state/kubeconfig   (kubectl: $KUBECTL)"
rb_log "stop it with: $RB_CLUSTER_HOME/down.sh $state"
echo "$state"
