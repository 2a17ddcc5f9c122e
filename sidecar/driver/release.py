"""The graceful release of the Lease at shutdown (contract §2, "Release" and "Hand-off").

Guarantees: only a claim this process wrote is released (``Election.may_release``);
every write carries a resourceVersion, so the API server applies it only if
nobody wrote since; the release never waits past the shutdown's deadline.
The first try goes out unread, against our last answered claim
(``Election.settled_claim``), the way client-go's release writes through its
cached object; a 409, or a claim in flight, sends it to read what is there.
It names a successor when the Lease it writes over lists one (the hand-off:
the election's candidates are annotations of its own Lease, so the name costs
no request and is as current as the version the release goes over); it
follows the successor's claim on the election's watch, without a request,
and when the successor has not claimed once the hand-off's second is over (it
died, or was stopping too: a scale to zero), the release empties the Lease
itself and takes the name out of the roster, so nobody gone is left named as
its holder or named again. A candidate's join or leave (an annotation patch)
is not a claim: only a change of the record counts. A stopping candidate that
finds a hand-off naming it empties it at once (``_decline``): it is no claim.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..core.election import Election
from ..core.lease import LeaseRecord, vacate
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.errors import ApiError, Conflict
from ..kube.leaselock import LeaseLock

#: A hand-off's leaseDurationSeconds, for which the release watches for its successor's claim.
HANDOFF_SECONDS = 1.0
#: Past the hand-off's second, how long the successor may still take (its watch and its
#: claim lagging behind a busy API server) before the release empties the Lease. Emptying
#: is for a successor that is gone (a scale to zero); emptying under a successor that is
#: merely slow makes its claim a 409 and costs it a lease duration, while other
#: followers claim at the second anyway.
HANDOFF_GRACE = 2.0


class Roster(Protocol):
    """Who may be named (``membership.Membership``)."""

    #: Called when ``quiet`` may have changed (``handofflock`` follows it).
    on_quiet: Callable[[], None] | None

    def quiet(self) -> bool:
        """Whether no release can name this candidate (it need not hear of every write)."""
        ...

    def successor(self, record: LeaseRecord) -> str | None:
        """Who a release written over ``record`` names; None for anyone."""
        ...

    async def forget(self, identity: str, timeout: float) -> None:
        """Take a name that did not claim out of the roster."""
        ...

    def handed_off(self, successor: str) -> None:
        """The named ``successor`` claimed: it takes this candidate out of the roster."""
        ...

    def departed(self, record: LeaseRecord) -> list[str]:
        """Entries of ``record`` the release drops: of holders that stopped, not yet taken out."""
        ...

    def seen(self, obj: dict[str, Any]) -> None:
        """The Lease as the watch shows it: a seat may free with no change of state."""
        ...


#: ``seen(moved, seconds)``: whether the election's watch shows the Lease deleted, or a
#: record for which ``moved`` is true, within ``seconds``.
Seen = Callable[[Callable[[LeaseRecord], bool], float], Awaitable[bool]]


async def release(
    lock: LeaseLock,
    election: Election,
    clock: Clock,
    log: Logger,
    budget: float,
    roster: Roster | None,
    seen: Seen,
    successor: str | None = None,
) -> None:
    """Vacate (or hand off, to ``successor`` or whom the roster names) our own claim, if the
    Lease still holds one.

    Logs what it did; no request waits past ``budget`` seconds from now.
    """
    deadline = clock.monotonic() + budget

    def left() -> float:
        return max(0.1, deadline - clock.monotonic())

    record = election.settled_claim()
    for _ in range(3):
        if record is None:
            record = await _releasable(lock, election, clock, left(), log)
            if record is None:
                return
        who = successor or (roster.successor(record) if roster is not None else None)
        gone = roster.departed(record) if roster is not None else []
        body = vacate(record, now=clock.wall(), successor=who, without=gone)
        try:
            written = await lock.replace(body, left())
        except Conflict:
            record = None
            continue
        log.info("released lease", lease=lock.name, transitions=record.transitions, successor=who)
        handoff = LeaseRecord.from_object(written)
        if not who or roster is None:
            return
        if await _until_claimed(lock, handoff, record, seen, clock, log):
            claimed = election.record
            if claimed is not None and claimed.holder == who:
                roster.handed_off(who)
            return
        with contextlib.suppress(ApiError, TimeoutError):
            await roster.forget(who, left())
        return


async def _until_claimed(
    lock: LeaseLock,
    handoff: LeaseRecord,
    released: LeaseRecord,
    seen: Seen,
    clock: Clock,
    log: Logger,
) -> bool:
    """Until the named successor claims (any change of the record will do); past the
    hand-off's second, empty it.

    It follows the election's watch (``seen``), which stays open through the
    release: no request while it waits, where polling the Lease cost a read
    every 100 ms from every stopping leader of a mass rollout. A write that
    leaves the hand-off's record as it was (a candidate joining or leaving:
    annotations) is not a claim. The emptying write carries the
    resourceVersion of the hand-off as last read, so a claim the watch did
    not show in time makes it a 409, not a lost claim. False when it emptied
    the hand-off: the successor never claimed.
    """
    ours = (released.resource_version, handoff.resource_version)

    def moved(record: LeaseRecord) -> bool:
        return record.resource_version not in ours and not record.same_content(handoff)

    if await seen(moved, HANDOFF_SECONDS + HANDOFF_GRACE):
        return True  # a later claim or release, or the Lease deleted: not ours to empty
    obj = await lock.read(HANDOFF_SECONDS)  # the watch may lag: one read before emptying
    current = LeaseRecord.from_object(obj) if obj is not None else None
    if current is None or moved(current):
        return True
    emptied = await _to_anyone(lock, current, clock, HANDOFF_SECONDS)  # a 409: a claim after all
    if emptied:
        log.info("the named successor did not claim; released to anyone", successor=handoff.holder)
    return not emptied


async def _releasable(
    lock: LeaseLock, election: Election, clock: Clock, timeout: float, log: Logger
) -> LeaseRecord | None:
    """The Lease as it is now, if it is still a claim this process may release (logged if not)."""
    obj = await lock.read(timeout)
    if obj is None:
        return None
    record = LeaseRecord.from_object(obj)
    if record.holder != election.identity:
        log.info("not holding the lease; nothing to release", holder=record.holder)
        return None
    if record.handoff_from not in (None, election.identity):
        await _decline(lock, record, clock, timeout, log)
        return None
    if not election.may_release(record):
        log.info(
            "the lease names this pod but is not a claim this process wrote; leaving it to expire",
            lease=lock.name,
        )
        return None
    return record


async def _decline(
    lock: LeaseLock, handoff: LeaseRecord, clock: Clock, timeout: float, log: Logger
) -> None:
    """A hand-off naming this stopping pod (its releaser's came as it stopped): no claim, so
    nobody leads under it. Emptied at once, the releaser's marker kept, as its releaser
    would after its fallback wait: a follower that saw the released claim takes it at once."""
    if await _to_anyone(lock, handoff, clock, timeout):
        log.info("a hand-off named this stopping pod; released to anyone", lease=lock.name)


async def _to_anyone(lock: LeaseLock, record: LeaseRecord, clock: Clock, timeout: float) -> bool:
    """Empty ``record`` of its holder (``vacate``: its markers kept), over its own version:
    False when it was written meanwhile (a 409), which is then not ours to empty."""
    try:
        await lock.replace(vacate(record, now=clock.wall()), timeout)
    except Conflict:
        return False
    return True
