"""A real Prometheus scraping the session's release and its sidecars on this machine's node.

``prometheus`` (one per package): the Prometheus built from the Go module
proxy (``tests/cluster/prometheus.py``), run as a host process that reaches
pods over the node's bridge. Its scrape configs are the chart's ServiceMonitor
and PodMonitor, rendered for the session's release and translated as the
Prometheus Operator would (``tests/ship/monitors.py``), plus the API server's
own metrics (job ``apiserver``, as kube-prometheus scrapes it); its rules are
the chart's PrometheusRule. Both come from ``helm template`` with ``VALUES``:
the chart's options, with intervals short enough for a test (scrape and
evaluation every second, a 25 s window, ``for:`` of 2 s). For the sweep alert
the release is upgraded to sweep every 2 s, and rolled back at the end.

Runs on this machine's node only: Prometheus must reach pod IPs.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.node import Node
from tests.cluster.prometheus import Prometheus, apiserver_scrape_config
from tests.e2e.conftest import CHART, RELEASE_NAMESPACE, ROOT, Cluster, wait_for
from tests.e2e.test_election import deployment
from tests.ship.monitors import scrape_configs
from tests.ship.tools import find, render

INTERVAL = "1s"
#: Holds both restarts of the restart test: the second comes after the kubelet's
#: 10 s back-off, ~14 s after the first kill; the pre-kill samples must still be in it.
WINDOW = "25s"
VALUES: dict[str, Any] = {
    "monitoring.serviceMonitor.enabled": True,
    "monitoring.serviceMonitor.interval": INTERVAL,
    "monitoring.podMonitor.enabled": True,
    "monitoring.podMonitor.interval": INTERVAL,
    "monitoring.prometheusRule.enabled": True,
    "monitoring.prometheusRule.window": WINDOW,
    "monitoring.prometheusRule.restarts": 2,
    **{
        f"monitoring.prometheusRule.for.{name}": "2s"
        for name in (
            "electionWithoutLeader",
            "multipleLeaders",
            "clockSkew",
            "leaseRequestsFailing",
            "sweepFailing",
            "noHealthyCandidate",
        )
    },
}
#: Election timings of the test workloads (annotations): leaders within seconds.
FAST = {
    "leader-election.grelmicro.io/lease-duration": "4s",
    "leader-election.grelmicro.io/renew-deadline": "2s",
    "leader-election.grelmicro.io/retry-period": "500ms",
}
FAST_ARGS = ["--lease-duration=4s", "--renew-deadline=2s", "--retry-period=500ms"]
#: An app that only waits: the tests read leadership from Prometheus, not from the apps.
IDLE_APP = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
#: An app steered by files a test makes in its ack directory (``steer``): it keeps its
#: health file fresh unless ``sick`` is there, and acknowledges each drain at once unless
#: ``noack`` is (POSIX sh and curl, in our Debian stand-in).
STEERED_APP = [
    "sh",
    "-c",
    r"""
