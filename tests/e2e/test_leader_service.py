"""The leader label on the real node (contract §4): ``manifests/examples/leader-service.yaml``
routes to the leader while every pod stays Ready, across a pod deletion and a rolling
update with the default strategy, and the rollout completes.

A sampler reads, every 100 ms, what the Service routes to (its EndpointSlices'
ready addresses), which pods carry the label and who holds the Lease; the test
asserts on that record and prints how long the Service took to follow.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config

from sidecar.core.lease import HANDOFF_ANNOTATION
from tests.e2e.conftest import ROOT, Cluster, wait_for

LABEL = "leader-election.grelmicro.io/leader"
SELECTOR = "app.kubernetes.io/name=api"


@dataclass(frozen=True)
class Sample:
    at: float  # monotonic
    routed: tuple[str, ...]  # the Service's ready endpoint addresses
    labelled: tuple[str, ...]  # IPs of the pods that carry the leader label
    holder_ip: str | None  # IP of the pod named by the Lease, while it is Running


class Sampler:
    """What the Service routes to, and who leads, every ``interval`` (100 ms) in a thread."""

    def __init__(self, kubeconfig: str, namespace: str, interval: float = 0.1) -> None:
        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.namespace = namespace
        self.interval = interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.api.close()

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        discovery = client.DiscoveryV1Api(self.api)
        coordination = client.CoordinationV1Api(self.api)
        while not self._stop.is_set():
            try:
                slices = discovery.list_namespaced_endpoint_slice(
                    self.namespace, label_selector="kubernetes.io/service-name=api-leader"
                ).items
                pods = core.list_namespaced_pod(self.namespace, label_selector=SELECTOR).items
                lease = coordination.read_namespaced_lease("leader-api", self.namespace)
            except client.ApiException:
                time.sleep(self.interval)
                continue
            routed = tuple(
                sorted(
                    a
                    for s in slices
                    for e in s.endpoints or []
                    if e.conditions is not None and e.conditions.ready
                    for a in e.addresses
                )
            )
            ips = {p.metadata.name: p.status.pod_ip for p in pods if p.status.pod_ip}
            labelled = tuple(
                sorted(
                    ips[p.metadata.name]
                    for p in pods
                    if (p.metadata.labels or {}).get(LABEL) == "true" and p.metadata.name in ips
                )
            )
            holder = lease.spec.holder_identity if lease.spec else None
            if HANDOFF_ANNOTATION in (lease.metadata.annotations or {}):
                holder = None  # handed off, not yet claimed: nobody leads (contract §2)
            self.samples.append(Sample(time.monotonic(), routed, labelled, ips.get(holder or "")))
            time.sleep(self.interval)

    def routed_to_leader(self) -> str | None:
        """The leader's IP when the Service routes to it alone, as the last sample saw it."""
        last = self.samples[-1] if self.samples else None
        if last and last.holder_ip and last.routed == (last.holder_ip,):
            return last.holder_ip
        return None


def all_ready(e2e: Cluster, namespace: str, replicas: int) -> bool:
    pods = e2e.json("get", "pods", "-n", namespace, "-l", SELECTOR)["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return len(live) == replicas and all(
        any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
        for p in live
    )


def follow_time(samples: list[Sample], since: float, new_ip: str) -> float:
    """Seconds from the first sample after ``since`` whose Lease names ``new_ip`` to the
    first one whose Service routes to it alone."""
    held = next(s.at for s in samples if s.at >= since and s.holder_ip == new_ip)
    routed = next(s.at for s in samples if s.at >= held and s.routed == (new_ip,))
    return routed - held


def longest(samples: list[Sample], bad: Any) -> float:
    """The longest run of consecutive samples for which ``bad(sample)`` holds, in seconds."""
    worst, start = 0.0, None
    for sample in samples:
        if bad(sample):
            start = sample.at if start is None else start
            worst = max(worst, sample.at - start)
        else:
            start = None
    return worst


def test_the_leader_service_follows_the_leader_across_a_pod_deletion_and_a_rolling_update(
    e2e: Cluster, workload_namespace: str
) -> None:
    ns = workload_namespace
    examples = ROOT / "manifests"
    e2e.kubectl("apply", "-n", ns, "-f", str(examples / "leader-label.yaml"))
    e2e.kubectl("apply", "-n", ns, "-f", str(examples / "examples" / "leader-service.yaml"))
    e2e.kubectl("rollout", "status", "-n", ns, "deployment/api", "--timeout=180s")

    with Sampler(str(e2e.kubeconfig), ns) as sampler:
        first = wait_for(sampler.routed_to_leader, 60, "the Service routing to the leader alone")
        assert all_ready(e2e, ns, 2)  # every pod Ready, leader or not

        # -- the leader's pod is deleted: the Service follows the new leader.
        pods = e2e.json("get", "pods", "-n", ns, "-l", SELECTOR)["items"]
        leader_pod = next(p["metadata"]["name"] for p in pods if p["status"].get("podIP") == first)
        deleted_at = time.monotonic()
        e2e.kubectl("delete", "pod", "-n", ns, leader_pod, "--wait=false")
        second = wait_for(
            lambda: (ip := sampler.routed_to_leader()) not in (None, first) and ip,
            90,
            "the Service routing to the next leader after the deletion",
        )
        after_delete = follow_time(sampler.samples, deleted_at, second)
        wait_for(lambda: all_ready(e2e, ns, 2), 120, "the replacement pod Ready")

        # -- a rolling update with the default strategy completes, and the Service follows.
        old_ips = {
            p["status"].get("podIP")
            for p in e2e.json("get", "pods", "-n", ns, "-l", SELECTOR)["items"]
        }
        rolled_at = time.monotonic()
        e2e.kubectl("rollout", "restart", "-n", ns, "deployment/api")
        e2e.kubectl("rollout", "status", "-n", ns, "deployment/api", "--timeout=180s", timeout=200)
        third = wait_for(
            lambda: (ip := sampler.routed_to_leader()) not in (None, *old_ips) and ip,
            90,
            "the Service routing to a new pod's leader after the rollout",
        )
        after_rollout = follow_time(sampler.samples, rolled_at, third)
        time.sleep(1)

    samples = sampler.samples
    # Never two pods labelled, and the Service never routes to two pods at once.
    assert max(len(s.labelled) for s in samples) == 1, [s for s in samples if len(s.labelled) > 1]
    assert max(len(s.routed) for s in samples) == 1, [s for s in samples if len(s.routed) > 1]
    # The Service routes to a pod without the label only in the EndpointSlice
    # controller's lag after the label came off (docs/application.md: about a second).
    lag = longest(samples, lambda s: bool(s.routed) and not set(s.routed) <= set(s.labelled))
    first_routed = next(i for i, s in enumerate(samples) if s.routed)
    unrouted = longest(samples[first_routed:], lambda s: not s.routed)
    print(
        f"\nleader Service followed the Lease in {after_delete:.2f}s after a pod deletion, "
        f"{after_rollout:.2f}s in a rolling update; routed to an unlabelled pod for at most "
        f"{lag:.2f}s; without any endpoint for at most {unrouted:.2f}s; {len(samples)} samples"
    )
    assert lag < 5, lag
    assert after_delete < 10 and after_rollout < 10, (after_delete, after_rollout)
    # From the leader pod's deletion until its successor is labelled the Service has
    # no endpoint: the app's own shutdown, then the release and the new label. The
    # example's app exits on SIGTERM; one that ignored it held this for its 30 s grace.
    assert unrouted < 10, unrouted
