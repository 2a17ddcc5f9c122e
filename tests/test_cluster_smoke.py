"""The embedded control plane is a real one: Leases, 409s, RBAC 403s, watches, controllers."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests import accounts
from tests.cluster import ControlPlane


def _lease(name: str, holder: str) -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(
            name=name, labels={"app.kubernetes.io/managed-by": "grelmicro"}
        ),
        spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=15),
    )


def test_lease_roundtrip_via_kubectl(cluster: ControlPlane, api: Any, namespace: str) -> None:
    coord = client.CoordinationV1Api(api)
    coord.create_namespaced_lease(namespace, _lease("leader-smoke", "pod-a"))
    out = cluster.kubectl("get", "leases", "-n", namespace, "-o", "json").stdout
    items = json.loads(out)["items"]
    assert [(i["metadata"]["name"], i["spec"]["holderIdentity"]) for i in items] == [
        ("leader-smoke", "pod-a")
    ]
    assert items[0]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "grelmicro"


def test_stale_resource_version_gets_409(api: Any, namespace: str) -> None:
    coord = client.CoordinationV1Api(api)
    created = coord.create_namespaced_lease(namespace, _lease("leader-cas", "pod-a"))
    first = coord.read_namespaced_lease("leader-cas", namespace)
    first.spec.holder_identity = "pod-b"
    coord.replace_namespaced_lease("leader-cas", namespace, first)
    stale = created
    stale.spec.holder_identity = "pod-c"
    with pytest.raises(ApiException) as err:
        coord.replace_namespaced_lease("leader-cas", namespace, stale)
    assert err.value.status == 409


def test_service_account_needs_a_role(cluster: ControlPlane, api: Any, namespace: str) -> None:
    accounts.service_account(api, namespace)
    sa_api = accounts.token_client(cluster, accounts.token(api, namespace))
    coord = client.CoordinationV1Api(sa_api)
    with pytest.raises(ApiException) as err:
        coord.list_namespaced_lease(namespace)
    assert err.value.status == 403

    accounts.grant_leases(api, namespace)
    deadline = time.monotonic() + 10
    while True:  # RBAC changes reach the authorizer's cache within moments
        try:
            coord.create_namespaced_lease(namespace, _lease("leader-rbac", "sa"))
            break
        except ApiException as e:
            if e.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert coord.read_namespaced_lease("leader-rbac", namespace).spec.holder_identity == "sa"
    sa_api.close()


def test_watch_delivers_lease_update(api: Any, namespace: str) -> None:
    coord = client.CoordinationV1Api(api)
    created = coord.create_namespaced_lease(namespace, _lease("leader-watch", "pod-a"))
    seen: list[str] = []
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(
            coord.list_namespaced_lease,
            namespace,
            resource_version=created.metadata.resource_version,
            timeout_seconds=10,
        ):
            seen.append(f"{event['type']}:{event['object'].spec.holder_identity}")
            if event["type"] == "MODIFIED":
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.3)
    lease = coord.read_namespaced_lease("leader-watch", namespace)
    lease.spec.holder_identity = "pod-b"
    coord.replace_namespaced_lease("leader-watch", namespace, lease)
    t.join(15)
    assert "MODIFIED:pod-b" in seen


def test_deployment_yields_pods(api: Any, namespace: str) -> None:
    apps = client.AppsV1Api(api)
    core = client.CoreV1Api(api)
    labels = {"app": "web"}
    apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1DeploymentSpec(
                replicas=2,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(
                        containers=[client.V1Container(name="web", image="nginx")]
                    ),
                ),
            ),
        ),
    )
    deadline = time.monotonic() + 60
    pods: list[Any] = []
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
        if len(pods) == 2:
            break
        time.sleep(0.3)
    assert len(pods) == 2
    assert all(p.metadata.owner_references[0].kind == "ReplicaSet" for p in pods)


def test_detached_start_and_stop_leave_no_process(tmp_path: Any) -> None:
    import subprocess
    import sys

    from tests.cluster import binaries

    kubeconfig = tmp_path / "kc"
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "tests.cluster", *a, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    started = run("start")
    assert started.returncode == 0, started.stderr
    state = json.loads((tmp_path / "kc.cluster" / "state.json").read_text())
    pids = list(state["pids"].values())
    assert len(pids) == 3
    kubectl = binaries.ensure("kubernetes")["kubectl"]
    ready = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", "get", "--raw", "/readyz"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ready.stdout.strip() == "ok"
    stopped = run("stop")
    assert stopped.returncode == 0, stopped.stderr
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert not (tmp_path / "kc.cluster").exists()
