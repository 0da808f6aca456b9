#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds (once) the Kubeflow training-operator (TFJob, PyTorchJob, ... controllers; Volcano
# gang mode with --gang-scheduler-name=volcano) from the Go module proxy, cached in
# $RB_CACHE/bin/training-operator-VERSION/. Last stdout lines: BIN=, SRC=, VERSION=.
#
# Version: v1.9.3, the newest release on the module proxy (v1.9.2 and v1.9.3 are served as
# versions of the repository's root module github.com/kubeflow/training-operator; the
# module path .../cmd/training-operator.v1 itself answers 403, it is a package of the root
# module). Its go.mod has no replace lines, so `go install pkg@version` builds it.
set -euo pipefail
# shellcheck source=../lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib.sh"

VERSION=v1.9.3
MODULE=github.com/kubeflow/training-operator

bin="$(rb_go_install_cached training-operator "$VERSION" "$MODULE/cmd/training-operator.v1")"
src="$(rb_module_dir "$MODULE@$VERSION")"
rb_operator_report "$bin" "$src" "$VERSION"
