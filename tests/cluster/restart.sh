#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Kill a control-plane process of a cluster started by up.sh with SIGKILL and
# start it again with the same command line (kept by up.sh in STATE/cmd/NAME),
# for the chaos tests.
#
#   restart.sh STATE_DIR NAME [DOWN_SECONDS]
#
# NAME is etcd or kube-apiserver. DOWN_SECONDS (default 0) is how long it stays
# down. The new pid is appended to STATE/env (NAME_PID lines: the last one
# counts, for down.sh too). Returns once the process answers its health check
# again; prints "restarted NAME pid PID after S s down" on stdout.
set -euo pipefail

# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

state="${1:?usage: restart.sh STATE_DIR NAME [DOWN_SECONDS]}"
name="${2:?usage: restart.sh STATE_DIR NAME [DOWN_SECONDS]}"
down_s="${3:-0}"
envfile="$state/env"
case "$name" in
  etcd) var=ETCD_PID ;;
  kube-apiserver) var=APISERVER_PID ;;
  *) rb_die "cannot restart $name (etcd or kube-apiserver)" ;;
esac
[[ -f "$state/cmd/$name" ]] || rb_die "no command kept for $name in $state/cmd (cluster started by an older up.sh?)"
value() { sed -n "s/^$1=//p" "$envfile" | tail -n 1; }
pid="$(value "$var")"

if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
  kill -KILL "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
fi
sleep "$down_s"

log="$state/logs/$name.log"
echo "--- restarted $(date -u +%FT%TZ) ---" >> "$log"
# The command line was written by printf %q: eval gives back its words.
eval "cmd=($(cat "$state/cmd/$name"))"
# shellcheck disable=SC2154  # cmd is set by the eval above
setsid "${cmd[@]}" >>"$log" 2>&1 </dev/null &
new=$!
echo "$var=$new" >> "$envfile"

token="$(value RB_TOKEN)"
check() {
  case "$name" in
    etcd) curl -fsS "$(value RB_ETCD_URL)/health" ;;
    kube-apiserver)
      curl -fsSk -H "Authorization: Bearer $token" "$(value RB_APISERVER_URL)/readyz" ;;
  esac
}
for _ in $(seq 1 600); do
  if check >/dev/null 2>&1; then
    echo "restarted $name pid $new after ${down_s}s down"
    exit 0
  fi
  kill -0 "$new" 2>/dev/null || rb_die "$name exited after the restart; see $log"
  sleep 0.1
done
rb_die "$name did not answer within 60 s of its restart; see $log"
