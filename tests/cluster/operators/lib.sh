# Shared by tests/cluster/operators/*/build.sh. Source it; do not execute.
# shellcheck source-path=SCRIPTDIR
# shellcheck shell=bash
#
# Each operators/NAME/build.sh builds one real operator from Go modules (the Go module
# proxy; Volcano's controllers from a git snapshot of its source, whose dependencies come
# from the proxy), caches it by version in $RB_CACHE/bin/NAME-VERSION/ and prints, as its
# last lines on stdout:
#   BIN=<the operator's binary>
#   SRC=<the operator's source (the Go module cache, or the extracted snapshot): CRDs and
#        RBAC are read from there>
#   VERSION=<the version built>
# An up-to-date cache answers at once. tests/e2e/common/operators.rs runs the script and reads
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

# rb_cached_binary NAME VERSION WHAT BUILD_FN [ARGS...]: $RB_CACHE/bin/NAME-VERSION/NAME,
# made once by `BUILD_FN TMPDIR ARGS...` (which must leave TMPDIR/NAME). A lock keeps one
# build per binary; the directory appears only once complete, so a killed build never
# leaves half a cache. Prints the binary's path.
rb_cached_binary() {
  local name="$1"
  shift
  rb_cached_file "$name" "$1" "$name" "${@:2}"
}

# rb_cached_file NAME VERSION FILE WHAT BUILD_FN [ARGS...]: as rb_cached_binary, for a
# binary named FILE (not NAME) in $RB_CACHE/bin/NAME-VERSION/.
rb_cached_file() {
  local name="$1" version="$2" file="$3" what="$4" build_fn="$5"
  shift 5
  local out="$RB_CACHE/bin/$name-$version"
  if [[ ! -x "$out/$file" ]]; then
    command -v go >/dev/null || rb_die "go is not in PATH: install Go (the module proxy must be reachable)"
    mkdir -p "$RB_CACHE/bin"
    rb_lock "$RB_CACHE/.build-$name.lock"
    if [[ ! -x "$out/$file" ]]; then
      local t0=$SECONDS tmp="$out.tmp.$$"
      rm -rf "$tmp"; mkdir -p "$tmp"
      rb_log "building $name $version ($what) into $out"
      "$build_fn" "$tmp" "$@" || { rm -rf "$tmp"; rb_die "building $name $version ($what) failed; see the go output above"; }
      [[ -x "$tmp/$file" ]] || { rm -rf "$tmp"; rb_die "building $name $version left no $tmp/$file"; }
      rm -rf "$out"; mv "$tmp" "$out"
      rb_log "built $name $version in $((SECONDS - t0))s"
    fi
  fi
  echo "$out/$file"
}

# rb_go_build_cached NAME VERSION MODDIR PKG: `go build PKG` inside the wrapper module
# MODDIR (its go.mod requires the operator at VERSION with the operator's own replace lines,
# which `go install pkg@version` refuses) into $RB_CACHE/bin/NAME-VERSION/NAME.
rb_go_build_cached() {
  rb_cached_binary "$1" "$2" "$4" _rb_go_build_in "$1" "$3" "$4"
}
_rb_go_build_in() {
  local tmp="$1" name="$2" moddir="$3" pkg="$4"
  (cd "$moddir" && CGO_ENABLED=0 nice -n 10 go build -mod=mod -trimpath -ldflags "-s -w" -o "$tmp/$name" "$pkg")
}

# rb_go_install_cached NAME VERSION PKG: `go install PKG@VERSION` (for an operator whose go.mod
# has no replace lines, so no wrapper module is needed: its own go.mod and go.sum pin every
# dependency) into $RB_CACHE/bin/NAME-VERSION/NAME.
rb_go_install_cached() {
  rb_cached_binary "$1" "$2" "$3@$2" _rb_go_install_in "$1" "$3" "$2"
}
_rb_go_install_in() {
  local tmp="$1" name="$2" pkg="$3" version="$4"
  # `go install pkg@version` ignores any current module; GOFLAGS like -mod would be
  # rejected. The binary is named after the package's last path element.
  (cd /tmp && CGO_ENABLED=0 GOFLAGS="" GOBIN="$tmp" nice -n 10 \
    go install -trimpath -ldflags "-s -w" "$pkg@$version") || return 1
  local installed
  installed="$tmp/$(basename "$pkg")"
  [[ "$installed" == "$tmp/$name" || ! -x "$installed" ]] || mv "$installed" "$tmp/$name"
}
