# Shared helpers for the tests/cluster scripts. Source it; do not execute.
# shellcheck source-path=SCRIPTDIR
# shellcheck shell=bash

RB_CLUSTER_HOME="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$RB_CLUSTER_HOME/versions.env"
# RB_K8S_VERSION picks another control-plane version than the default (e.g.
# RB_K8S_VERSION=$K8S_OLDEST_VERSION for the compatibility subset); it needs its wrapper
# module k8s/<version>/ (gen-replaces.sh <version>).
K8S_DEFAULT_VERSION="$K8S_VERSION"
K8S_VERSION="${RB_K8S_VERSION:-$K8S_VERSION}"
# The wrapper Go module the Kubernetes binaries of K8S_VERSION are built from.
K8S_MODDIR="$RB_CLUSTER_HOME/k8s/$K8S_VERSION"

RB_CACHE="${RUST_BATCH_CACHE:-${HOME:?HOME is not set}/.cache/rust-batch}"
K8S_BIN_DIR="$RB_CACHE/bin/k8s-$K8S_VERSION"
# RB_K8S_COMPAT=1: a compatibility control plane (tests/run.sh's subset on the oldest
# version): only kube-apiserver is built for K8S_VERSION, etcd and kubectl are the default
# version's when it is built (copied; any etcd 3.5+ serves 1.33 to 1.37, and the harness's
# kubectl only applies manifests and reads objects), and no kube-controller-manager runs (the
# subset binds no PersistentVolumes). On a fresh 2-core machine this saves building etcd,
# kubectl and kube-controller-manager a second time, many minutes of the test command.
RB_K8S_COMPAT="${RB_K8S_COMPAT:-0}"
KWOK_BIN_DIR="$RB_CACHE/bin/kwok-$KWOK_VERSION"
# shellcheck disable=SC2034  # used by the scripts that source this file
K8S_MINOR="${K8S_VERSION#v1.}"; K8S_MINOR="${K8S_MINOR%%.*}"

rb_log() { echo "[$(basename "$0") $(date +%H:%M:%S)] $*" >&2; }
rb_die() { echo "[$(basename "$0")] ERROR: $*" >&2; exit 1; }
# Takes the lock file $1 on fd 9 for the rest of the script (one build at a time per
# cache dir; a second caller waits, then finds the outputs in place).
rb_lock() {
  command -v flock >/dev/null || rb_die "flock not found (package util-linux)"
  exec 9>"$1"
  if ! flock -n 9; then
    rb_log "another build holds $1; waiting for it"
    flock 9
  fi
}

# Binaries the harness needs, with the directory each lives in.
rb_binaries_present() {
  local f kcm=("$K8S_BIN_DIR/kube-controller-manager")
  [[ "$RB_K8S_COMPAT" == 1 ]] && kcm=()
  for f in "$K8S_BIN_DIR/kube-apiserver" "$K8S_BIN_DIR/etcd" "$K8S_BIN_DIR/kubectl" \
    "${kcm[@]}" "$KWOK_BIN_DIR/kwok"; do
    [[ -x "$f" ]] || return 1
  done
}

# The -ldflags of every Kubernetes binary built from the wrapper module k8s/: /version (and
# `--version`) report $K8S_VERSION.
rb_k8s_ldflags() {
  local pkg flags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR"
    flags+=" -X $pkg.gitTreeState=clean"
  done
  echo "$flags"
}

# Volcano above v1.10.0 is not served by the Go module proxy (403), and its go.mod replaces
# volcano.sh/apis with ./staging/src/volcano.sh/apis, which a module zip would not hold
# anyway: its source comes from a git snapshot of github.com/volcano-sh/volcano (bare or not,
# holding the tag), $VOLCANO_SRC_REPO, by default /work/.mirror/volcano-sh+volcano/repo.
VOLCANO_SRC_REPO="${VOLCANO_SRC_REPO:-/work/.mirror/volcano-sh+volcano/repo}"

# rb_volcano_source_check VERSION: fails, saying how to get it, unless Volcano's source at tag
# VERSION is extracted already or the snapshot holds the tag (tests/run.sh asks first, so a
# machine without it learns so at once rather than once the control plane is built).
rb_volcano_source_check() {
  [[ -f "$RB_CACHE/src/volcano-$1/.rb-commit" ]] && return 0
  command -v git >/dev/null || rb_die "git is not in PATH (needed to read Volcano's source snapshot)"
  git -C "$VOLCANO_SRC_REPO" rev-parse --verify -q "refs/tags/$1^{commit}" >/dev/null 2>&1 \
    || rb_die "no Volcano source snapshot with tag $1 at $VOLCANO_SRC_REPO. Get one with" \
      "'git clone --bare https://github.com/volcano-sh/volcano.git <dir>' (or fetch a snapshot" \
      "of github:volcano-sh/volcano) and set VOLCANO_SRC_REPO=<dir>"
}

# rb_volcano_source VERSION: prints the directory holding Volcano's source at tag VERSION,
# extracted once (`git archive`) into $RB_CACHE/src/volcano-VERSION/: a temp dir renamed into
# place under a lock, so a killed extraction never leaves half a tree. .rb-commit and
# .rb-built record the tag's commit and its time (Volcano's Makefile stamps both).
rb_volcano_source() {
  local version="$1" src="$RB_CACHE/src/volcano-$1"
  if [[ ! -f "$src/.rb-commit" ]]; then
    local commit
    rb_volcano_source_check "$version"
    commit="$(git -C "$VOLCANO_SRC_REPO" rev-parse --verify -q "refs/tags/$version^{commit}")"
    mkdir -p "$RB_CACHE/src"
    (
      rb_lock "$RB_CACHE/.extract-volcano-$version.lock"
      [[ -f "$src/.rb-commit" ]] && exit 0
      local tmp="$src.tmp.$$"
      rm -rf "$tmp"; mkdir -p "$tmp"
      rb_log "extracting Volcano $version ($commit) from $VOLCANO_SRC_REPO into $src"
      git -C "$VOLCANO_SRC_REPO" archive "$commit" | tar -x -C "$tmp" \
        || { rm -rf "$tmp"; rb_die "git archive $version from $VOLCANO_SRC_REPO failed"; }
      [[ -f "$tmp/go.mod" ]] || { rm -rf "$tmp"; rb_die "$version from $VOLCANO_SRC_REPO has no go.mod"; }
      echo "$commit" >"$tmp/.rb-commit"
      git -C "$VOLCANO_SRC_REPO" log -1 --format=%cI "$commit" >"$tmp/.rb-built" 2>/dev/null \
        || echo unknown >"$tmp/.rb-built"
      rm -rf "$src"; mv "$tmp" "$src"
    ) || exit 1
  fi
  echo "$src"
}

# rb_volcano_ldflags SRC VERSION: the -ldflags Volcano's Makefile (Makefile.def) builds with.
rb_volcano_ldflags() {
  local flags="-s -w -X volcano.sh/volcano/pkg/version.Version=$2"
  flags+=" -X volcano.sh/volcano/pkg/version.GitSHA=$(cat "$1/.rb-commit")"
  flags+=" -X volcano.sh/volcano/pkg/version.Built=$(cat "$1/.rb-built" 2>/dev/null || echo unknown)"
  echo "$flags"
}
