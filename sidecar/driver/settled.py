"""When the election has made its first decision: what background start-up work waits for.

An observer. At start, every sidecar also joins the namespace's roster and
tries the sweep duty (requests to the one shared object, a second connection,
a list of the namespace's Leases). Sent at once, they compete with the
election's own first requests, for the shared object (a brand-new election's
first-term mark) and for CPU, on the way to a brand-new election's first
leader. ``wait`` returns once the first decision is made: a claim of this
candidate answered or refused, another's claim seen, any request failed; and
at the latest ``SETTLE_MAX`` seconds after start, whatever happened.
"""

from __future__ import annotations

import asyncio

from .observer import Call, Control, Observer, View

#: The longest the background start-up work waits for the election's first decision.
SETTLE_MAX = 5.0


class Settled(Observer):
    def __init__(self, identity: str) -> None:
        self.identity = identity
        self._settled = asyncio.Event()

    async def start(self, control: Control) -> None:
        asyncio.get_running_loop().call_later(SETTLE_MAX, self._settled.set)

    def on_call(self, call: Call) -> None:
        if call.error is not None or call.kind in ("create", "acquire", "renew"):
            self._settled.set()

    def on_state(self, view: View) -> None:
        if view.record is not None and view.record.holder not in (None, self.identity):
            self._settled.set()  # another's claim: a follower, most likely

    async def wait(self) -> None:
        await self._settled.wait()
