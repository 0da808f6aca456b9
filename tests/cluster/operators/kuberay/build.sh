#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build (once) the real KubeRay operator from Go modules:
#   github.com/ray-project/kuberay/ray-operator@$KUBERAY_VERSION (the module root is its main
#   package) -> $RB_CACHE/bin/kuberay-$KUBERAY_VERSION/kuberay
# through the wrapper module module/ (go.sum pinned here). Last stdout lines: BIN=, SRC=
# (the module source: config/crd/bases holds the CRDs, config/rbac the RBAC), VERSION=.
#
# v1.6.0 is the newest release on the module proxy (v1.4.0, v1.5.0, v1.5.1, v1.6.0); its
# go.mod (go 1.25.0, no replace lines) builds with the Go here. Bumping: edit the version
# here and in module/go.mod, then `go mod tidy` in module/.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
source "$here/../lib.sh"

KUBERAY_VERSION=v1.6.0
MODULE=github.com/ray-project/kuberay/ray-operator

bin="$(rb_go_build_cached kuberay "$KUBERAY_VERSION" "$here/module" "$MODULE")"
src="$(rb_module_dir "$MODULE@$KUBERAY_VERSION")"
rb_operator_report "$bin" "$src" "$KUBERAY_VERSION"
