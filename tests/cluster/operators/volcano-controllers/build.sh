#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds (once) Volcano's controller-manager, vc-controller-manager (the vcjob controller,
# the queue controller and Volcano's other controllers), from Volcano's source at VERSION,
# cached in $RB_CACHE/bin/volcano-controllers-VERSION/. Last stdout lines: BIN=, SRC= (the
# extracted source: its CRDs are read from there), VERSION=.
#
# Version: v1.15.1, the newest Volcano release. The Go module proxy answers 403 for
# volcano.sh/volcano above v1.10.0, and Volcano's go.mod replaces volcano.sh/apis with
# ./staging/src/volcano.sh/apis, which a module zip would not hold anyway: the source comes
# from a git snapshot of github.com/volcano-sh/volcano (a bare or non-bare repository that
# holds the tag), $VOLCANO_SRC_REPO, by default /work/.mirror/volcano-sh+volcano/repo. The
# tag is extracted once (`git archive`) into $RB_CACHE/src/volcano-VERSION/ and built there
# with `go build -mod=mod` (its go.sum is complete; only the module proxy is needed).
set -euo pipefail
# shellcheck source=../lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib.sh"

VERSION=v1.15.1
NAME=volcano-controllers
BINARY=vc-controller-manager
REPO="${VOLCANO_SRC_REPO:-/work/.mirror/volcano-sh+volcano/repo}"
SRC="$RB_CACHE/src/volcano-$VERSION"

# The tag's commit in the snapshot, or a message saying how to get one.
tag_commit() {
  command -v git >/dev/null || rb_die "git is not in PATH (needed to read Volcano's source snapshot)"
  local commit
  if ! commit="$(git -C "$REPO" rev-parse --verify -q "refs/tags/$VERSION^{commit}" 2>/dev/null)"; then
    rb_die "no Volcano source snapshot with tag $VERSION at $REPO. Get one with" \
      "'git clone --bare https://github.com/volcano-sh/volcano.git <dir>' (or fetch a snapshot" \
      "of github:volcano-sh/volcano) and set VOLCANO_SRC_REPO=<dir> (default" \
      "/work/.mirror/volcano-sh+volcano/repo)"
  fi
  echo "$commit"
}

# $SRC: the tag's tree, extracted once. A temp dir renamed into place, under a lock, so a
# killed extraction never leaves half a tree; .rb-commit records which commit it holds.
extract_source() {
  [[ -f "$SRC/.rb-commit" ]] && return 0
  local commit
  commit="$(tag_commit)"
  mkdir -p "$RB_CACHE/src"
  rb_lock "$RB_CACHE/.extract-volcano-$VERSION.lock"
  [[ -f "$SRC/.rb-commit" ]] && return 0
  local tmp="$SRC.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  rb_log "extracting Volcano $VERSION ($commit) from $REPO into $SRC"
  git -C "$REPO" archive "$commit" | tar -x -C "$tmp" \
    || { rm -rf "$tmp"; rb_die "git archive $VERSION from $REPO failed"; }
  [[ -f "$tmp/cmd/controller-manager/main.go" ]] \
    || { rm -rf "$tmp"; rb_die "$VERSION from $REPO has no cmd/controller-manager"; }
  echo "$commit" >"$tmp/.rb-commit"
  rm -rf "$SRC"; mv "$tmp" "$SRC"
}

# Built as Volcano's Makefile builds it (Makefile.def's LD_FLAGS: version, commit, date;
# CGO off as its `vc-controller-manager` target), inside the extracted tree.
build_controller_manager() {
  local tmp="$1" commit built
  commit="$(cat "$SRC/.rb-commit")"
  built="$(git -C "$REPO" log -1 --format=%cI "$commit" 2>/dev/null || echo unknown)"
  local ldflags="-s -w -X volcano.sh/volcano/pkg/version.Version=$VERSION"
  ldflags+=" -X volcano.sh/volcano/pkg/version.GitSHA=$commit"
  ldflags+=" -X volcano.sh/volcano/pkg/version.Built=$built"
  (cd "$SRC" && CGO_ENABLED=0 nice -n 10 go build -mod=mod -trimpath -ldflags "$ldflags" \
    -o "$tmp/$BINARY" ./cmd/controller-manager)
}

extract_source
bin="$(rb_cached_file "$NAME" "$VERSION" "$BINARY" "$BINARY from Volcano's source" build_controller_manager)"
rb_operator_report "$bin" "$SRC" "$VERSION"
