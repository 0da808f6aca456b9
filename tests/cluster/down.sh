#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Stop a control plane started by up.sh.
#
#   down.sh STATE_DIR [--purge]
#
# Sends SIGTERM to kube-controller-manager, kwok, kube-apiserver and etcd (in that order), waits up to
# 15 s each, then SIGKILL. Only pids recorded in STATE_DIR/env whose command
# line still mentions STATE_DIR are signalled (a recycled pid is left alone).
# --purge removes STATE_DIR afterwards (logs included); without it the state
# dir stays for inspection, minus the "*_PID" lines in env.
# Exit status 0 when nothing of this cluster is left running.
set -euo pipefail

# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

state="${1:-${RB_CLUSTER_DIR:-}}"
[[ -n "$state" ]] || rb_die "usage: down.sh STATE_DIR [--purge]"
purge=0
[[ "${2:-}" == --purge ]] && purge=1
[[ -d "$state" ]] || rb_die "no such state dir: $state"
state="$(cd "$state" && pwd)"

envfile="$state/env"
pid_of() { [[ -f "$envfile" ]] && sed -n "s/^$1=//p" "$envfile" | tail -n 1; }
# The binaries this cluster runs (its version may not be the default).
K8S_BIN_DIR="$(pid_of K8S_BIN_DIR || true)"; K8S_BIN_DIR="${K8S_BIN_DIR:-$RB_CACHE/bin/k8s-$K8S_VERSION}"
KWOK_BIN_DIR="$(pid_of KWOK_BIN_DIR || true)"; KWOK_BIN_DIR="${KWOK_BIN_DIR:-$RB_CACHE/bin/kwok-$KWOK_VERSION}"

# Is PID alive and ours (its command line mentions the state dir)?
ours() {
  local pid=$1
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" | grep -qF -- "$state"
}

stop() {
  local name=$1 pid=$2
  [[ -n "$pid" ]] || return 0
  if ! ours "$pid"; then
    return 0
  fi
  rb_log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 15))
  while ours "$pid"; do
    if (( SECONDS >= deadline )); then
      rb_log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.2
  done
}

stop kube-controller-manager "$(pid_of CONTROLLER_MANAGER_PID)"
stop kwok "$(pid_of KWOK_PID)"
stop kube-apiserver "$(pid_of APISERVER_PID)"
stop etcd "$(pid_of ETCD_PID)"

# Anything else still running out of this state dir (e.g. a crashed up.sh
# that never wrote a pid) is found by scanning /proc.
leftover=()
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [[ "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
  cmd="$(tr '\0' ' ' 2>/dev/null < "$d/cmdline")" || continue
  case "$cmd" in
    *"$K8S_BIN_DIR/etcd "*|*"$K8S_BIN_DIR/kube-apiserver "*|*"$KWOK_BIN_DIR/kwok "*|*"$K8S_BIN_DIR/kube-controller-manager "*)
      [[ "$cmd" == *"$state"* ]] && leftover+=("$pid") ;;
  esac
done
for pid in "${leftover[@]}"; do
  rb_log "killing leftover pid $pid"
  kill -KILL "$pid" 2>/dev/null || true
done

still=()
for pid in "$(pid_of CONTROLLER_MANAGER_PID)" "$(pid_of KWOK_PID)" "$(pid_of APISERVER_PID)" "$(pid_of ETCD_PID)" "${leftover[@]}"; do
  ours "$pid" && still+=("$pid")
done
(( ${#still[@]} == 0 )) || rb_die "processes still running: ${still[*]}"

if (( purge )); then
  rm -rf "$state"
  rb_log "cluster stopped; removed $state"
else
  [[ -f "$envfile" ]] && sed -i '/_PID=/d' "$envfile"
  rb_log "cluster stopped; state kept in $state"
fi
