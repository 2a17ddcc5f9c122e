"""The examples as a user applies them (``manifests/rbac.yaml`` and
``manifests/leader-label.yaml``, ``kubectl apply -k manifests/examples``), running; and
what docs/application.md says about readiness gating (``gated-readiness.yaml``), observed.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import ROOT, Cluster, wait_for


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
    )


def apply_examples(e2e: Cluster, namespace: str) -> None:
    e2e.kubectl("apply", "-n", namespace, "-f", str(ROOT / "manifests" / "leader-label.yaml"))
    e2e.kubectl("apply", "-n", namespace, "-k", str(ROOT / "manifests" / "examples"))
    # Every Deployment rolls out, the leader-only Service's included (all its pods Ready).
    for deployment in ("worker", "manual", "api"):
        e2e.kubectl(
            "rollout", "status", "-n", namespace, f"deployment/{deployment}", "--timeout=180s"
        )


def gated_leader(e2e: Cluster, namespace: str) -> tuple[str, str] | None:
    """(pod, IP) when exactly one gated pod is Ready and it holds the gated Lease."""
    pods = e2e.json("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/name=gated")["items"]
    ready = [p for p in pods if _ready(p)]
    if (
        len(pods) != 2
        or len(ready) != 1
        or any(p["status"].get("phase") != "Running" for p in pods)
    ):
        return None
    leases = e2e.json(
        "get", "leases", "-n", namespace, "-l", "app.kubernetes.io/managed-by=grelmicro"
    )["items"]
    holders = {item["spec"].get("holderIdentity") for item in leases}
    name = ready[0]["metadata"]["name"]
    return (name, ready[0]["status"]["podIP"]) if name in holders else None


def ready_addresses(e2e: Cluster, namespace: str, service: str) -> list[str]:
    slices = e2e.json(
        "get", "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={service}"
    )["items"]
    return [
        a
        for s in slices
        for e in s.get("endpoints") or []
        if (e.get("conditions") or {}).get("ready")
        for a in e["addresses"]
    ]


def labelled_leader(e2e: Cluster, namespace: str) -> tuple[str, str] | None:
    """(pod, IP) when both api pods are Ready, one carries the leader label and holds the Lease."""
    pods = e2e.json("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/name=api")["items"]
    labelled = [
        p
        for p in pods
        if p["metadata"].get("labels", {}).get("leader-election.grelmicro.io/leader")
    ]
    if len(pods) != 2 or not all(_ready(p) for p in pods) or len(labelled) != 1:
        return None
    lease = e2e.json("get", "lease", "-n", namespace, "leader-api")
    name = labelled[0]["metadata"]["name"]
    if lease["spec"].get("holderIdentity") != name:
        return None
    return name, labelled[0]["status"]["podIP"]


def test_examples_run_and_the_leader_service_routes_only_to_the_leader(
    e2e: Cluster, workload_namespace: str
) -> None:
    ns = workload_namespace
    apply_examples(e2e, ns)
    leases = e2e.json("get", "leases", "-n", ns, "-l", "app.kubernetes.io/managed-by=grelmicro")[
        "items"
    ]
    wait_for(
        lambda: (
            {
                i["metadata"]["name"]
                for i in e2e.json(
                    "get", "leases", "-n", ns, "-l", "app.kubernetes.io/managed-by=grelmicro"
                )["items"]
                if i["spec"].get("holderIdentity")
            }
            >= {"leader-worker", "leader-manual", "leader-api"}
        ),
        60,
        f"a leader in each example's election (had {[i['metadata']['name'] for i in leases]})",
    )
    # The leader label: both api pods Ready, and the Service routes only to the leader.
    leader, ip = wait_for(
        lambda: labelled_leader(e2e, ns), 90, "both api pods Ready, the leader labelled"
    )
    wait_for(
        lambda: ready_addresses(e2e, ns, "api-leader") == [ip],
        30,
        f"api-leader routing to {leader} ({ip}) alone",
    )


def _replica_sets(e2e: Cluster, namespace: str) -> dict[str, int]:
    """{revision: replicas} of the gated Deployment's ReplicaSets."""
    items = e2e.json("get", "replicasets", "-n", namespace, "-l", "app.kubernetes.io/name=gated")[
        "items"
    ]
    return {
        i["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: i["spec"]["replicas"]
        for i in items
    }


def test_gated_readiness_recreate_rolls_and_the_default_strategy_stalls(
    e2e: Cluster, workload_namespace: str
) -> None:
    """docs/application.md, "Readiness gating": with ``gate-readiness`` only ``Recreate`` replaces the
    pods; the default rolling update stalls with the old leader kept as the only Ready pod."""
    ns = workload_namespace
    e2e.kubectl(
        "apply", "-n", ns, "-f", str(ROOT / "manifests" / "examples" / "gated-readiness.yaml")
    )
    wait_for(lambda: gated_leader(e2e, ns), 90, "a Ready leader among the gated pods")
    old = {
        p["metadata"]["name"]
        for p in e2e.json("get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=gated")["items"]
    }

    # Recreate (the example's strategy): every pod is replaced and a new one leads, Ready.
    e2e.kubectl("rollout", "restart", "-n", ns, "deployment/gated")
    renewed, _ = wait_for(
        lambda: (g := gated_leader(e2e, ns)) is not None and g[0] not in old and g,
        120,
        "a new gated pod leading and Ready after the Recreate rollout",
    )
    current = {
        p["metadata"]["name"]
        for p in e2e.json("get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=gated")["items"]
    }
    assert current.isdisjoint(old), (old, current)

    # The default strategy: the surge pod never becomes Ready, the old leader stays.
    e2e.kubectl(
        "patch",
        "-n",
        ns,
        "deployment/gated",
        "--type=merge",
        "-p",
        '{"spec":{"strategy":{"type":"RollingUpdate","rollingUpdate":null}}}',
    )
    before = _replica_sets(e2e, ns)
    e2e.kubectl("rollout", "restart", "-n", ns, "deployment/gated")
    wait_for(lambda: len(_replica_sets(e2e, ns)) > len(before), 30, "the new ReplicaSet")
    stalled = e2e.kubectl(
        "rollout", "status", "-n", ns, "deployment/gated", "--timeout=30s", check=False
    )
    assert stalled.returncode != 0, stalled.stdout
    sets = _replica_sets(e2e, ns)
    newest = max(sets, key=int)
    assert sets[newest] == 1, sets  # one surge pod, never Ready: the rollout cannot go on
    api = e2e.json("get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=gated")["items"]
    assert len(api) == 3, [p["metadata"]["name"] for p in api]
    assert [p["metadata"]["name"] for p in api if _ready(p)] == [renewed], sets
