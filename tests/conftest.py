"""Shared fixtures: one real control plane per test session, started on first use.

- ``cluster``: the ``ControlPlane`` (admin kubeconfig at ``cluster.kubeconfig``).
- ``api``: an official ``kubernetes.client.ApiClient`` acting as admin.
- ``namespace``: a fresh namespace per test, deleted afterwards.

When a test that used the control plane fails, the tails of the API server,
etcd and controller-manager logs are printed in the terminal summary.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import ControlPlane

_state: dict[str, Any] = {"failed": False, "logs": ""}


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    keep = os.environ.get("GRELMICRO_SIDECAR_KEEP_CLUSTER") == "1"
    workdir = Path(tempfile.mkdtemp(prefix="grelmicro-cluster-"))
    plane = ControlPlane(workdir)
    plane.start()
    try:
        yield plane
    finally:
        if _state["failed"]:
            _state["logs"] = "\n".join(
                f"----- {name} log (tail) -----\n{plane.log_tail(name, 40)}"
                for name in ("kube-apiserver", "etcd", "kube-controller-manager")
            )
        plane.stop()
        if not keep:
            plane.remove()


@pytest.fixture(scope="session")
def api(cluster: ControlPlane) -> Iterator[Any]:
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield api_client
    api_client.close()
    del client


@pytest.fixture
def namespace(api: Any) -> Iterator[str]:
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name, propagation_policy="Background")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed and "cluster" in getattr(item, "fixturenames", ()):
        _state["failed"] = True


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _state["logs"]:
        terminalreporter.write_sep("-", "control plane logs (a cluster test failed)")
        terminalreporter.write_line(_state["logs"])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use the control plane are marked ``cluster`` automatically."""
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
