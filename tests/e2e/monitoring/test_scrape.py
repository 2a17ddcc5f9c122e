"""Prometheus, configured from the chart's monitors, scrapes what they describe and nothing else.

The ServiceMonitor: the injector's pods behind its Service, port ``metrics``.
The PodMonitor: every pod with a container port named ``leader-http`` (the
injected sidecar's, and a hand-written one), in any namespace, at
``/metrics``; pods without it (the app-only pods, CoreDNS) are not targets.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.injector.patch import PORT_NAME
from tests.cluster.prometheus import Prometheus
from tests.e2e.conftest import RELEASE_NAMESPACE, Cluster
from tests.e2e.monitoring.conftest import IDLE_APP, deploy, idle_deployment, poll
from tests.e2e.monitoring.test_alerts import manual_pod

pytestmark = pytest.mark.timeout(300)


def _targets(prom: Prometheus, job_prefix: str) -> dict[str, dict[str, Any]]:
    """Active targets of the job whose name starts with ``job_prefix``, by pod."""
    return {
        t["labels"]["pod"]: t
        for t in prom.targets()
        if t["scrapePool"].startswith(job_prefix) and "pod" in t["labels"]
    }


def _pods(e2e: Cluster, namespace: str, selector: str = "") -> dict[str, dict[str, Any]]:
    args = ["get", "pods", "-n", namespace] + (["-l", selector] if selector else [])
    return {p["metadata"]["name"]: p for p in e2e.json(*args)["items"]}


def test_the_injector_and_every_sidecar_are_scraped_and_nothing_else(
    e2e: Cluster, prometheus: Prometheus, monitored_namespace: str, release: str
) -> None:
    ns = monitored_namespace
    deploy(e2e, ns, idle_deployment("web", 2, {}))
    e2e.kubectl(
        "create", "-n", ns, "-f", "-", input=json.dumps(manual_pod("manual", "hand", {}, {}))
    )
    plain = idle_deployment("plain", 1, {})  # no annotation, so no sidecar
    plain["spec"]["template"]["metadata"]["annotations"] = {}
    plain["spec"]["template"]["spec"]["containers"][0]["command"] = IDLE_APP
    deploy(e2e, ns, plain)
    pods = _pods(e2e, ns)
    with_sidecar = {n for n, p in pods.items() if not n.startswith("plain-")}
    assert len(with_sidecar) == 3 and len(pods) == 4, sorted(pods)

    sidecar_job = f"podMonitor/{RELEASE_NAMESPACE}/{release}-grelmicro-sidecar-sidecars/0"
    injector_job = f"serviceMonitor/{RELEASE_NAMESPACE}/{release}-grelmicro-sidecar-injector/0"

    def sidecars_up() -> dict[str, dict[str, Any]] | None:
        found = {
            pod: t
            for pod, t in _targets(prometheus, sidecar_job).items()
            if t["labels"]["namespace"] == ns
        }
        ok = set(found) == with_sidecar and all(t["health"] == "up" for t in found.values())
        return found if ok else None

    found = poll(sidecars_up, 60, f"exactly the pods with a {PORT_NAME} port scraped and up")
    for pod, target in found.items():
        ip = pods[pod]["status"]["podIP"]
        assert target["scrapeUrl"] == f"http://{ip}:4040/metrics", target
        assert target["labels"]["container"] == "grelmicro-sidecar"
        assert target["labels"]["endpoint"] == PORT_NAME
        assert (
            target["labels"]["job"] == f"{RELEASE_NAMESPACE}/{release}-grelmicro-sidecar-sidecars"
        )
    assert not [
        p
        for p, t in _targets(prometheus, sidecar_job).items()
        if t["labels"]["namespace"] == "kube-system"
    ]

    injectors = _pods(e2e, RELEASE_NAMESPACE, "app.kubernetes.io/component=injector")
    scraped = poll(
        lambda: (
            (t := _targets(prometheus, injector_job)).keys() == injectors.keys()
            and all(x["health"] == "up" for x in t.values())
            and t
        ),
        60,
        "both injector pods scraped through the Service",
    )
    for pod, target in scraped.items():
        assert target["scrapeUrl"] == f"http://{injectors[pod]['status']['podIP']}:8080/metrics"
        assert target["labels"]["job"] == f"{release}-grelmicro-sidecar"
        assert target["labels"]["service"] == f"{release}-grelmicro-sidecar"
        assert target["labels"]["endpoint"] == "metrics"
