"""The Lease check's memory (``leaseaccess.LeaseAccess``): what it asks the API server, and when.

The API server is a stub that counts the SubjectAccessReviews and answers as
told; the clock is virtual. (Against the real API server and its authorizer:
tests/injector/test_lease_access.py.)
"""

from __future__ import annotations

import asyncio
from typing import Any

from sidecar.injector.leaseaccess import TTL, LeaseAccess
from sidecar.injector.rbac import VERBS
from sidecar.kit.logs import Logger


class Reviews:
    """Answers every review with ``allowed``, after a pause (so requests overlap)."""

    def __init__(self) -> None:
        self.allowed = True
        self.asked: list[str] = []

    async def call(self, method: str, url: str, what: str, body: Any, timeout: float) -> Any:
        self.asked.append(body["spec"]["resourceAttributes"]["verb"])
        await asyncio.sleep(0.01)
        return {"status": {"allowed": self.allowed}}


def test_a_burst_of_one_accounts_pods_asks_once_and_a_yes_is_kept_for_the_ttl() -> None:
    async def go() -> None:
        now = [0.0]
        api = Reviews()
        access = LeaseAccess(api, "grelmicro-sidecar-leases", Logger("error"), lambda: now[0])  # type: ignore[arg-type]
        answers = await asyncio.gather(*(access.missing("ns", "default") for _ in range(50)))
        assert answers == [None] * 50
        assert api.asked == list(VERBS)  # one review per verb for the whole burst
        now[0] = TTL - 1
        assert await access.missing("ns", "default") is None
        assert len(api.asked) == len(VERBS)  # remembered
        assert await access.missing("ns", "worker") is None
        assert len(api.asked) == 2 * len(VERBS)  # another account is asked for
        now[0] = TTL + 1
        await access.missing("ns", "default")
        assert len(api.asked) == 3 * len(VERBS)  # forgotten after the TTL

    asyncio.run(go())


def test_a_no_is_never_kept() -> None:
    async def go() -> None:
        api = Reviews()
        api.allowed = False
        access = LeaseAccess(api, "", Logger("error"))  # type: ignore[arg-type]
        first = await access.missing("ns", "default")
        assert first is not None and "kubectl apply --namespace ns -f manifests/rbac.yaml" in first
        api.allowed = True  # the user granted it
        assert await access.missing("ns", "default") is None
        assert len(api.asked) == 2 * len(VERBS)

    asyncio.run(go())
