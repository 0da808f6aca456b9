#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build (once) the peers the benchmark compares rust-batch with (benches/peers.rs); the test
# command never builds them:
#   kube-scheduler  k8s.io/kubernetes/cmd/kube-scheduler from the wrapper module k8s/ (the
#                   control plane's: same version, same -ldflags as build.sh)
#                   -> $RB_CACHE/bin/kube-scheduler-<K8S_VERSION>/kube-scheduler
#   vc-scheduler    ./cmd/scheduler of Volcano's source at VOLCANO_VERSION, from the git
#                   snapshot lib.sh's rb_volcano_source extracts (the module proxy refuses
#                   volcano.sh/volcano above v1.10.0), `go build -mod=mod` there
#                   -> $RB_CACHE/bin/volcano-<VOLCANO_VERSION>/vc-scheduler
# Like build.sh: needs Go and the module proxy (and Volcano's source snapshot), returns at
# once when cached, builds in a temp dir and renames (a
# killed build never leaves half a cache), a flock serialises concurrent callers.
# The last stdout lines:
#   KUBE_SCHEDULER=<binary>
#   VOLCANO_SCHEDULER=<binary>
#   VOLCANO_SRC=<Volcano's extracted source: CRDs, default config>
set -euo pipefail

# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

KUBE_SCHEDULER_DIR="$RB_CACHE/bin/kube-scheduler-$K8S_VERSION"
VOLCANO_DIR="$RB_CACHE/bin/volcano-$VOLCANO_VERSION"

# build NAME OUT_DIR MODDIR PKG LDFLAGS [MODFLAG]: go build PKG inside MODDIR into
# OUT_DIR/NAME (-mod=readonly unless MODFLAG says otherwise).
build() {
  local name="$1" out="$2" moddir="$3" pkg="$4" ldflags="$5" mod="${6:--mod=readonly}"
  [[ -x "$out/$name" ]] && return 0
  [[ -f "$moddir/go.mod" && -f "$moddir/go.sum" ]] || rb_die "$moddir/go.mod or go.sum missing"
  local t0=$SECONDS tmp="$out.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  rb_log "go build $pkg -> $out/$name"
  (cd "$moddir" && CGO_ENABLED=0 nice -n 10 go build "$mod" -trimpath -ldflags "$ldflags" -o "$tmp/$name" "$pkg") \
    || { rm -rf "$tmp"; rb_die "building $name ($pkg) failed; see the go output above"; }
  rm -rf "$out"; mv "$tmp" "$out"
  rb_log "built $name in $((SECONDS - t0))s"
}

if [[ ! -x "$KUBE_SCHEDULER_DIR/kube-scheduler" || ! -x "$VOLCANO_DIR/vc-scheduler" ]]; then
  command -v go >/dev/null || rb_die "go is not in PATH: install Go >= 1.24 (the module proxy must be reachable)"
  mkdir -p "$RB_CACHE/bin"
  rb_lock "$RB_CACHE/.build-peers.lock"
  grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$RB_CLUSTER_HOME/k8s/go.mod" \
    || rb_die "k8s/go.mod does not require k8s.io/kubernetes $K8S_VERSION: run gen-replaces.sh"
  build kube-scheduler "$KUBE_SCHEDULER_DIR" "$RB_CLUSTER_HOME/k8s" \
    k8s.io/kubernetes/cmd/kube-scheduler "$(rb_k8s_ldflags)"
  volcano_src="$(rb_volcano_source "$VOLCANO_VERSION")"
  build vc-scheduler "$VOLCANO_DIR" "$volcano_src" ./cmd/scheduler \
    "$(rb_volcano_ldflags "$volcano_src" "$VOLCANO_VERSION")" -mod=mod
fi

echo "KUBE_SCHEDULER=$KUBE_SCHEDULER_DIR/kube-scheduler"
echo "VOLCANO_SCHEDULER=$VOLCANO_DIR/vc-scheduler"
echo "VOLCANO_SRC=$(rb_volcano_source "$VOLCANO_VERSION")"