trap 'exit 0' TERM
dir=${LEADER_ELECTION_ACK_FILE%/*}
acked=none
while true; do
  if [ -n "$LEADER_ELECTION_HEALTH_FILE" ] && [ ! -e "$dir/sick" ]; then
    touch "$LEADER_ELECTION_HEALTH_FILE"
  fi
  drain=$(curl -s -m 1 "$LEADER_ELECTION_URL" | sed -n 's/^ *"token": *\([0-9][0-9]*\).*/\1/p' | head -n 1)
  if [ -n "$drain" ] && [ "$drain" != "$acked" ] && [ ! -e "$dir/noack" ]; then
    curl -s -m 1 -X POST "$LEADER_ELECTION_DRAINED_URL?token=$drain" >/dev/null
    acked=$drain
  fi
  sleep 0.2
done
""",
]


@dataclass
class Seen:
    """When an alert was seen pending, firing and gone, in seconds after ``start``."""

    start: float = field(default_factory=time.monotonic)
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, what: str) -> float:
        self.marks[what] = round(time.monotonic() - self.start, 1)
        return self.marks[what]

    def report(self, name: str) -> None:
        line = ", ".join(f"{k} {v}s" for k, v in self.marks.items())
        print(f"\n[alerts] {name}: {line}", file=sys.stderr)


def _matches(alert: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(alert["labels"].get(k) == v for k, v in labels.items())


def wait_alert(
    prom: Prometheus, seen: Seen, name: str, labels: dict[str, str], timeout: float = 90
) -> dict[str, Any]:
    """Wait for ``name`` with ``labels`` to fire (marking when it was first pending)."""

    def firing() -> dict[str, Any] | None:
        for alert in prom.alerts(name):
            if _matches(alert, labels):
                if f"{name} pending" not in seen.marks:
                    seen.mark(f"{name} pending")
                if alert["state"] == "firing":
                    return alert
        return None

    alert: dict[str, Any] = wait_for(firing, timeout, f"{name} {labels} to fire", interval=0.25)
    seen.mark(f"{name} firing")
    return alert


def wait_resolved(
    prom: Prometheus, seen: Seen, name: str, labels: dict[str, str], timeout: float = 90
) -> None:
    wait_for(
        lambda: not [a for a in prom.alerts(name) if _matches(a, labels)],
        timeout,
        f"{name} {labels} to resolve",
        interval=0.25,
    )
    seen.mark(f"{name} resolved")


def idle_deployment(name: str, replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
    """An injected Deployment (the e2e one) whose app only waits."""
    obj = deployment(name, replicas=replicas, annotations={**FAST, **annotations})
    obj["spec"]["template"]["spec"]["containers"][0]["command"] = IDLE_APP
    return obj


def steered_deployment(name: str, replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
    """An injected Deployment whose app is ``STEERED_APP``."""
    obj = idle_deployment(name, replicas, annotations)
    obj["spec"]["template"]["spec"]["containers"][0]["command"] = STEERED_APP
    return obj


def steer(e2e: Cluster, namespace: str, pod: str, *args: str) -> str:
    """Run ``args`` in the app container of ``pod``, in its ack directory (where
    ``STEERED_APP`` looks for ``sick`` and ``noack``); what it printed."""
    script = 'cd "${LEADER_ELECTION_ACK_FILE%/*}" && "$@"'
    return e2e.kubectl(
        "exec", "-n", namespace, pod, "-c", "app", "--", "sh", "-c", script, "-", *args
    ).stdout


def deploy(e2e: Cluster, namespace: str, obj: dict[str, Any]) -> None:
    e2e.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))
    name = obj["metadata"]["name"]
    e2e.kubectl("rollout", "status", "-n", namespace, f"deployment/{name}", "--timeout=180s")


def leaders(prom: Prometheus, namespace: str, lease: str) -> list[str]:
    """The pods whose sidecar reports leading ``lease``, as Prometheus last scraped them."""
    rows = prom.query(
        f'leader_election_master_status{{namespace="{namespace}",name="{lease}"}} == 1'
    )
    return sorted(r["metric"]["pod"] for r in rows)


def injector_settled(e2e: Cluster) -> None:
    """Wait for the injector's pods to be its two replicas, none of them still terminating
    (helm's --wait returns once the new ones are ready): the tests after these count them."""

    def settled() -> bool:
        pods = e2e.json(
            "get", "pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/component=injector"
        )["items"]
        return len(pods) == 2 and not any(p["metadata"].get("deletionTimestamp") for p in pods)

    wait_for(settled, 120, "two injector pods, none terminating", interval=0.5)


@pytest.fixture(scope="package")
def prometheus(e2e: Cluster, release: str, request: pytest.FixtureRequest) -> Iterator[Prometheus]:
    if os.environ.get("E2E_KUBECONFIG"):
        pytest.skip("Prometheus runs on this machine and scrapes pod IPs over the node's bridge")
    node: Node = request.getfixturevalue("node")
    objects = render(VALUES, release=release, namespace=RELEASE_NAMESPACE)
    configs = scrape_configs(objects, node.kubeconfig)
    configs.append(apiserver_scrape_config(node.plane, INTERVAL))
    groups = find(objects, "PrometheusRule")["spec"]["groups"]
    t0 = time.monotonic()
    e2e.helm(
        "upgrade",
        release,
        str(CHART),
        f"--namespace={RELEASE_NAMESPACE}",
        "--reuse-values",
        "--set=injector.sweepInterval=2s",
        "--wait",
        "--timeout=180s",
    )
    workdir = Path(tempfile.mkdtemp(prefix="grelmicro-prometheus-"))
    upgraded = time.monotonic() - t0
    prom = Prometheus(workdir, configs, groups, interval=INTERVAL).start()
    print(
        f"\n[prometheus] release upgraded (sweeps every 2 s) in {upgraded:.1f}s, "
        f"Prometheus ready in {time.monotonic() - t0 - upgraded:.1f}s",
        file=sys.stderr,
    )
    try:
        yield prom
    finally:
        prom.stop()
        t0 = time.monotonic()
        e2e.helm(
            "rollback", release, f"--namespace={RELEASE_NAMESPACE}", "--wait", "--timeout=180s"
        )
        injector_settled(e2e)
        print(
            f"\n[prometheus] release rolled back in {time.monotonic() - t0:.1f}s", file=sys.stderr
        )
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def monitored_namespace(e2e: Cluster) -> Iterator[str]:
    """A fresh namespace with manifests/rbac.yaml applied (no Pod Security level: the
    clock tests mount libfaketime from the node)."""
    name = f"m-{uuid.uuid4().hex[:8]}"
    e2e.kubectl("create", "namespace", name)
    e2e.kubectl("apply", "-n", name, "-f", str(ROOT / "manifests" / "rbac.yaml"))
    try:
        yield name
    finally:
        e2e.kubectl("delete", "namespace", name, "--wait=false", check=False)


def poll(check: Callable[[], Any], timeout: float, what: str) -> Any:
    return wait_for(check, timeout, what, interval=0.25)
