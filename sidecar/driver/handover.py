"""This candidate's part in handovers: its roster entry, the successor it names, names never claimed.

An observer. At start it joins the election's roster (``core.roster``), so a
releasing leader may name it; the release asks it for a successor (the
candidate that joined last); after taking over from a hand-off whose named
successor never claimed, it takes that name out of the roster, so nobody
names it again; after the release it leaves the roster. None of it decides
who leads: a roster that cannot be read or written costs only speed (a
release then names nobody, and this candidate claims like any follower), and
the release writes only the claim this process last wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ..core import roster
from ..core.election import Event
from ..core.lease import lease_object
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.errors import ApiError, Conflict, NotFound
from ..kube.leases import LeaseStore
from .observer import Control, Observer, View


class Handover(Observer):
    def __init__(
        self,
        store: LeaseStore,
        lease: str,
        namespace: str,
        identity: str,
        clock: Clock,
        log: Logger,
    ):
        self.store = store
        self.name = roster.roster_name(lease)
        self.namespace = namespace
        self.identity = identity
        self.clock = clock
        self.log = log
        self.joined = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, control: Control) -> None:
        self._background(self.join(), "roster-join")

    def on_event(self, event: Event, view: View) -> None:
        """Our acquisition replaced a hand-off to someone who never claimed it: forget that name."""
        over = event.replaced
        if event.kind != "leading" or over is None or over.handoff_from is None:
            return
        if over.holder not in (None, self.identity):
            self._background(self._forgotten(over.holder), "roster-forget")

    async def before_release(self) -> None:
        for task in self._tasks:
            task.cancel()  # a join still under way: leaving follows anyway

    async def after_release(self) -> None:
        await self.leave()

    async def leave(self) -> None:
        """Take this candidate out (graceful exit); a missing roster is fine."""
        if self.joined:
            await self.forget(self.identity)
            self.joined = False

    async def forget(self, identity: str) -> None:
        """Take ``identity`` out (a named successor that never claimed); raises ``errors`` classes."""
        await self._patch({roster.entry_key(identity): None})

    async def successor(self, timeout: float | None = None) -> str | None:
        """Who the roster says to hand over to (the release asks); raises ``errors`` classes."""
        if self.name is None:
            return None
        return roster.successor(await self.store.get(self.name, timeout=timeout), self.identity)

    def _background(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def join(self) -> None:
        """Add this candidate, creating the roster when it is the first."""
        if self.name is None:
            return
        entry = roster.entry(self.identity, self.clock.wall())
        try:
            for _ in range(3):
                with contextlib.suppress(NotFound):
                    await self.store.patch(self.name, {"metadata": {"annotations": entry}})
                    self.joined = True
                    return
                body = lease_object(self.name, self.namespace, roster.LABELS, annotations=entry)
                with contextlib.suppress(Conflict):  # another candidate created it first
                    await self.store.create(body)
                    self.joined = True
                    return
        except ApiError as err:
            self.log.once(
                "roster",
                "warning",
                "could not join the election's roster; handovers will not name this pod "
                "(it still takes over as any follower does)",
                roster=self.name,
                error=str(err),
            )

    async def _forgotten(self, identity: str) -> None:
        try:
            await self.forget(identity)
            self.log.info(
                "named successor did not take the lease; removed it from the roster",
                successor=identity,
            )
        except ApiError as err:
            self.log.debug("could not update the roster", error=str(err))

    async def _patch(self, annotations: dict[str, str | None]) -> None:
        if self.name is not None:
            with contextlib.suppress(NotFound):
                await self.store.patch(self.name, {"metadata": {"annotations": annotations}})
