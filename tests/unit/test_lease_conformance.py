"""The Lease store conformance suite (``lease_conformance*``) on ``FakeLeases``, in-process.

The driver's tests trust the fake to behave as the API server does; this runs
the very cases ``tests/sidecar/test_lease_conformance.py`` runs on the real
server, on looptime's virtual time (a watch's seconds pass in no time).
"""

from __future__ import annotations

import asyncio

import looptime
import pytest

from tests.unit.fake_leases import FakeLeases
from tests.unit.lease_conformance import *  # noqa: F403  (the cases)
from tests.unit.lease_conformance import Backend, Case
from tests.unit.lease_conformance_quiet import *  # noqa: F403  (the cases)
from tests.unit.lease_conformance_sweep import *  # noqa: F403  (the cases)


@pytest.fixture
def backend() -> Backend:
    def run(case: Case) -> None:
        async def go() -> None:
            await case(FakeLeases("conformance"), None)  # type: ignore[arg-type]

        loop = looptime.new_event_loop()
        try:
            loop.run_until_complete(asyncio.wait_for(go(), 3600))
        finally:
            loop.close()

    return Backend(fake=True, run=run)
