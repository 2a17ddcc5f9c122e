"""Shared fixtures: one real control plane per test session, started on first use.

- ``cluster``: the ``ControlPlane`` (admin kubeconfig at ``cluster.kubeconfig``).
- ``api``: an official ``kubernetes.client.ApiClient`` acting as admin.
- ``namespace``: a fresh namespace per test, deleted afterwards.
- ``released``: ``make release``'s folder (wheel, sdist, image, chart, SBOM,
  digests), built once per session into a temporary ``DIST``; root only (buildah),
  skipped elsewhere with a one-line reason, except under ``CI=true``.
- ``node``: a real node (kubelet, containerd, CNI, CoreDNS) with its own control
  plane, started on first use; skipped with a one-line reason where this
  machine cannot run one, except under ``CI=true`` where that fails the test.
  Its teardown fails when stopping it left anything on the machine.

When a test that used the control plane fails, the tails of the API server,
etcd and controller-manager logs are printed in the terminal summary.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import ControlPlane
from tests.cluster.host import unsupported_reason
from tests.cluster.node import Node

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
def node() -> Iterator[Node]:
    reason = unsupported_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the node tests, but {reason}")
        pytest.skip(reason)
    workdir = Path(tempfile.mkdtemp(prefix="grelmicro-node-"))
    started = Node(workdir)
    started.start()
    try:
        yield started
    finally:
        if _state["failed"]:
            _state["logs"] += "\n".join(
                f"----- node {name} log (tail) -----\n{started.plane.log_tail(name, 40)}"
                for name in ("kubelet", "containerd", "kube-proxy", "kube-scheduler")
            )
        left = started.stop()
        if not left:
            started.remove()
        assert not left, f"stopping the node left this behind (see {workdir}): {left}"


@pytest.fixture(scope="session")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        reason = "make release builds the image with buildah, which needs root here"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must build the release, but {reason}")
        pytest.skip(reason)
    dist = tmp_path_factory.mktemp("dist")
    root = Path(__file__).resolve().parents[1]
    started = time.monotonic()
    done = subprocess.run(
        # -o: the virtualenv this very session runs from is never rebuilt under it.
        [
            "make",
            "--no-print-directory",
            "-C",
            str(root),
            "-o",
            ".venv/.installed",
            "release",
            f"DIST={dist}",
        ],
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert done.returncode == 0, f"make release failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    print(f"\nmake release in {time.monotonic() - started:.0f}s:\n{done.stdout}")
    return dist


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
    if report.failed and {"cluster", "node"} & set(getattr(item, "fixturenames", ())):
        _state["failed"] = True


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _state["logs"]:
        terminalreporter.write_sep("-", "control plane logs (a cluster test failed)")
        terminalreporter.write_line(_state["logs"])


TIERS = {"e2e": "node", "node": "node"}  # every other folder but unit: a control plane


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test's tier is where it lives: ``tests/unit`` runs in-process (``make test-fast``);
    ``tests/e2e`` and ``tests/node`` need a real node (marked ``node`` and ``cluster``); every
    other folder needs the control plane or real processes (marked ``cluster``). A test under
    ``tests/unit`` that asks for a cluster fixture is an error, not a slow test in disguise."""
    root = Path(__file__).parent
    for item in items:
        parts = Path(str(item.fspath)).relative_to(root).parts
        folder = parts[0] if len(parts) > 1 else ""
        if folder == "unit":
            callspec = getattr(item, "callspec", None)
            parametrized = set(callspec.params) if callspec is not None else set()
            used = set(getattr(item, "fixturenames", ())) - parametrized
            wanted = {"cluster", "node", "api", "namespace"} & used
            if wanted:
                raise pytest.UsageError(f"{item.nodeid} is in tests/unit but uses {sorted(wanted)}")
            continue
        item.add_marker(pytest.mark.cluster)
        if TIERS.get(folder) == "node" or "node" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.node)
    # A test that needs a node where the chart was never installed (README's commands with the
    # defaults) runs first of the node tests, before any installs it (``release`` is
    # session-scoped); the node still starts where the node tests start.
    fresh = [item for item in items if item.get_closest_marker("fresh_cluster")]
    rest = [item for item in items if not item.get_closest_marker("fresh_cluster")]
    first_node = next((i for i, item in enumerate(rest) if item.get_closest_marker("node")), 0)
    items[:] = rest[:first_node] + fresh + rest[first_node:]
