"""The graceful release of the Lease at shutdown (contract §2, "Release" and "Hand-off").

Guarantees: only a claim this process wrote is released (``Election.may_release``);
every write carries a resourceVersion, so the API server applies it only if
nobody wrote since; the release never waits past the shutdown's deadline.
The first try goes out unread, against our last answered claim
(``Election.settled_claim``), the way client-go's release writes through its
cached object; a 409, or a claim in flight, sends it to read what is there.
It names a successor when one is given (the hand-off), looked up alongside,
so a handover waits one round trip more at most; when the successor has not
claimed once the hand-off's second is over (it died, or was stopping too: a
scale to zero), the release empties the Lease itself and takes the name out of
the roster, so nobody gone is left named as its holder or named again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol

from ..core.election import Election
from ..core.lease import LeaseRecord, vacate
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.errors import ApiError, Conflict
from ..kube.leaselock import LeaseLock

#: How long a release waits for its successor's name before it names nobody.
SUCCESSOR_BUDGET = 1.0
#: A hand-off's leaseDurationSeconds; the release checks on its successor this often.
HANDOFF_SECONDS = 1.0
POLL = 0.1


class Roster(Protocol):
    """Who may be named, and whether an election is new (``handover.Handover``)."""

    async def successor(self, timeout: float) -> str | None:
        """Who a release names; None for anyone."""
        ...

    async def first_term(self, timeout: float) -> bool:
        """Whether an absent Lease was never created: no term of it can still be vouched for."""
        ...

    async def forget(self, identity: str, timeout: float) -> None:
        """Take a name that did not claim out of the roster."""
        ...


Successor = Callable[[float], Awaitable[str | None]]


async def release(
    lock: LeaseLock,
    election: Election,
    clock: Clock,
    log: Logger,
    budget: float,
    roster: Roster | None = None,
) -> None:
    """Vacate (or hand off) our own claim, if the Lease still holds one; logs what it did.

    Only a process holding a claim of its own looks a successor up (a follower
    names nobody), and no request waits past ``budget`` seconds from now.
    """
    deadline = clock.monotonic() + budget

    def left() -> float:
        return max(0.1, deadline - clock.monotonic())

    lookup = roster.successor if roster is not None and election.holding else None
    named = asyncio.ensure_future(_name(lookup, min(left(), SUCCESSOR_BUDGET), log))
    record = election.settled_claim()
    try:
        for _ in range(3):
            if record is None:
                record = await _releasable(lock, election, left(), log)
                if record is None:
                    return
            who = await named
            body = vacate(record, now=clock.wall(), successor=who)
            try:
                written = await lock.replace(body, left())
            except Conflict:
                record = None
                continue
            log.info(
                "released lease", lease=lock.name, transitions=record.transitions, successor=who
            )
            handoff = LeaseRecord.from_object(written)
            if who and roster and not await _until_claimed(lock, handoff, clock, log):
                with contextlib.suppress(ApiError, TimeoutError):
                    await roster.forget(who, left())
            return
    finally:
        named.cancel()


async def _until_claimed(lock: LeaseLock, handoff: LeaseRecord, clock: Clock, log: Logger) -> bool:
    """Until the named successor claims (any write will do); past the hand-off's second, empty it.

    False when it emptied the hand-off: the successor never claimed.
    """
    until = clock.monotonic() + HANDOFF_SECONDS
    while clock.monotonic() < until:
        await asyncio.sleep(POLL)
        obj = await lock.read(POLL * 5)
        if obj is None or LeaseRecord.from_object(obj).resource_version != handoff.resource_version:
            return True
    try:
        await lock.replace(vacate(handoff, now=clock.wall()), HANDOFF_SECONDS)
    except Conflict:  # written meanwhile: a claim after all
        return True
    log.info("the named successor did not claim; released to anyone", successor=handoff.holder)
    return False


async def _releasable(
    lock: LeaseLock, election: Election, timeout: float, log: Logger
) -> LeaseRecord | None:
    """The Lease as it is now, if it is still a claim this process may release (logged if not)."""
    obj = await lock.read(timeout)
    if obj is None:
        return None
    record = LeaseRecord.from_object(obj)
    if record.holder != election.identity:
        log.info("not holding the lease; nothing to release", holder=record.holder)
        return None
    if not election.may_release(record):
        log.info(
            "the lease names this pod but is not a claim this process wrote; leaving it to expire",
            lease=lock.name,
        )
        return None
    return record


async def _name(successor: Successor | None, timeout: float, log: Logger) -> str | None:
    """Who to hand over to; None (anyone may claim) when nobody is given or the lookup fails."""
    if successor is None:
        return None
    try:
        return await successor(timeout)
    except ApiError as err:
        log.debug("could not look up a successor; releasing to anyone", error=str(err))
        return None
