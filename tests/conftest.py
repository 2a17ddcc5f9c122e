"""Shared fixtures: one real control plane per test session, started on first use."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import ControlPlane

_failed = False


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    keep = os.environ.get("GRELMICRO_SIDECAR_KEEP_CLUSTER") == "1"
    workdir = Path(tempfile.mkdtemp(prefix="grelmicro-cluster-"))
    plane = ControlPlane(workdir)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
        if _failed:
            for name in ("kube-apiserver", "etcd", "kube-controller-manager"):
                print(f"\n----- {name} log (tail) -----\n{plane.log_tail(name, 60)}")
        if not keep:
            plane.remove()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    global _failed
    outcome = yield
    report = outcome.get_result()
    if report.failed and "cluster" in getattr(item, "fixturenames", ()):
        _failed = True
