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
# holds the tag), $VOLCANO_SRC_REPO (lib.sh's rb_volcano_source extracts the tag once into
# $RB_CACHE/src/volcano-VERSION/), built there with `go build -mod=mod` (its go.sum is
# complete; only the module proxy is needed).
set -euo pipefail
# shellcheck source=../lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib.sh"

VERSION=v1.15.1
NAME=volcano-controllers
BINARY=vc-controller-manager

# Built as Volcano's Makefile builds it (Makefile.def's LD_FLAGS: version, commit, date;
# CGO off as its `vc-controller-manager` target), inside the extracted tree.
build_controller_manager() {
  (cd "$SRC" && CGO_ENABLED=0 nice -n 10 go build -mod=mod -trimpath \
    -ldflags "$(rb_volcano_ldflags "$SRC" "$VERSION")" -o "$1/$BINARY" ./cmd/controller-manager)
}

SRC="$(rb_volcano_source "$VERSION")"
bin="$(rb_cached_file "$NAME" "$VERSION" "$BINARY" "$BINARY from Volcano's source" build_controller_manager)"
rb_operator_report "$bin" "$SRC" "$VERSION"
