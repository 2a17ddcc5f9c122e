"""Events on the Lease (issue 13 item 3): ``kubectl describe lease`` says who led and who stopped.

Recorded by the real sidecar against the real API server, read back the way an
operator does, with kubectl. A ServiceAccount without permission on Events
costs one warning and nothing else.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests import accounts
from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, wait_for

Spawn = Callable[..., SidecarProcess]


def _describe(cluster: ControlPlane, namespace: str) -> str:
    return cluster.kubectl("describe", "lease", "leader-main", "-n", namespace).stdout


def test_describe_lease_shows_who_became_leader_and_who_stopped(
    spawn: Spawn, cluster: ControlPlane, namespace: str
) -> None:
    a = spawn("pod-a")
    wait_for(a.leads, 20, what="pod-a to lead")
    token = (a.state() or {})["fencing_token"]
    b = spawn("pod-b")
    wait_for(
        lambda: f"pod-a became leader (fencing token {token})" in _describe(cluster, namespace),
        20,  # Events are held 1 to 10 s (contract §8)
        what="the acquisition Event in kubectl describe lease",
    )
    a.signal(signal.SIGTERM)
    assert a.wait(20) == 0
    wait_for(b.leads, 20, what="pod-b to take over")
    wait_for(
        lambda: "pod-b became leader" in _describe(cluster, namespace),
        20,
        what="the successor's Event",
    )
    described = _describe(cluster, namespace)
    assert "pod-a stopped leading: shutting down" in described, described
    assert "LeaderElection" in described, described
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector=involvedObject.kind=Lease", "-o", "name"
    ).stdout.split()
    assert len(events) == 3, events  # acquired, stopped, acquired: nothing per renewal
    print(described[described.index("Events:") :])


def test_no_permission_on_events_costs_one_warning_and_nothing_else(
    spawn: Spawn, cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path
) -> None:
    accounts.service_account(api, namespace)
    accounts.grant_leases(api, namespace)  # leases only: no events
    kubeconfig = accounts.token_kubeconfig(tmp_path / "sa.kubeconfig", api, cluster, namespace)
    a = spawn("pod-a", kubeconfig=kubeconfig)
    wait_for(a.leads, 20, what="pod-a to lead without Events")
    wait_for(lambda: any("cannot record Events" in m for m in a.messages()), 10, what="the warning")
    a.signal(signal.SIGTERM)  # a step-down Event would be a second attempt: none is made
    assert a.wait(20) == 0
    time.sleep(0.5)
    warned = [line for line in a.logs() if "cannot record Events" in line.get("msg", "")]
    # The API server saw one refused Event and no other attempt (not the step-down's).
    attempts = [
        e
        for e in cluster.audit_events()
        if e.get("stage") == "ResponseComplete"
        and e.get("verb") == "create"
        and e.get("objectRef", {}).get("resource") == "events"
        and e.get("objectRef", {}).get("namespace") == namespace
        and e.get("user", {}).get("username", "").endswith(":elector")
    ]
    assert [e["responseStatus"]["code"] for e in attempts] == [403], attempts
    assert len(warned) == 1 and "create and patch on events" in warned[0]["fix"], warned
    assert not [line for line in a.logs() if line.get("level") == "error"], a.raw_log()
    assert "Traceback" not in a.raw_log()
