"""A claim the API server applied but whose answer never came back (issue 38, contract §2).

A real sidecar reaches the real API server through ``apiproxy``, which forwards
its create of the election's Lease and answers it 500: the Lease names the
sidecar, which was never told so. Found in ``bench.crowd`` (500 candidates
started at once): the create's answer did not come within the request timeout,
its sender waited its own claim out for a lease duration like anyone's, and
the election had no leader meanwhile.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import client

from tests import accounts
from tests.cluster import ControlPlane
from tests.sidecar.apiproxy import ApiProxy
from tests.sidecar.proc import SidecarProcess, wait_for

LEASE = 15.0
TIMING = (f"--lease-duration={LEASE:g}s", "--renew-deadline=10s", "--retry-period=1s")


def test_a_create_applied_but_unanswered_is_taken_up_not_waited_out(
    cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path
) -> None:
    accounts.service_account(api, namespace)
    accounts.grant_leases(api, namespace)
    proxy = ApiProxy(cluster.server, str(cluster.ca_file)).start()
    lost: list[float] = []

    def first_create(method: str, path: str, body: Any) -> bool:
        name = ((body or {}).get("metadata") or {}).get("name")
        if method != "POST" or name != "leader-main" or lost:
            return False
        lost.append(time.monotonic())
        return True

    proxy.rules.append((first_create, "lose"))
    kubeconfig = accounts.kubeconfig(
        tmp_path / "a.kubeconfig",
        proxy.url,
        cluster.ca_file,
        {"token": accounts.token(api, namespace)},
        namespace,
    )
    a = SidecarProcess(tmp_path, kubeconfig, namespace, identity="a", extra=TIMING).start()
    try:
        # Up to a lease duration of first-term wait in a new namespace, then the create.
        wait_for(
            lambda: proxy.requests("lose"), 2 * LEASE + 10, what="a create whose answer is lost"
        )
        assert proxy.requests("lose")[0].upstream == 201  # applied by the API server
        created = client.CoordinationV1Api(api).read_namespaced_lease("leader-main", namespace)
        assert created.spec.holder_identity == "a"
        wait_for(a.leads, 2 * LEASE, what="a to lead")
        took = time.monotonic() - lost[0]
        assert took < LEASE / 2, f"a led {took:.1f}s after its create landed: waited it out"
        state = a.state()
        assert state is not None
        token = int(created.metadata.resource_version)
        assert state["fencing_token"] > token  # the term began with a write a was answered
        assert a.alive
    finally:
        a.stop()
        proxy.close()
        print(f"----- a -----\n{a.raw_log()[-3000:]}")
