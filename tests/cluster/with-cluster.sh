#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Run a command against a fresh control plane, then always tear it down.
#
#   with-cluster.sh CMD [ARGS...]
#
# Starts the cluster with up.sh (in $RB_CLUSTER_DIR if set, else a new temp
# dir), exports everything from $STATE/env (KUBECONFIG, RB_APISERVER_URL,
# RB_TOKEN, KUBECTL, K8S_BIN_DIR, ...) and puts the built kubectl first on
# PATH, runs CMD, and stops every process via down.sh on any exit (also on
# Ctrl-C / SIGTERM). Exits with CMD's exit status.
# The state dir (logs in $STATE/logs) is removed when CMD succeeded and
# up.sh created it; it is kept when CMD failed or RB_KEEP_STATE=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
(( $# > 0 )) || { echo "usage: with-cluster.sh CMD [ARGS...]" >&2; exit 2; }

state=""
rc=0
child=""
# shellcheck disable=SC2317  # runs from the traps below
stop_child() {
  [[ -n "$child" ]] && kill -0 "$child" 2>/dev/null || return 0
  kill -TERM "$child" 2>/dev/null || true
  local i
  for ((i = 0; i < 50; i++)); do
    kill -0 "$child" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL "$child" 2>/dev/null || true
  wait "$child" 2>/dev/null || true
}
# shellcheck disable=SC2317  # runs from the traps below
teardown() {
  trap - EXIT INT TERM
  [[ -n "$state" ]] || exit "$rc"
  local purge=()
  if (( rc == 0 )) && [[ "${RB_KEEP_STATE:-0}" != 1 && "${RB_CLUSTER_OWNED:-0}" == 1 ]]; then
    purge=(--purge)
  fi
  if ! "$here/down.sh" "$state" "${purge[@]}"; then
    echo "[with-cluster.sh] ERROR: teardown failed" >&2
    (( rc != 0 )) || rc=1
  fi
  (( rc == 0 )) || echo "[with-cluster.sh] exit $rc; logs kept in $state/logs" >&2
  exit "$rc"
}
trap 'rc=$?; teardown' EXIT
trap 'rc=130; stop_child; teardown' INT
trap 'rc=143; stop_child; teardown' TERM

state="$("$here/up.sh")"
set -a
# shellcheck disable=SC1091
source "$state/env"
set +a
PATH="$K8S_BIN_DIR:$PATH"

# CMD runs as a background job so that a SIGTERM/SIGINT to this script is
# handled at once (bash defers traps while a foreground child runs); the
# handler forwards SIGTERM to CMD. `<&0` keeps CMD's stdin (a background job
# would otherwise get /dev/null).
set +e
"$@" <&0 &
child=$!
wait "$child"
rc=$?
child=""
set -e
exit "$rc"
