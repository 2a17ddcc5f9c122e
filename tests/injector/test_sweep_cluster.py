"""The injector's periodic sweep against the real API server: only what contract §5 allows."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sidecar.kube.config import load
from sidecar.kube.errors import Conflict
from sidecar.kube.leases import LeaseStore
from tests.cluster import ControlPlane

from .conftest import Injector, Tls, plain_pod, wait_for_default_service_account

MANAGED = {"app.kubernetes.io/managed-by": "grelmicro"}


def _stamp(seconds_ago: float) -> str:
    when = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease(
    name: str, holder: str, renewed_ago: float | None, duration: int = 15, labels: Any = MANAGED
) -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": holder, "leaseDurationSeconds": duration}
    if renewed_ago is not None:
        spec["renewTime"] = _stamp(renewed_ago)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def test_sweep_deletes_only_abandoned_expired_managed_leases(
    cluster: ControlPlane, api: Any, namespace: str, tls: Tls, tmp_path: Path
) -> None:
    coord, core = client.CoordinationV1Api(api), client.CoreV1Api(api)
    wait_for_default_service_account(api, namespace)
    core.create_namespaced_pod(namespace, plain_pod("alive-pod"))
    leases = {
        # deleted: expired long past the margin, holder pod gone (or released)
        "leader-gone": _lease("leader-gone", "ghost-pod", 300),
        "leader-released": _lease("leader-released", "", 300, duration=1),
        # kept, each for one reason
        "leader-holder-alive": _lease("leader-holder-alive", "alive-pod", 300),
        "leader-live": _lease("leader-live", "ghost-pod", 0, duration=3600),
        # renewed every second by a holder whose clock runs 10 minutes behind
        "leader-behind": _lease("leader-behind", "ghost-pod", 600),
        "leader-unlabelled": _lease("leader-unlabelled", "ghost-pod", 300, labels={}),
        "leader-other-owner": _lease(
            "leader-other-owner", "ghost-pod", 300, labels={"app.kubernetes.io/managed-by": "x"}
        ),
        "leader-unreadable": _lease("leader-unreadable", "ghost-pod", None),
    }
    for body in leases.values():
        coord.create_namespaced_lease(namespace, body)

    stop_renewing = threading.Event()

    def renew_with_a_clock_behind() -> None:
        while not stop_renewing.wait(1.0):
            lease = coord.read_namespaced_lease("leader-behind", namespace)
            lease.spec.renew_time = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)
            coord.replace_namespaced_lease("leader-behind", namespace, lease)

    renewer = threading.Thread(target=renew_with_a_clock_behind, daemon=True)
    renewer.start()
    log = tmp_path / "injector.log"
    # A Lease is deleted once this replica saw it unchanged for its duration + 10 s.
    sweeper = Injector(cluster, tls, log, "--sweep-interval=1s", "--sweep-margin=10s").start()
    try:
        deadline = time.monotonic() + 60
        remaining: set[str] = set(leases)
        while time.monotonic() < deadline:
            remaining = {i.metadata.name for i in coord.list_namespaced_lease(namespace).items}
            if not remaining & {"leader-gone", "leader-released"}:
                break
            time.sleep(0.3)
        assert not remaining & {"leader-gone", "leader-released"}, sweeper.tail()
        # Let at least two more sweeps run, then nothing else may have gone.
        runs = sweeper.metrics()['grelmicro_injector_sweeps_total{result="ok"}']
        while sweeper.metrics()['grelmicro_injector_sweeps_total{result="ok"}'] < runs + 2:
            assert time.monotonic() < deadline + 30, sweeper.tail()
            time.sleep(0.3)
        left = {i.metadata.name for i in coord.list_namespaced_lease(namespace).items}
        assert left == set(leases) - {"leader-gone", "leader-released"}
        assert sweeper.metrics()["grelmicro_injector_swept_leases_total"] >= 2
    finally:
        stop_renewing.set()
        renewer.join()
        assert sweeper.stop() == 0

    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    deleted = [
        line["lease"]
        for line in lines
        if line["msg"] == "sweep: deleted expired lease" and line.get("namespace") == namespace
    ]
    assert sorted(deleted) == ["leader-gone", "leader-released"]  # one line per deletion


def test_a_stale_judgement_cannot_delete_a_renewed_lease(
    cluster: ControlPlane, api: Any, namespace: str
) -> None:
    """The delete's resourceVersion precondition on the real API server: 409, lease kept."""
    coord = client.CoordinationV1Api(api)
    made = coord.create_namespaced_lease(namespace, _lease("leader-renewed", "ghost", 300))
    judged = made.metadata.resource_version
    fresh = coord.read_namespaced_lease("leader-renewed", namespace)
    fresh.spec.renew_time = dt.datetime.now(dt.UTC)
    coord.replace_namespaced_lease("leader-renewed", namespace, fresh)

    async def delete_as_judged() -> None:
        every = LeaseStore(load(str(cluster.kubeconfig)), "")  # the injector's store
        try:
            await every.delete("leader-renewed", judged, namespace=namespace)
        finally:
            every.close()

    with pytest.raises(Conflict):
        asyncio.run(delete_as_judged())
    assert coord.read_namespaced_lease("leader-renewed", namespace).spec.holder_identity == "ghost"


def test_injector_outside_a_cluster_reads_an_exec_plugin_kubeconfig(
    cluster: ControlPlane, api: Any, namespace: str, tls: Tls, tmp_path: Path
) -> None:
    """Issue 13: the injector run by hand uses the kubeconfig a managed cluster gives (exec plugin)."""
    from tests import accounts

    accounts.service_account(api, namespace, "operator")
    client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=f"{namespace}-operator"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name="operator", namespace=namespace)
            ],
        )
    )
    try:
        calls = tmp_path / "calls"
        exec_user = accounts.exec_plugin_user(
            tmp_path, accounts.token(api, namespace, "operator"), calls=calls
        )
        config = accounts.kubeconfig(tmp_path / "kc", cluster.server, cluster.ca_file, exec_user)
        log = tmp_path / "injector.log"
        sweeper = Injector(cluster, tls, log, "--sweep-interval=1s", kubeconfig=config).start()
        try:
            deadline = time.monotonic() + 30
            while sweeper.metrics().get('grelmicro_injector_sweeps_total{result="ok"}', 0) < 2:
                assert time.monotonic() < deadline, sweeper.tail()
                time.sleep(0.3)
            assert sweeper.metrics().get('grelmicro_injector_sweeps_total{result="error"}', 0) == 0
        finally:
            assert sweeper.stop() == 0
        # One connection for the start-up check, the sweeps and kopf's login: the
        # plugin runs once (its credential has no expiry, so nothing refreshes it).
        assert calls.read_text().split() == ["x"], calls.read_text()
        errors = [line for line in log.read_text().splitlines() if '"level": "error"' in line]
        assert not errors, errors
    finally:
        client.RbacAuthorizationV1Api(api).delete_cluster_role_binding(f"{namespace}-operator")
