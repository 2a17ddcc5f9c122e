#!/usr/bin/env bash
# End to end on a real cluster, for anyone with Docker (make kind-e2e):
#
#   1. create a kind cluster (one control plane, two workers);
#   2. build the image from ./Dockerfile and load it into the cluster;
#   3. run the end-to-end suite (tests/e2e) against it, the same suite that runs
#      on the project's own node in CI: the chart and `helm test --logs`, an
#      annotated Deployment in a restricted namespace, the leader read from inside
#      the app containers, a handover on `kubectl delete pod`, manifests/examples.
#
# Needs: docker (with a running daemon), kind, kubectl, helm. Pulls
# curlimages/curl for the examples' app containers.
#
# Environment:
#   KIND_CLUSTER   cluster name (default grelmicro-sidecar)
#   KEEP_CLUSTER   1: keep the cluster at the end (default: delete it)
#   REUSE_CLUSTER  1: use the cluster if it exists already (default: refuse)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER="${KIND_CLUSTER:-grelmicro-sidecar}"
CONTEXT="kind-${CLUSTER}"
SYSTEM_NS=grelmicro-system
VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$ROOT/charts/grelmicro-sidecar/Chart.yaml")"
# The image the chart installs by default (values.yaml's image.repository), so the
# chart finds the one built here already loaded into kind's nodes.
REPOSITORY="$(sed -n '/^image:/,/^[^ #]/ s/^  repository: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$ROOT/charts/grelmicro-sidecar/values.yaml")"
IMAGE="${REPOSITORY}:${VERSION}"

die() {
    echo "kind-e2e: $*" >&2
    exit 1
}

need() {
    command -v "$1" >/dev/null 2>&1 || die "$1 is not installed. $2"
}

step() {
    printf '\n==> %s\n' "$*"
}

# ---- refuse early, before touching anything ------------------------------------
need docker "This end-to-end run builds an image and runs Kubernetes in Docker containers (kind): install Docker first (https://docs.docker.com/get-docker/). Without Docker, run the local demo instead: make demo"
if ! docker info >/dev/null 2>&1; then
    die "Docker is installed but its daemon is not reachable ('docker info' failed): start Docker (or check DOCKER_HOST and your access to the Docker socket). Without Docker, run the local demo instead: make demo"
fi
need kind "Install kind: https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
need kubectl "Install kubectl: https://kubernetes.io/docs/tasks/tools/"
need helm "Install helm: https://helm.sh/docs/intro/install/"
[ -n "$VERSION" ] || die "cannot read appVersion from charts/grelmicro-sidecar/Chart.yaml"
[ -n "$REPOSITORY" ] || die "cannot read image.repository from charts/grelmicro-sidecar/values.yaml"

k() { kubectl --context "$CONTEXT" "$@"; }

created=0
cleanup() {
    status=$?
    if [ "$status" -ne 0 ] && [ "$created" -eq 1 ]; then
        echo "kind-e2e: failed; what the cluster looks like:" >&2
        k get pods -A -o wide >&2 || true
        k logs -n "$SYSTEM_NS" -l app.kubernetes.io/component=injector --tail=30 >&2 || true
    fi
    if [ "$created" -eq 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then
        step "deleting kind cluster $CLUSTER (KEEP_CLUSTER=1 keeps it)"
        kind delete cluster --name "$CLUSTER" || true
    elif [ "$created" -eq 1 ]; then
        echo "kept: kubectl --context $CONTEXT get leases -A; delete with: kind delete cluster --name $CLUSTER"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 1. cluster ---------------------------------------------------------------
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    [ "${REUSE_CLUSTER:-0}" = 1 ] || die "a kind cluster named $CLUSTER exists already: delete it (kind delete cluster --name $CLUSTER), pick another name with KIND_CLUSTER=..., or set REUSE_CLUSTER=1"
    step "reusing kind cluster $CLUSTER"
else
    step "creating kind cluster $CLUSTER (1 control plane, 2 workers)"
    config="$(mktemp)"
    cat >"$config" <<'EOF'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
EOF
    created=1
    kind create cluster --name "$CLUSTER" --config "$config" --wait 180s
    rm -f "$config"
fi

# ---- 2. image -----------------------------------------------------------------
step "building $IMAGE and loading it into the cluster"
docker build -t "$IMAGE" "$ROOT"
kind load docker-image "$IMAGE" --name "$CLUSTER"

# ---- 3. the end-to-end suite ------------------------------------------------------
# The same suite that runs on the project's own node (tests/e2e): it installs the
# chart, runs `helm test --logs`, deploys annotated workloads and the examples,
# reads the leader from inside the app containers and hands over on delete.
step "running the end-to-end suite (tests/e2e) against kind cluster $CLUSTER"
kubeconfig="$(mktemp)"
kind get kubeconfig --name "$CLUSTER" >"$kubeconfig"
make -C "$ROOT" setup
E2E_KUBECONFIG="$kubeconfig" "$ROOT/.venv/bin/python" -m pytest -p no:cacheprovider "$ROOT/tests/e2e" -v
rm -f "$kubeconfig"

step "done"
