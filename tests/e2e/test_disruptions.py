"""Failures a pod lives through on a real node, and what the apps see of leadership meanwhile.

A sidecar container killed through the runtime (as an OOM kill or a crash
would end it) is restarted by the kubelet and rejoins the election; a pod
frozen as a whole past its lease (a stalled VM, a node under memory pressure)
never has its app told it leads while the successor's app is told so, neither
during the freeze nor after the thaw. These act through this machine's
containerd and cgroups, so they run on the local node only.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from sidecar.injector.patch import CONTAINER_NAME, VOLUME_NAME
from tests.cluster.node import Node
from tests.e2e.conftest import Cluster, wait_for
from tests.e2e.observer import Views, handovers, overlaps
from tests.e2e.test_election import LEASE_SECONDS, _rfc3339, deploy, leaders, lease, pods


def _pod(e2e: Cluster, namespace: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = e2e.json("get", "pod", "-n", namespace, name)
    return pod


def _sidecar_status(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = pod["status"].get("initContainerStatuses") or []
    return next(s for s in statuses if s["name"] == CONTAINER_NAME)


def test_a_sidecar_killed_through_the_runtime_is_restarted_and_rejoins(
    e2e: Cluster, workload_namespace: str, local_node: Node
) -> None:
    ns = workload_namespace
    deploy(e2e, ns, "worker", replicas=2)
    leader = wait_for(lambda: leaders(e2e, ns, "worker"), 60, "a leader")[0]
    before = _sidecar_status(_pod(e2e, ns, leader))
    with Views(e2e, ns, "worker").recording() as views:
        wait_for(lambda: leader in views.logs, 30, "the leader's app log")
        killed_at = time.time()
        local_node.kill_container(before["containerID"])

        def restarted() -> bool:
            status = _sidecar_status(_pod(e2e, ns, leader))
            return status["restartCount"] > before["restartCount"] and bool(status.get("started"))

        wait_for(restarted, 90, "the kubelet to restart the killed sidecar")
        # Rejoined: the killed pod's app gets answers again, and one pod leads.
        wait_for(
            lambda: any(
                a.code in ("200", "503") for a in views.since(time.time() - 1).get(leader, [])
            ),
            60,
            "the restarted sidecar to answer its app",
        )
        wait_for(lambda: len(leaders(e2e, ns, "worker")) == 1, 60, "one leader again")
        back = time.time() - killed_at
        time.sleep(1)
    seen = views.answers()
    assert not overlaps(seen), overlaps(seen)
    # While no sidecar answered it, the killed pod's app was never told it leads.
    dark = [a for a in views.since(killed_at)[leader] if a.code == "000"]
    assert dark, "the app never noticed its sidecar was gone"
    assert len(pods(e2e, ns, "worker")) == 2
    print(
        f"\n[e2e] leader's sidecar SIGKILLed through containerd -> restarted, one leader again "
        f"after {back:.1f}s (app saw no sidecar for {len(dark)} answers)",
        file=sys.stderr,
    )


def test_a_pod_frozen_past_its_lease_never_overlaps_its_successor(
    e2e: Cluster, workload_namespace: str, local_node: Node
) -> None:
    ns = workload_namespace
    deploy(e2e, ns, "worker", replicas=2)
    frozen = wait_for(lambda: leaders(e2e, ns, "worker"), 60, "a leader")[0]
    uid = _pod(e2e, ns, frozen)["metadata"]["uid"]
    state_file = local_node.pod_volume(uid, VOLUME_NAME) / "state.json"
    with Views(e2e, ns, "worker").recording() as views:
        wait_for(lambda: frozen in views.logs, 30, "the frozen pod's app log")
        local_node.freeze_pod(uid)
        try:
            frozen_at = time.time()
            # What the frozen pod's app would read on waking: its file as it was left.
            left = json.loads(state_file.read_text())
            spec = wait_for(
                lambda: (
                    (s := lease(e2e, ns)["spec"]).get("holderIdentity") not in (None, frozen) and s
                ),
                3 * LEASE_SECONDS,
                "a successor while the leader is frozen",
                interval=0.1,
            )
            successor = spec["holderIdentity"]
            wait_for(
                lambda: any(a.leads for a in views.since(frozen_at).get(successor, [])),
                30,
                "the successor's app to be told it leads",
            )
            time.sleep(2)
        finally:
            local_node.freeze_pod(uid, frozen=False)
        thawed_at = time.time()
        wait_for(
            lambda: (
                len([a for a in views.since(thawed_at).get(frozen, []) if a.code != "000"]) >= 5
            ),
            30,
            "the thawed pod's app to ask again",
        )
        time.sleep(1)
    seen = views.answers()
    assert not overlaps(seen), overlaps(seen)
    after_thaw = views.since(thawed_at)[frozen]
    assert not any(a.leads for a in after_thaw), after_thaw[:5]
    # The file the frozen app was left with stopped vouching before the successor acquired.
    assert left["is_leader"] and left["valid_until"], left
    acquired = _rfc3339(spec["acquireTime"])
    assert _rfc3339(left["valid_until"]) <= acquired, (left, spec)
    moved = [h for h in handovers(seen) if h[0] == frozen]
    print(
        f"\n[e2e] leader pod frozen -> successor acquired {acquired - frozen_at:.1f}s later "
        f"(lease {LEASE_SECONDS}s); frozen file valid until "
        f"{acquired - _rfc3339(left['valid_until']):.1f}s before that; app gaps "
        f"{[round(g, 2) for _, _, g in moved]}",
        file=sys.stderr,
    )
