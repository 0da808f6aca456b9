# Shared by tests/cluster/operators/*/build.sh. Source it; do not execute.
# shellcheck source-path=SCRIPTDIR
# shellcheck shell=bash
#
# Each operators/NAME/build.sh builds one real operator from Go modules (the Go module
# proxy, nothing else), caches it by version in $RB_CACHE/bin/NAME-VERSION/ and prints, as
# its last lines on stdout:
#   BIN=<the operator's binary>
#   SRC=<the module's source in the Go module cache: CRDs and RBAC are read from there>
#   VERSION=<the version built>
# An up-to-date cache answers at once. tests/common/operators.rs runs the script and reads
# those lines, so a test finds its operator whether or not build-operators.sh ran first.

# shellcheck source=../lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib.sh"

# rb_module_dir MODULE@VERSION: the module's source directory (downloaded once into the Go
# module cache, read-only there).
rb_module_dir() {
  local dir
  dir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  [[ -n "$dir" && -d "$dir" ]] || rb_die "go mod download $1 gave no source directory"
  echo "$dir"
}

# rb_operator_report BIN SRC VERSION: the lines the Rust side reads.
rb_operator_report() {
  echo "BIN=$1"
  echo "SRC=$2"
  echo "VERSION=$3"
}

# rb_go_build_cached NAME VERSION MODDIR PKG: `go build PKG` inside the wrapper module
# MODDIR (its go.mod requires the operator at VERSION with the operator's own replace lines,
# which `go install pkg@version` refuses) into $RB_CACHE/bin/NAME-VERSION/NAME. A lock keeps
# one build per cache dir; the binary appears only once complete.
rb_go_build_cached() {
  local name="$1" version="$2" moddir="$3" pkg="$4"
  local out="$RB_CACHE/bin/$name-$version"
  if [[ ! -x "$out/$name" ]]; then
    command -v go >/dev/null || rb_die "go is not in PATH: install Go (the module proxy must be reachable)"
    mkdir -p "$RB_CACHE/bin"
    rb_lock "$RB_CACHE/.build-$name.lock"
    if [[ ! -x "$out/$name" ]]; then
      local t0=$SECONDS tmp="$out.tmp.$$"
      rm -rf "$tmp"; mkdir -p "$tmp"
      rb_log "building $name $version ($pkg) into $out"
      (cd "$moddir" && CGO_ENABLED=0 nice -n 10 go build -mod=mod -trimpath -ldflags "-s -w" -o "$tmp/$name" "$pkg") \
        || { rm -rf "$tmp"; rb_die "building $name $version ($pkg) failed; see the go output above"; }
      rm -rf "$out"; mv "$tmp" "$out"
      rb_log "built $name $version in $((SECONDS - t0))s"
    fi
  fi
  echo "$out/$name"
}

# rb_go_install_cached NAME VERSION PKG: `go install PKG@VERSION` (for an operator whose go.mod
# has no replace lines, so no wrapper module is needed: its own go.mod and go.sum pin every
# dependency) into $RB_CACHE/bin/NAME-VERSION/NAME. Locked and atomic like rb_go_build_cached.
rb_go_install_cached() {
  local name="$1" version="$2" pkg="$3"
  local out="$RB_CACHE/bin/$name-$version"
  if [[ ! -x "$out/$name" ]]; then
    command -v go >/dev/null || rb_die "go is not in PATH: install Go (the module proxy must be reachable)"
    mkdir -p "$RB_CACHE/bin"
    rb_lock "$RB_CACHE/.build-$name.lock"
    if [[ ! -x "$out/$name" ]]; then
      local t0=$SECONDS tmp="$out.tmp.$$"
      rm -rf "$tmp"; mkdir -p "$tmp"
      rb_log "go install $pkg@$version into $out"
      # `go install pkg@version` ignores any current module; GOFLAGS like -mod would be
      # rejected. The binary is named after the package's last path element.
      (cd /tmp && CGO_ENABLED=0 GOFLAGS="" GOBIN="$tmp" nice -n 10 \
        go install -trimpath -ldflags "-s -w" "$pkg@$version") \
        || { rm -rf "$tmp"; rb_die "go install $pkg@$version failed; see the go output above"; }
      local installed
      installed="$tmp/$(basename "$pkg")"
      [[ -x "$installed" ]] || { rm -rf "$tmp"; rb_die "go install $pkg@$version left no $installed"; }
      [[ "$installed" == "$tmp/$name" ]] || mv "$installed" "$tmp/$name"
      rm -rf "$out"; mv "$tmp" "$out"
      rb_log "built $name $version in $((SECONDS - t0))s"
    fi
  fi
  echo "$out/$name"
}
