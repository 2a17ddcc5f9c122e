"""The Lease store conformance suite (``tests/unit/lease_conformance*``) on the real API server.

The same cases ``tests/unit/test_lease_conformance.py`` runs on ``FakeLeases``,
here on the ``LeaseStore`` the sidecar uses, against the kube-apiserver of
``tests/cluster``, each in a fresh namespace: what passes here is what the
fake must do too.
"""

from __future__ import annotations

import asyncio

import pytest

from sidecar.kube.config import load
from sidecar.kube.leases import LeaseStore
from tests.cluster import ControlPlane
from tests.unit.lease_conformance import *  # noqa: F403  (the cases)
from tests.unit.lease_conformance import Backend, Case
from tests.unit.lease_conformance_quiet import *  # noqa: F403  (the cases)
from tests.unit.lease_conformance_sweep import *  # noqa: F403  (the cases)


@pytest.fixture
def backend(cluster: ControlPlane, namespace: str) -> Backend:
    config = load(str(cluster.kubeconfig))

    def run(case: Case) -> None:
        async def go() -> None:
            store, every = LeaseStore(config, namespace), LeaseStore(config, "")
            try:
                await case(store, every)
            finally:
                store.close()
                every.close()

        asyncio.run(go())

    return Backend(fake=False, run=run)
