#!/usr/bin/env bash
# Builds rust-batch as one statically linked executable (glibc with crt-static; rustls/ring
# need no system library) for the image (deploy/Containerfile) and the empty-root test.
#
#   deploy/static-build.sh             # dev profile, no debug info: what the tests run (faster)
#   deploy/static-build.sh --release   # the release profile: what an image should ship
#
# A separate target dir (target/static) keeps the host build's artifacts: crt-static changes
# every crate's flags, so sharing target/ would rebuild both on every switch. The binary ends
# up alone in target/static/image/ (the image's build context); the last stdout line is its path.
set -euo pipefail
cd "$(dirname "$0")/.."

# Run from a test, the environment holds the test's CARGO_MANIFEST_DIR, CARGO_PKG_*, ...;
# a build script that tracks one (ring's tracks CARGO_MANIFEST_DIR) would then rebuild part
# of the tree at every switch between a test and a shell.
while read -r var; do unset "$var"; done < <(compgen -e | grep -E '^CARGO_(MANIFEST_|PKG_|CRATE_|BIN_|PRIMARY_PACKAGE|TARGET_TMPDIR)' || true)

triple=x86_64-unknown-linux-gnu
profile=dev
dir=debug
if [[ "${1:-}" == --release ]]; then
  profile=release
  dir=release
fi
# --target makes RUSTFLAGS apply to the target only, not to build scripts and proc macros
# (which must stay dynamic to be loaded by rustc).
# getrandom_backend: the getrandom crate finds libc's getrandom(2) with dlsym, which a static
# binary cannot do, and then falls back to opening /dev/urandom: calling getrandom(2) directly
# keeps the binary free of any file, /dev included (found by the empty-root e2e test: rand's
# ThreadRng panicked there).
# No debug info and no incremental cache: the binary runs, nobody debugs it, and CI disk is
# short (that saves ~0.35 GB of target/static).
RUSTFLAGS='-C target-feature=+crt-static --cfg getrandom_backend="linux_getrandom"' \
  CARGO_PROFILE_DEV_DEBUG=false CARGO_INCREMENTAL=0 \
  cargo build --locked --bin rust-batch --profile "$profile" --target "$triple" \
  --target-dir target/static >&2
mkdir -p target/static/image
# Copied then renamed: a concurrent run or reader never sees half a binary.
cp "target/static/$triple/$dir/rust-batch" "target/static/image/.rust-batch.$$"
# The release profile keeps line tables (debug = 1) for profiling on a workstation; the
# image ships the symbols (readable backtraces) without them: 161 MB -> 28 MB.
if [[ "$profile" == release ]] && command -v strip >/dev/null; then
  strip --strip-debug "target/static/image/.rust-batch.$$"
fi
mv -f "target/static/image/.rust-batch.$$" target/static/image/rust-batch
echo "$PWD/target/static/image/rust-batch"
