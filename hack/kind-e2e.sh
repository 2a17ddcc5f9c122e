#!/usr/bin/env bash
# End to end on a real cluster, for anyone with Docker (make kind-e2e):
#
#   1. create a kind cluster (one control plane, two workers);
#   2. build the image from ./Dockerfile and load it into the cluster;
#   3. install the chart (the injector) and run its `helm test`;
#   4. deploy manifests/examples into namespace "demo" (with manifests/rbac.yaml);
#   5. show `kubectl get leases -l app.kubernetes.io/managed-by=grelmicro`;
#   6. delete the leader pod and show the handover to another pod.
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
RELEASE=grelmicro-sidecar
SYSTEM_NS=grelmicro-system
DEMO_NS=demo
SELECTOR=app.kubernetes.io/managed-by=grelmicro
VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$ROOT/charts/grelmicro-sidecar/Chart.yaml")"
IMAGE="grelmicro-sidecar:${VERSION}"

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

now_ms() { # bash 5 has EPOCHREALTIME; older ones (macOS) get whole seconds
    if [ -n "${EPOCHREALTIME:-}" ]; then
        local t="${EPOCHREALTIME/[.,]/}"
        echo $((10#$t / 1000))
    else
        echo $(($(date +%s) * 1000))
    fi
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
        echo "kept: kubectl --context $CONTEXT get leases -n $DEMO_NS; delete with: kind delete cluster --name $CLUSTER"
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

# ---- 3. injector ----------------------------------------------------------------
step "installing the chart (the injector) into $SYSTEM_NS"
helm upgrade --install "$RELEASE" "$ROOT/charts/grelmicro-sidecar" \
    --kube-context "$CONTEXT" --namespace "$SYSTEM_NS" --create-namespace \
    --wait --timeout 5m
k get pods -n "$SYSTEM_NS" -o wide
step "helm test: the injector answers and injects"
helm test "$RELEASE" --kube-context "$CONTEXT" --namespace "$SYSTEM_NS" --logs --timeout 3m

# ---- 4. examples ----------------------------------------------------------------
step "deploying manifests/examples into namespace $DEMO_NS"
k create namespace "$DEMO_NS" --dry-run=client -o yaml | k apply -f -
k apply -n "$DEMO_NS" -f "$ROOT/manifests/rbac.yaml"
k apply -n "$DEMO_NS" -k "$ROOT/manifests/examples"
k rollout status -n "$DEMO_NS" deployment/worker --timeout 5m
k rollout status -n "$DEMO_NS" deployment/manual --timeout 5m
# deployment/api gates readiness on leadership: one Ready pod is its steady state,
# and `rollout status` would never finish (README, "Readiness gating").

holder() {
    k get lease "leader-$1" -n "$DEMO_NS" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true
}

wait_for_holder() { # election, a holder to move away from (or ""), timeout seconds
    local deadline=$((SECONDS + $3)) now
    while [ "$SECONDS" -lt "$deadline" ]; do
        now="$(holder "$1")"
        if [ -n "$now" ] && [ "$now" != "$2" ]; then
            echo "$now"
            return 0
        fi
        sleep 0.2
    done
    return 1
}

step "waiting for the elections"
for election in worker manual api; do
    wait_for_holder "$election" "" 120 >/dev/null || die "no leader for election $election after 120s"
done

# ---- 5. who leads ---------------------------------------------------------------
step "kubectl get leases -n $DEMO_NS -l $SELECTOR"
k get leases -n "$DEMO_NS" -l "$SELECTOR"
k get pods -n "$DEMO_NS" -o wide
step "the leader-only Service answers from the leader of election api"
deadline=$((SECONDS + 60))
until [ -n "$(k get endpointslices -n "$DEMO_NS" -l kubernetes.io/service-name=api-leader \
    -o jsonpath='{.items[*].endpoints[?(@.conditions.ready==true)].addresses[0]}')" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "the api-leader Service has no ready endpoint after 60s"
    sleep 1
done
k run probe -n "$DEMO_NS" --rm -i --restart=Never --image=curlimages/curl:8.11.1 \
    -- curl -s --max-time 5 http://api-leader:8080/state.json

# ---- 6. handover ----------------------------------------------------------------
leader="$(holder worker)"
step "deleting the leader pod $leader"
started="$(now_ms)"
k delete pod "$leader" -n "$DEMO_NS" --wait=false
next="$(wait_for_holder worker "$leader" 60)" || die "nobody took over from $leader within 60s"
elapsed_ms=$(($(now_ms) - started))
echo "handover: $leader -> $next in ${elapsed_ms} ms (the sidecar released the Lease on SIGTERM)"
k get leases -n "$DEMO_NS" -l "$SELECTOR"
sleep 6
step "the new leader's app container (leader-only-work.sh)"
k logs -n "$DEMO_NS" "$next" -c app --tail=3

step "done"
