#!/usr/bin/env bash
# The code's hygiene, part of the test command (tests/run.sh): formatting, clippy with every
# warning an error, and cargo-deny (deny.toml: licenses, advisories, duplicate and wildcard
# crates, sources).
#
#   tests/hygiene.sh                 # all three
#   tests/hygiene.sh fmt deny        # the steps named (fmt, clippy, deny), in that order
#
# tests/run.sh runs fmt first (it fails in a second), lints with clippy while it builds the
# tests (clippy-driver as the workspace's compiler: one build instead of a build and a
# check), and deny in the background.
#
# cargo-deny is installed once and cached by version (tests/tools/cargo-install-cached.sh).
# Its advisory database is RustSec's git repository on GitHub. Where GitHub is not reachable
# (machines that reach package registries only), a local snapshot of rustsec/advisory-db
# stands in for it: $RUSTSEC_DB_REPO, else /work/.mirror/rustsec+advisory-db/repo. Without
# GitHub and without a snapshot the advisories check fails (it never passes unchecked).
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DENY_VERSION=0.20.2

steps=("$@")
(( ${#steps[@]} > 0 )) || steps=(fmt clippy deny)
for step in "${steps[@]}"; do
  [[ "$step" =~ ^(fmt|clippy|deny)$ ]] || { echo "hygiene.sh: unknown step '$step' (fmt, clippy, deny)" >&2; exit 2; }
done
wants() { [[ " ${steps[*]} " == *" $1 "* ]]; }

if wants fmt; then
  echo "[hygiene] cargo fmt --check"
  cargo fmt --all --check
fi

if wants clippy; then
  echo "[hygiene] cargo clippy --all-targets -D warnings"
  cargo clippy --all-targets --locked --quiet -- -D warnings
fi

wants deny || exit 0
deny="$(tests/tools/cargo-install-cached.sh cargo-deny "$CARGO_DENY_VERSION")"
snapshot="${RUSTSEC_DB_REPO:-/work/.mirror/rustsec+advisory-db/repo}"
if [[ -d "$snapshot" ]] && ! GIT_TERMINAL_PROMPT=0 timeout 20 git ls-remote --exit-code \
    https://github.com/RustSec/advisory-db HEAD >/dev/null 2>&1; then
  echo "[hygiene] advisories from the snapshot at $snapshot ($(git -C "$snapshot" log -1 --format=%cs HEAD 2>/dev/null || echo 'date unknown'))"
  export GIT_CONFIG_COUNT=1
  export GIT_CONFIG_KEY_0="url.file://$snapshot.insteadOf"
  export GIT_CONFIG_VALUE_0="https://github.com/RustSec/advisory-db"
fi
echo "[hygiene] cargo deny check (licenses, advisories, bans, sources)"
"$deny" check --hide-inclusion-graph
