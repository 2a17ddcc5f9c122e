"""How a candidate takes part in handovers: its roster entry, its release, and names that never claimed.

A graceful release names one successor from the election's roster (contract
§2, hand-off), so a handover among many followers costs the release and one
claim. This module holds the three moments of that: joining the roster at
start, releasing our own claim (naming the candidate that joined last), and,
after taking over from a hand-off whose successor never claimed, taking that
name out of the roster. None of it decides who leads: a roster that cannot be
read or written costs only speed, and the release writes only the claim this
process last wrote (``Election.may_release``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable

from ..core.election import Election
from ..core.lease import LeaseRecord, vacate
from ..kit.logs import Logger
from ..kube.errors import ApiError, Conflict
from ..kube.leases import LeaseStore
from .roster import Roster

#: How long a release waits for the roster before it names nobody.
ROSTER_BUDGET = 1.0


class Handover:
    """This candidate's part in handovers; every method logs its own failures."""

    def __init__(
        self,
        store: LeaseStore,
        election: Election,
        lease: str,
        namespace: str,
        identity: str,
        wall: Callable[[], dt.datetime],
        monotonic: Callable[[], float],
        log: Logger,
    ):
        self.store = store
        self.election = election
        self.lease = lease
        self.identity = identity
        self.wall = wall
        self.monotonic = monotonic
        self.log = log
        self.roster = Roster(store, lease, namespace, identity, wall)
        self._forgetting: set[asyncio.Task[None]] = set()

    async def join(self) -> None:
        """Join the roster, so a releasing leader may name this candidate.

        Not needed for safety or for leading: without it, a release names
        somebody else or nobody, and this candidate claims like any follower.
        """
        try:
            await self.roster.join()
        except ApiError as err:
            self.log.once(
                "roster",
                "warning",
                "could not join the election's roster; handovers will not name this pod "
                "(it still takes over as any follower does)",
                roster=self.roster.name,
                error=str(err),
            )

    def claimed(self, over: LeaseRecord | None) -> None:
        """Our acquisition replaced ``over``: a hand-off to someone who never claimed it.

        That candidate is gone or too slow; it is taken out of the roster (in
        the background) so nobody names it again.
        """
        if over is None or over.handoff_from is None or over.holder in (None, self.identity):
            return
        task = asyncio.create_task(self._forget(over.holder), name="roster-forget")
        self._forgetting.add(task)
        task.add_done_callback(self._forgetting.discard)

    async def _forget(self, identity: str) -> None:
        try:
            await self.roster.forget(identity)
            self.log.info(
                "named successor did not take the lease; removed it from the roster",
                successor=identity,
            )
        except ApiError as err:
            self.log.debug("could not update the roster", error=str(err))

    async def leave(self, deadline: float) -> None:
        """Release our own claim (naming a successor when the roster has one), then leave the roster."""
        await self._release(deadline)
        await self.roster.leave(timeout=self._left(deadline))

    def _left(self, deadline: float) -> float:
        return max(0.1, deadline - self.monotonic())

    async def _release(self, deadline: float) -> None:
        # The roster is read alongside, so a handover waits for one round trip
        # more at most; only by a process holding a claim of its own (a
        # follower names nobody).
        holding = self.election.written_version is not None
        wait = min(self._left(deadline), ROSTER_BUDGET)
        named = asyncio.ensure_future(self._successor(wait) if holding else _nobody())
        # First try: our last answered claim, unread (Election.settled_claim);
        # a 409 sends us to read what is there.
        record = self.election.settled_claim()
        try:
            for _ in range(3):
                timeout = self._left(deadline)
                if record is None:
                    record = await self._releasable(timeout)
                    if record is None:
                        return
                successor = await named
                body = vacate(record, now=self.wall(), successor=successor)
                try:
                    await self.store.replace(body, timeout=timeout)
                except Conflict:
                    record = None
                    continue
                self.log.info(
                    "released lease",
                    lease=self.lease,
                    transitions=record.transitions,
                    successor=successor,
                )
                return
        finally:
            named.cancel()

    async def _releasable(self, timeout: float) -> LeaseRecord | None:
        """The Lease as it is now, if it is still a claim this process may release (logged if not)."""
        obj = await self.store.get(self.lease, timeout=timeout)
        if obj is None:
            return None
        record = LeaseRecord.from_object(obj)
        if record.holder != self.identity:
            self.log.info("not holding the lease; nothing to release", holder=record.holder)
            return None
        if not self.election.may_release(record):
            self.log.info(
                "the lease names this pod but is not a claim this process wrote; "
                "leaving it to expire",
                lease=self.lease,
            )
            return None
        return record

    async def _successor(self, timeout: float) -> str | None:
        """Who the roster says to hand over to; None (anyone may claim) when it cannot say."""
        try:
            return await self.roster.successor(timeout=timeout)
        except ApiError as err:
            self.log.debug("could not read the roster; releasing to anyone", error=str(err))
            return None


async def _nobody() -> None:
    return None
