#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds (once) the Kubeflow MPI operator v2 (MPIJob kubeflow.org/v2beta1; Volcano gang mode
# with --gang-scheduling=volcano) from the Go module proxy, cached in
# $RB_CACHE/bin/mpi-operator-VERSION/. Last stdout lines: BIN=, SRC=, VERSION=.
#
# Version: v0.8.0, the newest release on the module proxy (v0.6.0, v0.7.0 and v0.8.0 are
# served; the module's version list itself answers 403). Its go.mod has no replace lines,
# so `go install pkg@version` builds it without a wrapper module.
set -euo pipefail
# shellcheck source=../lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib.sh"

VERSION=v0.8.0
MODULE=github.com/kubeflow/mpi-operator

bin="$(rb_go_install_cached mpi-operator "$VERSION" "$MODULE/cmd/mpi-operator")"
src="$(rb_module_dir "$MODULE@$VERSION")"
rb_operator_report "$bin" "$src" "$VERSION"
