#!/usr/bin/env bash
# Builds the rust-batch OCI image from deploy/Containerfile without a daemon (buildah, Debian
# package `buildah`; vfs storage under target/, so no overlay mount or root-wide store is
# needed), checks it, and writes it as an OCI archive:
#
#   deploy/build-image.sh           # release binary (deploy/static-build.sh --release)
#   deploy/build-image.sh --dev     # the tests' dev-profile static binary (faster to build)
#
# -> target/static/rust-batch-<version>.oci.tar; load it elsewhere with
#    `skopeo copy oci-archive:FILE docker://REGISTRY/rust-batch:<version>` or `podman load -i FILE`.
# With Docker or Podman instead: deploy/static-build.sh --release, then
#    docker build -f deploy/Containerfile -t rust-batch:<version> target/static/image
set -euo pipefail
cd "$(dirname "$0")/.."
command -v buildah >/dev/null || { echo "buildah not found (apt-get install buildah)" >&2; exit 1; }

if [[ "${1:-}" == --dev ]]; then
  binary="$(deploy/static-build.sh)"
else
  binary="$(deploy/static-build.sh --release)"
fi
version="$("$binary" --version | awk '{print $2}')"
store=(--storage-driver vfs --root "$PWD/target/static/buildah" --runroot "$PWD/target/static/buildah-run")
tag="localhost/rust-batch:$version"

buildah "${store[@]}" bud --isolation chroot -f deploy/Containerfile -t "$tag" target/static/image >&2

# The image as a container would see it: its root holds only the binary, it runs as 65532,
# and the binary answers from that root.
ctr="$(buildah "${store[@]}" from "$tag")"
trap 'buildah "${store[@]}" rm "$ctr" >/dev/null' EXIT
root="$(buildah "${store[@]}" mount "$ctr")"
[[ "$(ls -A "$root")" == rust-batch ]] || { echo "image root holds more than the binary: $(ls -A "$root")" >&2; exit 1; }
user="$(buildah "${store[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' "$tag")"
[[ "$user" == 65532:65532 ]] || { echo "image user is $user, not 65532:65532" >&2; exit 1; }
chroot --userspec="$user" "$root" /rust-batch --version >&2
buildah "${store[@]}" umount "$ctr" >/dev/null

archive="target/static/rust-batch-$version.oci.tar"
rm -f "$archive"
buildah "${store[@]}" push "$tag" "oci-archive:$archive:rust-batch:$version" >&2
ls -l "$archive" >&2
echo "$PWD/$archive"
