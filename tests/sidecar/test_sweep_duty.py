"""The sweep duty when the exit sweep fails, against the real API server (contract §5 step 3).

The duty's holder lists the namespace's managed Leases at start and sweeps at
its exit, then gives the duty back. A sweep whose list is refused (here the
sidecar's ServiceAccount loses ``list`` on leases between its start-up list
and its exit) must still give it back: otherwise the namespace goes unswept
until the claim lapses, an hour later.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from sidecar.core import roster
from tests import accounts
from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, wait_for

Spawn = Callable[..., SidecarProcess]
#: Every verb the sidecar needs but ``list``, which a Role of its own grants and takes back.
ALL_BUT_LIST = [verb for verb in accounts.LEASE_VERBS if verb != "list"]


def _sweeper(api: Any, namespace: str) -> str | None:
    """Who holds the namespace's sweep duty ("" nobody; None: no coordination Lease)."""
    try:
        obj = client.CoordinationV1Api(api).read_namespaced_lease(roster.NAME, namespace)
    except client.ApiException:
        return None
    return roster.duty(obj.metadata.annotations or {})[0]


def _listed(cluster: ControlPlane, namespace: str, user: str) -> bool:
    """Whether ``user`` listed the namespace's managed Leases, answered 200 (the audit log)."""
    for event in cluster.audit_events():
        ref = event.get("objectRef") or {}
        if (
            event.get("stage") == "ResponseComplete"
            and event.get("verb") == "list"
            and (event.get("user") or {}).get("username") == user
            and ref.get("resource") == "leases"
            and ref.get("namespace") == namespace
            and "labelSelector" in str(event.get("requestURI"))
            and (event.get("responseStatus") or {}).get("code") == 200
        ):
            return True
    return False


def _until_denied(api: Any, namespace: str, user: str, verb: str, timeout: float = 30) -> None:
    """Until the API server's authorizer refuses ``verb`` on leases to ``user``."""
    deadline = time.monotonic() + timeout
    while accounts.may(api, namespace, user, verb):
        assert time.monotonic() < deadline, f"{user} may still {verb} leases"
        time.sleep(0.05)


def test_an_exit_sweep_whose_list_is_refused_gives_the_duty_back_and_says_so(
    spawn: Spawn, cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path
) -> None:
    sa = "sweeper"
    user = f"system:serviceaccount:{namespace}:{sa}"
    accounts.service_account(api, namespace, sa)
    accounts.grant(api, namespace, sa, "leases", "coordination.k8s.io", "leases", ALL_BUT_LIST)
    accounts.grant(api, namespace, sa, "leases-list", "coordination.k8s.io", "leases", ["list"])
    accounts.wait_until_allowed(api, namespace, user, accounts.LEASE_VERBS)
    kubeconfig = accounts.token_kubeconfig(tmp_path / "sa.kubeconfig", api, cluster, namespace, sa)
    a = spawn("pod-a", kubeconfig=kubeconfig)
    wait_for(lambda: _sweeper(api, namespace) == "pod-a", 20, what="pod-a to take the duty")
    wait_for(lambda: _listed(cluster, namespace, user), 20, what="pod-a's start-up list")
    wait_for(a.leads, 20, what="pod-a to lead")
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.delete_namespaced_role_binding("leases-list", namespace)
    rbac.delete_namespaced_role("leases-list", namespace)
    _until_denied(api, namespace, user, "list")
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0, a.raw_log()[-3000:]
    assert _sweeper(api, namespace) == "", "the duty is kept by a sidecar that has exited"
    failed = [r for r in a.logs() if "sweep" in str(r.get("msg")) and r.get("level") == "warning"]
    assert len(failed) == 1, failed
    assert "sweep done" not in a.messages()
