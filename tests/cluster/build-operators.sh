#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build (once) every real operator the e2e suite runs (tests/cluster/operators/*/build.sh),
# or the ones named: build-operators.sh [NAME...]. Each is cached by version in
# $RB_CACHE/bin/NAME-VERSION/, so a second run returns at once. tests/run.sh runs this in
# the background while Rust builds, and waits for it before the e2e tests.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"

names=("$@")
if (( ${#names[@]} == 0 )); then
  for d in "$here"/operators/*/; do
    [[ -x "$d/build.sh" ]] && names+=("$(basename "$d")")
  done
fi
start=$SECONDS
for name in "${names[@]}"; do
  script="$here/operators/$name/build.sh"
  [[ -x "$script" ]] || rb_die "no operator '$name' (no executable $script)"
  t0=$SECONDS
  "$script" >/dev/null || rb_die "operator $name failed to build"
  rb_log "operator $name ready ($((SECONDS - t0))s)"
done
rb_log "all operators ready (${names[*]:-none}) in $((SECONDS - start))s"
