#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build (once) helm from Go modules: helm.sh/helm/v3/cmd/helm@$HELM_VERSION (versions.env)
#   -> $RB_CACHE/bin/helm-<HELM_VERSION>/helm
# Like build.sh: needs only Go and the module proxy, returns at once when cached, builds in
# a temp dir and renames (a killed build never leaves half a cache), a flock serialises
# concurrent callers. The last stdout line is HELM=<path of the binary>.
set -euo pipefail

# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

HELM_BIN_DIR="$RB_CACHE/bin/helm-$HELM_VERSION"
if [[ -x "$HELM_BIN_DIR/helm" ]]; then
  echo "HELM=$HELM_BIN_DIR/helm"
  exit 0
fi

command -v go >/dev/null || rb_die "go is not in PATH: install Go >= 1.26 (helm $HELM_VERSION needs it)"
mkdir -p "$RB_CACHE/bin"
# Its own lock: a helm build need not wait for the control plane's.
rb_lock "$RB_CACHE/.build-helm.lock"
if [[ ! -x "$HELM_BIN_DIR/helm" ]]; then
  tmp="$HELM_BIN_DIR.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  # The variables helm's Makefile sets: without them `helm version` says v3.x and the
  # default .Capabilities.KubeVersion is v1.20.0.
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$HELM_K8S_MINOR"
  done
  t0=$SECONDS
  rb_log "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION -> $HELM_BIN_DIR"
  # `go install pkg@version` ignores the current module; GOFLAGS like -mod would be rejected.
  CGO_ENABLED=0 GOFLAGS="" GOBIN="$tmp" nice -n 10 \
    go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
    || rb_die "go install helm@$HELM_VERSION failed; see the go output above"
  "$tmp/helm" version --short >&2 || rb_die "built helm does not run"
  rb_log "built helm in $((SECONDS - t0))s"
  rm -rf "$HELM_BIN_DIR"
  mv "$tmp" "$HELM_BIN_DIR"
  trap - EXIT
fi
echo "HELM=$HELM_BIN_DIR/helm"
