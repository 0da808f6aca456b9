#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds (once) the Kubeflow MPI operator v2 (MPIJob kubeflow.org/v2beta1; Volcano gang mode
# with --gang-scheduling=volcano) from the Go module proxy, cached in
# $RB_CACHE/bin/mpi-operator-VERSION/. Last stdout lines: BIN=, SRC=, VERSION=.
#
# Version: v0.8.0, the newest release on the module proxy (v0.6.0, v0.7.0 and v0.8.0 are
# served). Its go.mod has no replace lines, but `go install pkg@version` still fails: it
# reads the module's version list to check for a deprecation notice, and the proxy answers
# 403 for that list. So it builds inside the wrapper module module/ (go.mod requiring the
# release, go.sum pinned; the resulting versions are exactly those of its own go.mod).
# After changing VERSION: edit module/go.mod, then `go mod tidy` there.
set -euo pipefail
# shellcheck source=../lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib.sh"

VERSION=v0.8.0
MODULE=github.com/kubeflow/mpi-operator
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

grep -q "^require $MODULE $VERSION\$" "$here/module/go.mod" \
  || rb_die "module/go.mod does not require $MODULE $VERSION: edit it and run go mod tidy there"
bin="$(rb_go_build_cached mpi-operator "$VERSION" "$here/module" "$MODULE/cmd/mpi-operator")"
src="$(rb_module_dir "$MODULE@$VERSION")"
rb_operator_report "$bin" "$src" "$VERSION"
