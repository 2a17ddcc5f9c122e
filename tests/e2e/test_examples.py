"""The examples as a user applies them (``manifests/rbac.yaml``, ``kubectl apply -k
manifests/examples``), running; and what README says about readiness gating, observed.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import ROOT, Cluster, wait_for


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
    )


def apply_examples(e2e: Cluster, namespace: str) -> None:
    e2e.kubectl("apply", "-n", namespace, "-k", str(ROOT / "manifests" / "examples"))
    for deployment in ("worker", "manual"):
        e2e.kubectl(
            "rollout", "status", "-n", namespace, f"deployment/{deployment}", "--timeout=180s"
        )


def gated_leader(e2e: Cluster, namespace: str) -> tuple[str, str] | None:
    """(pod, IP) when exactly one api pod is Ready and it holds the api Lease."""
    pods = e2e.json("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/name=api")["items"]
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


def test_examples_run_and_gated_readiness_routes_only_to_the_leader(
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

    # gate-readiness: only the leader is Ready, and the Service routes only to it ...
    leader, ip = wait_for(
        lambda: gated_leader(e2e, ns), 90, "exactly one Ready api pod, the leader"
    )
    slices = e2e.json(
        "get", "endpointslices", "-n", ns, "-l", "kubernetes.io/service-name=api-leader"
    )["items"]
    ready_addresses = [
        a
        for s in slices
        for e in s.get("endpoints") or []
        if (e.get("conditions") or {}).get("ready")
        for a in e["addresses"]
    ]
    assert ready_addresses == [ip], (leader, slices)
    # ... and, as README warns, `kubectl rollout status` never completes for such a Deployment.
    stalled = e2e.kubectl(
        "rollout", "status", "-n", ns, "deployment/api", "--timeout=10s", check=False
    )
    assert stalled.returncode != 0, stalled.stdout
