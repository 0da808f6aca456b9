#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# A local cluster with fake GPU nodes and rust-batch scheduling on it, to try the examples:
#
#   tests/cluster/demo.sh                    # build, start, 2 nodes {cpu 8, memory 32Gi, 2 GPUs}
#   export KUBECONFIG=~/.cache/rust-batch/demo/kubeconfig
#   kubectl apply -f examples/k8s/s1-tfjob-volcano.yaml
#   kubectl get pg,pods -o wide               # the gang waits whole, and says why
#   tests/cluster/demo.sh add-gpu-nodes 2     # ...then binds whole
#   tests/cluster/demo.sh down
#
# kubectl is the one built by build.sh ($K8S_BIN_DIR/kubectl) if the machine has none.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
export RB_CLUSTER_DIR="${RB_CLUSTER_DIR:-$RB_CACHE/demo}"
state="$RB_CLUSTER_DIR"
kubectl() { "$K8S_BIN_DIR/kubectl" --kubeconfig "$state/kubeconfig" "$@"; }

add_gpu_nodes() {
  local count="$1" existing i name
  existing="$(kubectl get nodes -l rust-batch.io/demo=gpu -o name | wc -l)"
  for ((i = existing + 1; i <= existing + count; i++)); do
    name="gpu-node-$i"
    kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {type: kwok, rust-batch.io/demo: gpu, kubernetes.io/hostname: $name}
status:
  allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "2", pods: "110"}
  capacity: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "2", pods: "110"}
YAML
    kubectl wait --for=condition=Ready "node/$name" --timeout=60s >/dev/null
    # No node-lifecycle controller runs here: lift the taint it would lift.
    kubectl patch node "$name" --type=merge -p '{"spec":{"taints":[]}}' >/dev/null
    rb_log "node $name ready (cpu 8, memory 32Gi, nvidia.com/gpu 2)"
  done
}

case "${1:-up}" in
  up)
    "$here/build.sh"
    (cd "$root" && cargo build --release --locked)
    mkdir -p "$state"
    "$here/up.sh"
    kubectl apply -f "$root/crds/" >/dev/null
    kubectl wait --for=condition=Established crd/podgroups.scheduling.volcano.sh crd/queues.scheduling.volcano.sh --timeout=60s >/dev/null
    add_gpu_nodes "${NODES:-2}"
    KUBECONFIG="$state/kubeconfig" nohup "$root/target/release/rust-batch" run --scheduler-name rust-batch \
      --scheduler-name volcano --http-address 127.0.0.1:8080 >"$state/logs/rust-batch.log" 2>&1 &
    echo $! >"$state/rust-batch.pid"
    rb_log "rust-batch running (log: $state/logs/rust-batch.log, metrics: http://127.0.0.1:8080/metrics)"
    cat <<MSG

  export KUBECONFIG=$state/kubeconfig PATH=$K8S_BIN_DIR:\$PATH
  kubectl apply -f examples/k8s/s1-tfjob-volcano.yaml
  kubectl get pg,pods -o wide
  tests/cluster/demo.sh add-gpu-nodes 2
  tests/cluster/demo.sh down
MSG
    ;;
  add-gpu-nodes) add_gpu_nodes "${2:-1}" ;;
  down)
    if [[ -f "$state/rust-batch.pid" ]]; then
      kill "$(cat "$state/rust-batch.pid")" 2>/dev/null || true
      rm -f "$state/rust-batch.pid"
    fi
    "$here/down.sh" "$state"
    ;;
  *) echo "usage: demo.sh [up | add-gpu-nodes N | down]" >&2; exit 2 ;;
esac
