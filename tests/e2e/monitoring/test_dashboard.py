"""Every query of the Grafana dashboard, evaluated by a real Prometheus while workloads run.

Two elections in one namespace: one follows its apps' health, the other has a
candidate that lost the Lease RBAC (another ServiceAccount, whose RoleBinding
is deleted once its pod runs, for the injector refuses a pod created without
it; its sidecar is then restarted through the runtime, as a crash would, so it
asks again and is refused: the API errors panel has data while its election
still has a leader). Each panel's query must return data, for this namespace
where it is grouped by namespace, and the leadership panel
must show exactly one leader per election and nothing that is not a sidecar's
election.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from tests.cluster.node import Node
from tests.cluster.prometheus import Prometheus
from tests.e2e.conftest import Cluster
from tests.e2e.monitoring.conftest import (
    INTERVAL,
    deploy,
    idle_deployment,
    leaders,
    poll,
    steered_deployment,
)
from tests.ship.tools import CHART

pytestmark = pytest.mark.timeout(300)

#: What Grafana substitutes for $__rate_interval: at least four scrape intervals.
RATE_INTERVAL = "30s"
LEADERSHIP = "Who leads each election"


def _panels() -> list[dict[str, Any]]:
    dashboard = json.loads((CHART / "dashboards" / "grelmicro-sidecar.json").read_text())
    panels: list[dict[str, Any]] = dashboard["panels"]
    return panels


def test_every_panel_returns_data_and_the_leadership_panel_one_leader_per_election(
    e2e: Cluster, prometheus: Prometheus, monitored_namespace: str, local_node: Node
) -> None:
    ns = monitored_namespace
    # web follows its apps' health (the App health panel has data only for such pods).
    deploy(
        e2e, ns, steered_deployment("web", 2, {"leader-election.grelmicro.io/health-file": "true"})
    )
    deploy(e2e, ns, idle_deployment("api", 2, {}))
    e2e.kubectl("create", "serviceaccount", "-n", ns, "no-lease-rbac")
    grant = ("rolebinding", "-n", ns, "stray-leases")
    e2e.kubectl(
        "create", *grant, "--role=grelmicro-sidecar-leases",
        f"--serviceaccount={ns}:no-lease-rbac",
    )  # fmt: skip
    stray = idle_deployment("api-stray", 1, {"leader-election.grelmicro.io/name": "api"})
    stray["spec"]["template"]["spec"]["serviceAccountName"] = "no-lease-rbac"
    deploy(e2e, ns, stray)
    e2e.kubectl("delete", *grant)
    [pod] = e2e.json("get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=api-stray")["items"]
    [sidecar] = [
        c for c in pod["status"]["initContainerStatuses"] if c["name"] == "grelmicro-sidecar"
    ]
    local_node.kill_container(sidecar["containerID"])
    poll(
        lambda: all(
            len(leaders(prometheus, ns, lease)) == 1 for lease in ("leader-web", "leader-api")
        ),
        60,
        "one leader in each election, scraped",
    )
    assert INTERVAL == "1s"  # RATE_INTERVAL holds four scrapes and more

    queries = [
        (panel["title"], target["expr"].replace("$__rate_interval", RATE_INTERVAL))
        for panel in _panels()
        for target in panel["targets"]
    ]
    results: dict[str, list[dict[str, Any]]] = {}

    def without_data() -> list[str]:
        """The panels' queries that return nothing (for this namespace, where they group by it)."""
        missing = []
        for title, expr in queries:
            rows = results[f"{title}: {expr}"] = prometheus.query(expr)
            if "namespace" in expr:
                rows = [r for r in rows if r["metric"].get("namespace") == ns]
            if not rows:
                missing.append(f"{title}: {expr}")
        return missing

    # Rates need two scrapes in their window: a few seconds after the workloads start.
    try:
        poll(lambda: not without_data(), 60, "every panel's query to return data")
    except AssertionError:
        raise AssertionError(f"panels without data: {without_data()}") from None
    (leadership,) = [v for k, v in results.items() if k.startswith(LEADERSHIP)]
    # Only sidecars' elections, each row naming its pod.
    assert all({"namespace", "name", "pod"} <= set(r["metric"]) for r in leadership), leadership
    ours = sorted(
        (r["metric"]["name"], r["metric"]["pod"])
        for r in leadership
        if r["metric"]["namespace"] == ns
    )
    assert [name for name, _ in ours] == ["leader-api", "leader-web"], ours
    for name, pod in ours:
        assert leaders(prometheus, ns, name) == [pod]
    print(f"\n[dashboard] {len(results)} queries returned data; leaders: {ours}", file=sys.stderr)
