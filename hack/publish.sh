#!/usr/bin/env bash
# Publishes what `make release` built in dist/: the image and the chart, to an OCI
# registry (default ghcr.io/grelinfo). The release workflow runs it after logging
# in; tests/e2e/test_install_from_registry.py runs it, word for word, against the
# registry that stands in for ghcr.io there.
#
#   hack/publish.sh              # ghcr.io/grelinfo/grelmicro-sidecar:<version>
#                                # and oci://ghcr.io/grelinfo/charts/grelmicro-sidecar
#
# Guarantees: nothing is pushed unless every file in dist/ matches SHA256SUMS; the
# image is copied with its manifest byte for byte, so the registry serves it under
# the digest that the chart in dist/ pins (checked after the push).
#
# Needs: skopeo (1.6 or newer) and helm (3.8 or newer), logged in to the registry.
# Environment:
#   REGISTRY  where to push (default ghcr.io/grelinfo)
#   DIST      the release's folder (default dist/ of this checkout)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REGISTRY="${REGISTRY:-ghcr.io/grelinfo}"
DIST="${DIST:-$ROOT/dist}"
NAME=grelmicro-sidecar

die() {
    echo "publish: $*" >&2
    exit 1
}

command -v skopeo >/dev/null 2>&1 || die "skopeo is not installed (apt-get install skopeo)"
command -v helm >/dev/null 2>&1 || die "helm is not installed (https://helm.sh/docs/intro/install/)"
VERSION="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/sidecar/__init__.py")"
[ -n "$VERSION" ] || die "cannot read __version__ from sidecar/__init__.py"
[ -f "$DIST/SHA256SUMS" ] || die "no $DIST/SHA256SUMS: run make release first"

echo "==> checking $DIST against SHA256SUMS"
(cd "$DIST" && sha256sum --check --strict --quiet SHA256SUMS) || die "$DIST does not match its SHA256SUMS"
DIGEST="$(cat "$DIST/$NAME-$VERSION.image-digest")"
IMAGE="$REGISTRY/$NAME"

echo "==> pushing $IMAGE:$VERSION ($DIGEST)"
pushed="$(mktemp)"
trap 'rm -f "$pushed"' EXIT
skopeo copy --preserve-digests --digestfile "$pushed" \
    "oci-archive:$DIST/$NAME-$VERSION.oci.tar:$VERSION" "docker://$IMAGE:$VERSION"
[ "$(cat "$pushed")" = "$DIGEST" ] || die "the registry stored $IMAGE as $(cat "$pushed"), not $DIGEST"

echo "==> pushing the chart to oci://$REGISTRY/charts"
helm push "$DIST/$NAME-$VERSION.tgz" "oci://$REGISTRY/charts"

echo "==> published $IMAGE:$VERSION@$DIGEST and oci://$REGISTRY/charts/$NAME:$VERSION"
