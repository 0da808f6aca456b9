#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build (once) the peers the benchmark compares rust-batch with (benches/peers.rs); the test
# command never builds them:
#   kube-scheduler  k8s.io/kubernetes/cmd/kube-scheduler from the wrapper module
#                   k8s/<K8S_VERSION>/ (the control plane's: same version, same -ldflags as
#                   build.sh)
#                   -> $RB_CACHE/bin/kube-scheduler-<K8S_VERSION>/kube-scheduler
#   vc-scheduler    volcano.sh/volcano/cmd/scheduler from the wrapper module volcano/ (every
#                   replace line of Volcano's go.mod; gen-volcano.sh writes it)
#                   -> $RB_CACHE/bin/volcano-<VOLCANO_VERSION>/vc-scheduler
# Like build.sh: needs only Go and the module proxy, `-mod=readonly` (the checked-in go.sum
# must be complete), returns at once when cached, builds in a temp dir and renames (a
# killed build never leaves half a cache), a flock serialises concurrent callers.
# The last stdout lines:
#   KUBE_SCHEDULER=<binary>
#   VOLCANO_SCHEDULER=<binary>
#   VOLCANO_SRC=<volcano.sh/volcano's source in the Go module cache: CRDs, default config>
set -euo pipefail

# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

KUBE_SCHEDULER_DIR="$RB_CACHE/bin/kube-scheduler-$K8S_VERSION"
VOLCANO_DIR="$RB_CACHE/bin/volcano-$VOLCANO_VERSION"
volcano_mod="$RB_CLUSTER_HOME/volcano"

# volcano_src: the module's source directory (downloaded once, read-only in the module cache).
volcano_src() {
  local dir
  dir="$(cd "$volcano_mod" && GOFLAGS=-mod=readonly go mod download -json volcano.sh/volcano \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -n "$dir" && -f "$dir/go.mod" ]] || rb_die "go mod download volcano.sh/volcano gave no source directory"
  echo "$dir"
}

# build NAME OUT_DIR MODDIR PKG LDFLAGS: go build PKG inside MODDIR into OUT_DIR/NAME.
build() {
  local name="$1" out="$2" moddir="$3" pkg="$4" ldflags="$5"
  [[ -x "$out/$name" ]] && return 0
  [[ -f "$moddir/go.mod" && -f "$moddir/go.sum" ]] || rb_die "$moddir/go.mod or go.sum missing"
  local t0=$SECONDS tmp="$out.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  rb_log "go build $pkg -> $out/$name"
  (cd "$moddir" && CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/$name" "$pkg") \
    || { rm -rf "$tmp"; rb_die "building $name ($pkg) failed; see the go output above"; }
  rm -rf "$out"; mv "$tmp" "$out"
  rb_log "built $name in $((SECONDS - t0))s"
}

if [[ ! -x "$KUBE_SCHEDULER_DIR/kube-scheduler" || ! -x "$VOLCANO_DIR/vc-scheduler" ]]; then
  command -v go >/dev/null || rb_die "go is not in PATH: install Go >= 1.26 (or >= 1.21, which fetches 1.26 from the module proxy)"
  # An older local Go fetches the toolchain a go directive asks for (as build.sh).
  export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
  mkdir -p "$RB_CACHE/bin"
  rb_lock "$RB_CACHE/.build-peers.lock"
  grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$K8S_MODDIR/go.mod" \
    || rb_die "$K8S_MODDIR/go.mod does not require k8s.io/kubernetes $K8S_VERSION: run gen-replaces.sh $K8S_VERSION"
  grep -q "^require volcano.sh/volcano $VOLCANO_VERSION\$" "$volcano_mod/go.mod" \
    || rb_die "volcano/go.mod does not require volcano.sh/volcano $VOLCANO_VERSION: run gen-volcano.sh"
  build kube-scheduler "$KUBE_SCHEDULER_DIR" "$K8S_MODDIR" \
    k8s.io/kubernetes/cmd/kube-scheduler "$(rb_k8s_ldflags)"
  # The variables Volcano's Makefile sets (Makefile.def): GitSHA and Built are the tag's
  # commit and time as the module proxy reports them (the download's .info file).
  info="$(cd "$volcano_mod" && GOFLAGS=-mod=readonly go mod download -json volcano.sh/volcano \
    | sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p')"
  sha="$(sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p' "$info" 2>/dev/null || true)"
  built="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info" 2>/dev/null || true)"
  vldflags="-s -w -X volcano.sh/volcano/pkg/version.Version=$VOLCANO_VERSION"
  vldflags+=" -X volcano.sh/volcano/pkg/version.GitSHA=${sha:-unknown}"
  vldflags+=" -X volcano.sh/volcano/pkg/version.Built=${built:-unknown}"
  build vc-scheduler "$VOLCANO_DIR" "$volcano_mod" volcano.sh/volcano/cmd/scheduler "$vldflags"
fi

echo "KUBE_SCHEDULER=$KUBE_SCHEDULER_DIR/kube-scheduler"
echo "VOLCANO_SCHEDULER=$VOLCANO_DIR/vc-scheduler"
echo "VOLCANO_SRC=$(volcano_src)"
