#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build (once) the control-plane binaries used by the rust-batch cluster tests:
#   kube-apiserver, kubectl, etcd  -> $RB_CACHE/bin/k8s-<K8S_VERSION>/
#   kube-controller-manager        -> the same dir (added to an existing one)
#   kwok                           -> $RB_CACHE/bin/kwok-<KWOK_VERSION>/
# K8S_VERSION is the default of versions.env, or RB_K8S_VERSION (e.g. the oldest supported
# version, K8S_OLDEST_VERSION); each version builds from its wrapper module k8s/<version>/.
# RB_CACHE = ${RUST_BATCH_CACHE:-$HOME/.cache/rust-batch}. Needs only Go and
# the Go module proxy. Returns at once when the binaries are already cached.
# Builds of different versions may run at the same time (one lock per version, one for kwok).
# On success the last two lines on stdout are K8S_BIN_DIR=... and KWOK_BIN_DIR=...
set -euo pipefail

# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

print_dirs() {
  echo "K8S_BIN_DIR=$K8S_BIN_DIR"
  echo "KWOK_BIN_DIR=$KWOK_BIN_DIR"
}

if rb_binaries_present; then
  rb_log "binaries already cached"
  print_dirs
  exit 0
fi

command -v go >/dev/null || rb_die "go is not in PATH: install Go >= 1.26 (or >= 1.21, which fetches 1.26 from the module proxy)"
mkdir -p "$RB_CACHE/bin"
rb_lock "$RB_CACHE/.build-$K8S_VERSION.lock"
if rb_binaries_present; then
  rb_log "binaries were built by a concurrent run"
  print_dirs
  exit 0
fi

export CGO_ENABLED=0
# Keep the 2-core machine usable for everyone else.
NICE=(nice -n 10)
start=$SECONDS

moddir="$K8S_MODDIR"
# Kubernetes 1.37 and kwok v0.8.0 need Go >= 1.26.0 (their go directives). An older local Go
# fetches that toolchain from the module proxy with GOTOOLCHAIN=auto, set here unless the
# environment says otherwise (a go.env with GOTOOLCHAIN=local would refuse instead).
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
ldflags="$(rb_k8s_ldflags)"

if [[ ! -x "$K8S_BIN_DIR/kube-apiserver" || ! -x "$K8S_BIN_DIR/etcd" || ! -x "$K8S_BIN_DIR/kubectl" ]]; then
  [[ -f "$moddir/go.mod" && -f "$moddir/go.sum" ]] || rb_die "$moddir/go.mod or go.sum missing (run gen-replaces.sh $K8S_VERSION)"
  grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$moddir/go.mod" \
    || rb_die "$moddir/go.mod does not require k8s.io/kubernetes $K8S_VERSION: run gen-replaces.sh $K8S_VERSION"
  tmp="$K8S_BIN_DIR.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  rb_log "building Kubernetes $K8S_VERSION binaries into $K8S_BIN_DIR (first build takes many minutes on 2 cores)"
  specs=(etcd=go.etcd.io/etcd/server/v3 kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kubectl=k8s.io/kubernetes/cmd/kubectl)
  # A compatibility control plane takes the default version's etcd and kubectl when they are
  # built: what it tests is the API server of the oldest version; etcd is version-independent
  # storage, and the harness's kubectl only applies manifests and reads objects.
  if [[ "$RB_K8S_COMPAT" == 1 ]]; then
    default_dir="$RB_CACHE/bin/k8s-$K8S_DEFAULT_VERSION"
    kept=()
    for spec in "${specs[@]}"; do
      name="${spec%%=*}"
      if [[ "$name" != kube-apiserver && -x "$default_dir/$name" ]]; then
        cp "$default_dir/$name" "$tmp/$name"
        rb_log "$name: the $K8S_DEFAULT_VERSION control plane's ($default_dir/$name)"
      else
        kept+=("$spec")
      fi
    done
    specs=("${kept[@]}")
  fi
  # name=package
  for spec in "${specs[@]}"; do
    name="${spec%%=*}" pkg="${spec#*=}"
    t0=$SECONDS
    rb_log "go build $pkg -> $name"
    (cd "$moddir" && "${NICE[@]}" go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/$name" "$pkg") \
      || rb_die "building $name ($pkg) failed; see the go output above"
    rb_log "built $name in $((SECONDS - t0))s"
  done
  "$tmp/kube-apiserver" --version >&2 || rb_die "built kube-apiserver does not run"
  rm -rf "$K8S_BIN_DIR"
  mv "$tmp" "$K8S_BIN_DIR"
  trap - EXIT
fi

# The controller-manager runs only the PersistentVolume binder in tests (claims and
# volumes bind as on a real cluster); built on its own, so a cache made before it was
# needed only gains this binary. A compatibility control plane (RB_K8S_COMPAT=1) has none.
if [[ "$RB_K8S_COMPAT" != 1 && ! -x "$K8S_BIN_DIR/kube-controller-manager" ]]; then
  [[ -f "$moddir/go.mod" && -f "$moddir/go.sum" ]] || rb_die "$moddir/go.mod or go.sum missing (run gen-replaces.sh $K8S_VERSION)"
  t0=$SECONDS
  tmp="$K8S_BIN_DIR/kube-controller-manager.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  rb_log "go build k8s.io/kubernetes/cmd/kube-controller-manager -> kube-controller-manager"
  (cd "$moddir" && "${NICE[@]}" go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp" k8s.io/kubernetes/cmd/kube-controller-manager) \
    || rb_die "building kube-controller-manager failed; see the go output above"
  mv "$tmp" "$K8S_BIN_DIR/kube-controller-manager"
  trap - EXIT
  rb_log "built kube-controller-manager in $((SECONDS - t0))s"
fi

# kwok is shared by every Kubernetes version: its own lock (fd 8), so the builds of two
# versions started at once build it once.
if [[ ! -x "$KWOK_BIN_DIR/kwok" ]]; then
  exec 8>"$RB_CACHE/.build-kwok-$KWOK_VERSION.lock"
  flock 8
fi
if [[ ! -x "$KWOK_BIN_DIR/kwok" ]]; then
  tmp="$KWOK_BIN_DIR.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  t0=$SECONDS
  rb_log "go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION -> $KWOK_BIN_DIR"
  # `go install pkg@version` ignores the current module; GOFLAGS like -mod would be rejected.
  GOFLAGS="" GOBIN="$tmp" "${NICE[@]}" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
    || rb_die "go install kwok@$KWOK_VERSION failed; see the go output above"
  rb_log "built kwok in $((SECONDS - t0))s"
  rm -rf "$KWOK_BIN_DIR"
  mv "$tmp" "$KWOK_BIN_DIR"
  trap - EXIT
fi

rb_binaries_present || rb_die "binaries missing after build (bug in build.sh)"
rb_log "done in $((SECONDS - start))s"
print_dirs
