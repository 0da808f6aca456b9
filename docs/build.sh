#!/usr/bin/env bash
# Builds the docs book (docs/src, mdBook) into target/book, or into the directory given:
#
#   docs/build.sh                 # → target/book/index.html
#   docs/build.sh /tmp/book       # → /tmp/book/index.html
#
# mdBook is installed on first use with `cargo install` from crates.io, without its
# default features (no `serve`/`watch` server, no search index: only what building a book
# needs), unoptimized (`--debug`: 55 s to build on 2 cores against 107 s optimized, and it
# renders this book in a second all the same), and cached by version
# (tests/tools/cargo-install-cached.sh). The book fails to
# build when SUMMARY.md names a page that does not exist (build.create-missing = false in
# docs/book.toml);
# tests/offline/docs_links.rs checks the links between pages and that every page is in SUMMARY.md.
set -euo pipefail

# The newest mdBook release; it needs Rust ≥ 1.88.
MDBOOK_VERSION=0.5.4

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/target/book}"

log() { echo "[docs/build.sh $(date +%H:%M:%S)] $*" >&2; }

mdbook="$("$root/tests/tools/cargo-install-cached.sh" mdbook "$MDBOOK_VERSION" -- --no-default-features --debug)"

# mdBook logs what it could not render as it wants (an unclosed HTML tag, say) as a
# warning and builds anyway; here a warning fails the build, as a broken link fails
# tests/offline/docs_links.rs.
build_log="$(mktemp)"
trap 'rm -f "$build_log"' EXIT
if ! "$mdbook" build "$root/docs" --dest-dir "$out" >"$build_log" 2>&1; then
  cat "$build_log" >&2
  echo "docs/build.sh: mdbook build failed" >&2
  exit 1
fi
if grep -E '(^| )(WARN|ERROR) ' "$build_log" >&2; then
  echo "docs/build.sh: mdbook warned (above); fix the page" >&2
  exit 1
fi
log "book built: $out/index.html"
