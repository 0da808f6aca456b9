#!/usr/bin/env bash
# Installs a Rust tool from crates.io once and caches it by version; prints the binary's path.
#
#   tests/tools/cargo-install-cached.sh CRATE VERSION [BIN] [-- CARGO_INSTALL_ARGS...]
#
# The binary lands in $RUST_BATCH_CACHE/bin/CRATE-VERSION/BIN (default ~/.cache/rust-batch,
# as tests/cluster/lib.sh), built in its own target dir (never the project's) at low
# priority, with the crate's own lock file. One install at a time per cache dir: a second
# caller waits, then finds it in place; a killed install never leaves half a cache.
set -euo pipefail

(( $# >= 2 )) || { echo "usage: cargo-install-cached.sh CRATE VERSION [BIN] [-- ARGS...]" >&2; exit 2; }
crate="$1" version="$2"
shift 2
bin="$crate"
if (( $# > 0 )) && [[ "$1" != "--" ]]; then bin="$1"; shift; fi
[[ "${1:-}" == "--" ]] && shift
cache="${RUST_BATCH_CACHE:-${HOME:?HOME is not set}/.cache/rust-batch}"
bin_dir="$cache/bin/$crate-$version"

if [[ ! -x "$bin_dir/$bin" ]]; then
  mkdir -p "$cache/bin"
  command -v flock >/dev/null || { echo "flock not found (package util-linux)" >&2; exit 1; }
  exec 9>"$cache/.build-$crate.lock"
  flock 9
  if [[ ! -x "$bin_dir/$bin" ]]; then
    echo "[cargo-install-cached.sh $(date +%H:%M:%S)] installing $crate $version into $bin_dir (once; a few minutes on 2 cores)" >&2
    tmp="$(mktemp -d "$cache/bin/.$crate-$version.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # A third-party tool builds with plain rustc, whatever wrapper the caller's build uses
    # (tests/run.sh lints its own crates with clippy-driver).
    env -u RUSTC_WORKSPACE_WRAPPER -u RUSTC_WRAPPER -u CLIPPY_ARGS -u RUSTFLAGS \
      CARGO_TARGET_DIR="$tmp/target" CARGO_INCREMENTAL=0 nice -n 10 cargo install "$crate" \
      --version "$version" --locked --root "$tmp/root" --quiet "$@"
    mkdir -p "$tmp/out"
    mv "$tmp/root/bin/$bin" "$tmp/out/$bin"
    rm -rf "$bin_dir"
    mv "$tmp/out" "$bin_dir"
    rm -rf "$tmp"
    trap - EXIT
  fi
  exec 9>&-
fi
echo "$bin_dir/$bin"
