#!/usr/bin/env bash
# The one command that runs every test: unit, property, simulator scenario and end-to-end
# tests against a real control plane (kube-apiserver + etcd + kwok, built from Go modules by
# tests/cluster/build.sh and cached by version outside the tree; the default Kubernetes
# version, then a compatibility subset on the oldest supported one), plus the Helm chart's (helm
# from tests/cluster/build-helm.sh, cached too), the static binary's in an empty root, and
# the docs book's build (docs/build.sh) and links (tests/offline/docs_links.rs), and the code's
# hygiene (tests/hygiene.sh: fmt, clippy, cargo-deny). A fresh machine needs only the Rust and Go toolchains; the first control-plane build takes
# several minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

# The real operators the e2e suite runs (tests/cluster/operators/*) build from Go modules in
# the background while the rest builds; the tests wait for them below.
operators_log="$(mktemp -t rb-build-operators.XXXXXX.log)"
echo "==> building the real operators in the background (cached after the first run; log: $operators_log)"
tests/cluster/build-operators.sh >"$operators_log" 2>&1 &
operators_pid=$!

# cargo-deny for the hygiene step below, installed once and cached by version, meanwhile.
deny_log="$(mktemp -t rb-build-cargo-deny.XXXXXX.log)"
tests/tools/cargo-install-cached.sh cargo-deny "$(sed -n 's/^CARGO_DENY_VERSION=//p' tests/hygiene.sh)" \
  >"$deny_log" 2>&1 &

echo "==> building the control plane (cached after the first run)"
tests/cluster/build.sh

# The oldest supported Kubernetes version: a second control plane of it runs the
# compatibility subset at the end. Built in the background while the rest builds: only its
# kube-apiserver and kubectl (RB_K8S_COMPAT=1, tests/cluster/lib.sh).
oldest="$(sed -n 's/^K8S_OLDEST_VERSION=//p' tests/cluster/versions.env)"
oldest_log="$(mktemp -t rb-build-oldest.XXXXXX.log)"
echo "==> building the oldest supported control plane ($oldest) in the background (cached after the first run; log: $oldest_log)"
RB_K8S_COMPAT=1 RB_K8S_VERSION="$oldest" tests/cluster/build.sh >"$oldest_log" 2>&1 &
oldest_pid=$!

echo "==> building helm for the chart's tests (cached after the first run)"
tests/cluster/build-helm.sh

echo "==> the statically linked binary of the image (its own target dir, dev profile without debug info)"
deploy/static-build.sh

echo "==> the docs book (mdBook, installed once and cached by version; tests/offline/docs_links.rs checks its links)"
docs/build.sh

echo "==> hygiene: cargo fmt --check, clippy -D warnings, cargo-deny (tests/hygiene.sh)"
tests/hygiene.sh

echo "==> building rust-batch and its tests"
cargo test --all-targets --locked --no-run

echo "==> waiting for the operators' build"
if ! wait "$operators_pid"; then
  tail -n 60 "$operators_log" >&2
  echo "building the real operators failed (log above: $operators_log)" >&2
  exit 1
fi
tail -n 1 "$operators_log"

echo "==> every test, with a fresh control plane up (e2e tests fail without it; none skip)"
tests/cluster/with-cluster.sh cargo test --all-targets --locked --no-fail-fast

echo "==> waiting for the oldest supported control plane's build"
if ! wait "$oldest_pid"; then
  tail -n 60 "$oldest_log" >&2
  echo "building the $oldest control plane failed (log above: $oldest_log)" >&2
  exit 1
fi
echo "==> the compatibility subset on a fresh control plane of the oldest supported version ($oldest):"
echo "    a gang of every dialect binds whole, pods and nodes listed in protobuf, the refusals, the chart installs, leader election"
# Modules of the e2e test binary, selected by libtest filters (`module::` matches that
# module's tests only: the binary's modules are flat). Checked first: every module has tests
# and no other module's test is selected.
compat=(volcano_all_or_nothing dialects protobuf_lists gates_and_refusals helm leader_election)
filters=("${compat[@]/%/::}")
listed="$(cargo test --locked --quiet --test e2e -- --list "${filters[@]}" | sed -n 's/: test$//p')"
for module in "${compat[@]}"; do
  grep -q "^$module::" <<<"$listed" || { echo "the compatibility subset: no test in module $module" >&2; exit 1; }
done
if grep -vqE "^($(IFS='|'; echo "${compat[*]}"))::" <<<"$listed"; then
  echo "the compatibility subset's filters select other modules' tests:" >&2
  echo "$listed" >&2
  exit 1
fi
echo "    $(wc -l <<<"$listed") tests in ${#compat[@]} modules of the e2e binary"
RB_K8S_COMPAT=1 RB_K8S_VERSION="$oldest" tests/cluster/with-cluster.sh cargo test --locked --no-fail-fast \
  --test e2e -- "${filters[@]}"

echo "==> the bundled default scenario must run with both invariants at 0"
# The binary the tests were built with: `cargo run` would build the crate once more without
# the dev-dependencies' features (disk and minutes for nothing).
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
"$target_dir/debug/rust-batch" simulate --output json > "$target_dir/default-report.json"
echo "default scenario: OK (report in $target_dir/default-report.json)"
