#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# End-to-end smoke check of the control-plane harness:
#   build (or reuse) the binaries, start a cluster with with-cluster.sh, and with
#   the built kubectl:
#   - check /version reports the pinned Kubernetes version;
#   - create a fake node (annotation kwok.x-k8s.io/node=fake; cpu 8, 32Gi,
#     nvidia.com/gpu 2, pods 110) and see it Ready with that allocatable;
#   - create a node WITHOUT the annotation and see kwok leave it alone;
#   - create pods bound to the fake node (spec.nodeName):
#       rust-batch.io/runtime=5s                      -> Running, then Succeeded ~5 s later
#       rust-batch.io/runtime=1s + exit-code=3        -> Running, then Failed (exit code 3)
#       no runtime annotation                         -> Running until deleted; delete completes
#   - bind an unscheduled pod with a Binding (as a scheduler does) -> Running -> Succeeded
#   then tear down and check no etcd / kube-apiserver / kwok of this cluster is left.
# Prints "N passed, 0 failed" at the end; exit status 0 on success.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"

if [[ "${1:-}" != --inner ]]; then
  t0=$SECONDS
  "$here/build.sh" >/dev/null
  rb_log "binaries ready after $((SECONDS - t0))s"
  state="$(mktemp -d "${TMPDIR:-/tmp}/rb-smoke.XXXXXX")"
  rc=0
  RB_CLUSTER_DIR="$state" "$here/with-cluster.sh" "$here/smoke.sh" --inner || rc=$?
  # No process of this cluster may survive the teardown.
  left=()
  for d in /proc/[0-9]*; do
    cmd="$(tr '\0' ' ' 2>/dev/null < "$d/cmdline")" || continue
    [[ "$cmd" == *"$state"* ]] || continue
    case "$cmd" in
      *etcd*|*kube-apiserver*|*kwok*) left+=("${d#/proc/}: $cmd") ;;
    esac
  done
  if (( ${#left[@]} > 0 )); then
    printf 'leaked process %s\n' "${left[@]}" >&2
    echo "smoke: 0 passed, 1 failed (processes leaked after down.sh)"
    exit 1
  fi
  rb_log "teardown check: no etcd/kube-apiserver/kwok process of $state left"
  if (( rc == 0 )); then
    rm -rf "$state"
  else
    rb_log "smoke FAILED (exit $rc); logs in $state/logs"
  fi
  rb_log "total $((SECONDS - t0))s"
  exit "$rc"
fi

# ---- inner part: runs inside with-cluster.sh (KUBECONFIG exported) ----------
passed=0
failed=0
ok()   { echo "ok   - $*"; passed=$((passed + 1)); }
bad()  { echo "FAIL - $*"; failed=$((failed + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
k() { "$KUBECTL" "$@"; }

finish() {
  if (( failed > 0 )); then
    echo "--- nodes / pods at failure"
    k get nodes -o wide || true
    k get pods -o wide || true
    echo "--- kwok log tail"
    tail -n 40 "$RB_CLUSTER_DIR/logs/kwok.log" || true
  fi
  echo "smoke: $passed passed, $failed failed"
  (( failed == 0 ))
}

server_version="$(k version -o json | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | tail -n 1)"
check "server /version is $K8S_VERSION (got $server_version)" test "$server_version" = "$K8S_VERSION"

k apply -f - <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: rb-smoke-fake
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: rb-smoke-fake
    type: kwok
spec:
  taints: []
status:
  allocatable:
    cpu: "8"
    memory: 32Gi
    nvidia.com/gpu: "2"
    pods: "110"
  capacity:
    cpu: "8"
    memory: 32Gi
    nvidia.com/gpu: "2"
    pods: "110"
---
apiVersion: v1
kind: Node
metadata:
  name: rb-smoke-unmanaged
EOF

check "fake node becomes Ready" k wait --for=condition=Ready node/rb-smoke-fake --timeout=60s
alloc="$(k get node rb-smoke-fake -o jsonpath='{.status.allocatable.cpu} {.status.allocatable.memory} {.status.allocatable.nvidia\.com/gpu} {.status.allocatable.pods}')"
check "fake node allocatable kept (got: $alloc)" test "$alloc" = "8 32Gi 2 110"

pod() { # name annotations-yaml
  k apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations:
$2
spec:
  nodeName: rb-smoke-fake
  restartPolicy: Never
  containers:
  - name: main
    image: fake-image
    resources:
      requests: {cpu: "1", memory: 1Gi, nvidia.com/gpu: "1"}
      limits: {nvidia.com/gpu: "1"}
EOF
}
pod rb-smoke-5s    '    rust-batch.io/runtime: 5s'
pod rb-smoke-fail  '    rust-batch.io/runtime: 1s
    rust-batch.io/exit-code: "3"'
pod rb-smoke-sleep '    note: no-runtime'

phase() { k get pod "$1" -o jsonpath='{.status.phase}'; }
# Watch rb-smoke-5s: must be seen Running first, then Succeeded.
seen_running=0
succeeded=0
deadline=$((SECONDS + 60))
while (( SECONDS < deadline )); do
  p="$(phase rb-smoke-5s)"
  [[ "$p" == Running ]] && seen_running=1
  if [[ "$p" == Succeeded ]]; then succeeded=1; break; fi
  sleep 0.5
done
check "pod with runtime 5s was Running" test "$seen_running" = 1
check "pod with runtime 5s became Succeeded" test "$succeeded" = 1
times="$(k get pod rb-smoke-5s -o jsonpath='{.status.startTime} {.status.containerStatuses[0].state.terminated.finishedAt}')"
read -r started finished <<<"$times"
elapsed=$(( $(date -d "$finished" +%s) - $(date -d "$started" +%s) ))
check "runtime 5s honoured (startTime -> finishedAt = ${elapsed}s)" test "$elapsed" -ge 4 -a "$elapsed" -le 15
check "pod IP assigned ($(k get pod rb-smoke-5s -o jsonpath='{.status.podIP}'))" \
  test -n "$(k get pod rb-smoke-5s -o jsonpath='{.status.podIP}')"

check "pod with exit-code 3 becomes Failed" \
  k wait --for=jsonpath='{.status.phase}'=Failed pod/rb-smoke-fail --timeout=60s
code="$(k get pod rb-smoke-fail -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')"
check "failed pod exit code is 3 (got $code)" test "$code" = 3

check "pod without runtime is Running and Ready" \
  k wait --for=condition=Ready pod/rb-smoke-sleep --timeout=60s
sleep 2
check "pod without runtime still Running after 2s" test "$(phase rb-smoke-sleep)" = Running
check "deleting a running pod completes (pod-delete stage)" \
  k delete pod rb-smoke-sleep --wait=true --timeout=30s

# The path a scheduler takes: an unbound pod, then a Binding to the fake node.
k apply -f - <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: rb-smoke-bind
  annotations:
    rust-batch.io/runtime: 2s
spec:
  schedulerName: rb-smoke-nobody
  restartPolicy: Never
  containers:
  - name: main
    image: fake-image
EOF
check "unbound pod stays Pending" test "$(phase rb-smoke-bind)" = Pending
k create -f - <<'EOF'
apiVersion: v1
kind: Binding
metadata:
  name: rb-smoke-bind
target:
  apiVersion: v1
  kind: Node
  name: rb-smoke-fake
EOF
check "pod bound through a Binding becomes Succeeded" \
  k wait --for=jsonpath='{.status.phase}'=Succeeded pod/rb-smoke-bind --timeout=60s
sched="$(k get pod rb-smoke-bind -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].status}')"
check "PodScheduled condition kept (got '$sched')" test "$sched" = True

unmanaged="$(k get node rb-smoke-unmanaged -o jsonpath='{.status.conditions}')"
check "node without the kwok annotation is not managed (conditions: '${unmanaged}')" test -z "$unmanaged"

finish
