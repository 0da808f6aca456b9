#!/usr/bin/env bash
# The one command that runs every test: unit, property, simulator scenario and end-to-end
# tests against a real control plane (kube-apiserver + etcd + kwok, built from Go modules by
# tests/cluster/build.sh and cached by version outside the tree; the default Kubernetes
# version, then a compatibility subset on the oldest supported one), plus the Helm chart's (helm
# from tests/cluster/build-helm.sh, cached too), the static binary's in an empty root, the docs
# book's build (docs/build.sh) and links (tests/offline/docs_links.rs), and the code's hygiene
# (tests/hygiene.sh: fmt, clippy, cargo-deny). A fresh machine needs only the Rust and Go
# toolchains; its first run builds every component (docs/src/testing.md, "How long it takes").
#
# On a fresh 2-core machine the run is CPU-bound, so the order is by what the e2e phase waits
# for. At full priority: the default control plane, the operators, helm and the test build
# (with clippy linting the workspace as it compiles). At nice 19, started at once but running
# mostly while the e2e tests wait on the API server: the oldest control plane (needed only by
# the compatibility subset at the end), the static binary, the docs book and cargo-deny.
set -euo pipefail
cd "$(dirname "$0")/.."

# One build per run: incremental caches would only cost time and disk.
export CARGO_INCREMENTAL=0
# Clippy lints the workspace's crates while they compile for the tests, as `cargo clippy --
# -D warnings` would (cargo-clippy sets these same two variables and runs `cargo check`):
# the dependencies are compiled once, not once for the tests and once more for clippy.
# Every cargo command below inherits them, so none rebuilds what another built.
RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
[[ -x "$RUSTC_WORKSPACE_WRAPPER" ]] || { echo "clippy-driver not found: rustup component add clippy" >&2; exit 1; }
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

# Job control: each background job in a process group of its own (stopped with the run).
# Not a session of its own (setsid): with the kernel's autogroup scheduling, a session is a
# group that gets an equal share of the CPU whatever its processes' nice values.
set -m
declare -A job_pid job_log
# start NAME NICENESS COMMAND...: runs COMMAND in the background, its output in a log file.
start() {
  local name="$1" niceness="$2"
  shift 2
  job_log[$name]="$(mktemp -t "rb-$name.XXXXXX.log")"
  nice -n "$niceness" "$@" >"${job_log[$name]}" 2>&1 &
  job_pid[$name]=$!
  echo "==> $name: in the background (nice $niceness; log: ${job_log[$name]})"
}
# await NAME: waits for it; its failure stops the run with the end of its log.
await() {
  local name="$1"
  echo "==> waiting for $name"
  if ! wait "${job_pid[$name]}"; then
    tail -n 60 "${job_log[$name]}" >&2
    echo "$name failed (log above: ${job_log[$name]})" >&2
    exit 1
  fi
  unset "job_pid[$name]"
  tail -n 1 "${job_log[$name]}"
}
stop_jobs() {
  local pid
  for pid in "${job_pid[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
}
trap stop_jobs EXIT

echo "==> hygiene: cargo fmt --check (clippy runs with the test build, cargo-deny in the background)"
tests/hygiene.sh fmt

oldest="$(sed -n 's/^K8S_OLDEST_VERSION=//p' tests/cluster/versions.env)"

# The one input no registry serves: Volcano's source (its vc-controller-manager, built with
# the operators). Checked now, not when the operators' build fails half an hour in.
(source tests/cluster/lib.sh && rb_volcano_source_check "$VOLCANO_VERSION")

# What the e2e phase needs, at full priority (the Go builds lower themselves to nice 10, so the
# test build leads).
start control-plane 0 tests/cluster/build.sh
start operators 0 tests/cluster/build-operators.sh
start helm 0 tests/cluster/build-helm.sh
# Needed after the e2e phase, or by one e2e test (which waits for the static binary's build).
start static-binary 19 deploy/static-build.sh
start docs-book 19 docs/build.sh
start cargo-deny 19 tests/hygiene.sh deny

echo "==> building rust-batch and its tests, clippy -D warnings on the workspace's crates"
cargo test --all-targets --locked --no-run

await control-plane
# Needed by the compatibility subset at the end; it reuses the default control plane's etcd
# and kubectl (RB_K8S_COMPAT=1: only its kube-apiserver is built, tests/cluster/lib.sh).
start oldest-control-plane 19 env RB_K8S_COMPAT=1 RB_K8S_VERSION="$oldest" tests/cluster/build.sh
await operators
await helm

echo "==> every test, with a fresh control plane up (e2e tests fail without it; none skip)"
tests/cluster/with-cluster.sh cargo test --all-targets --locked --no-fail-fast

await oldest-control-plane
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

await static-binary
await docs-book
await cargo-deny

echo "==> the bundled default scenario must run with both invariants at 0"
# The binary the tests were built with: `cargo run` would build the crate once more without
# the dev-dependencies' features (disk and minutes for nothing).
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
"$target_dir/debug/rust-batch" simulate --output json > "$target_dir/default-report.json"
echo "default scenario: OK (report in $target_dir/default-report.json)"
