"""Fixtures for real sidecar processes against the embedded control plane."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess


@pytest.fixture
def spawn(
    cluster: ControlPlane, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., SidecarProcess]]:
    """``spawn(identity, **kw)`` starts a sidecar in the test's namespace; all are killed at the end."""
    started: list[SidecarProcess] = []

    def make(identity: str, start: bool = True, **kw: Any) -> SidecarProcess:
        kw.setdefault("kubeconfig", cluster.kubeconfig)
        proc = SidecarProcess(tmp_path, namespace=namespace, identity=identity, **kw)
        started.append(proc)
        return proc.start() if start else proc

    yield make
    for proc in started:
        proc.stop()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for proc in started:
            print(f"\n----- sidecar {proc.identity} log -----\n{proc.raw_log()[-4000:]}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
