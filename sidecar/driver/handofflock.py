"""The election's Lease with its hand-off: the lock the elector is given in a pod.

It wraps the bare Lease (``kube.leaselock.LeaseLock``) the way client-go's
``MultiLock`` wraps two locks: the elector sees one lock
(``electionlock.ElectionLock``) and never the roster. What it adds:

- a read that finds no Lease asks whether the election ever had one
  (``firstterm``), only when this lock has seen nothing of the Lease before
  (a read's answer, or a watch event): the first term (contract §2);
- the release names a successor, follows its claim on the watch this lock
  relays (no request while it waits), and empties a hand-off nobody claimed
  (``release.release``);
- the roster sees every Lease the watch shows, as a seat frees without any
  change the elector tells (a candidate leaving, an entry aging);
- a candidate the roster says no release can name (``Roster.quiet``) hears
  only of vacancies, and reads the Lease every 55-75 % of its lease duration
  instead (``LeaseLock.follow``): often enough that a live holder is never
  taken for gone (it renews at least every half of it), seldom enough that a
  crowd of such followers costs less than every write sent to each.

Guarantees: every request and event passes through unchanged; what it adds
can only make an absent Lease free sooner when the roster says no Lease was
ever created, and a release is written only over a claim this process wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable

from ..core.election import Election
from ..core.lease import LeaseRecord, valid_duration
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.leaselock import Changed, Deleted, LeaseLock
from ..kube.leases import Obj
from .electionlock import Absent, Event
from .release import Roster, release

#: The shortest wait on the watch: see ``elector.MIN_WAIT``.
MIN_WAIT = 0.001


#: A quiet follower reads the Lease again after this share of its lease duration.
CHECK_EVERY = (0.55, 0.75)
#: The lease duration a quiet follower checks by while the Lease it saw names none, unless
#: told its candidate's own (``default_duration``: the one its elector then judges by).
DEFAULT_DURATION = 15.0

#: ``first_term(timeout)``: whether the election never had a Lease (``firstterm``).
FirstTerm = Callable[[float], Awaitable[bool]]


class HandoffLock:
    """``lease`` with the hand-off of ``roster`` (none: a release names nobody), and the
    first term that ``first_term`` tells (none: an absent Lease is always waited out).
    ``default_duration`` is the lease duration a Lease naming none is judged by."""

    def __init__(
        self,
        lease: LeaseLock,
        roster: Roster | None,
        first_term: FirstTerm | None = None,
        default_duration: float = DEFAULT_DURATION,
    ) -> None:
        self.lease, self.roster, self.first_term = lease, roster, first_term
        self.name, self.request_timeout = lease.name, lease.request_timeout
        self._known = False  # a read has answered, or the watch told of the Lease
        self._relayed = asyncio.Event()  # set once the elector has taken an event in
        self._default = default_duration
        self._duration = default_duration  # the leaseDurationSeconds of the Lease last seen
        if roster is not None:
            roster.on_quiet = self._follow

    def _follow(self) -> None:
        quiet = self.roster is not None and self.roster.quiet()
        self.lease.follow(self._check_in if quiet else None)

    def _check_in(self) -> float:
        return random.uniform(*CHECK_EVERY) * self._duration

    def _saw(self, obj: Obj) -> None:
        """A quiet follower's checks go by the duration its elector judges expiry by: the
        one of the Lease last read or told (a read at start-up too)."""
        duration = valid_duration((obj.get("spec") or {}).get("leaseDurationSeconds"))
        self._duration = float(duration) if duration is not None else self._default

    async def read(self, timeout: float, claiming: bool = True) -> Obj | Absent:
        obj = await self.lease.read(timeout)
        known = self._known
        self._known = known or obj is not None or claiming  # not claiming: the next may ask
        if obj is not None:
            self._saw(obj)
            return obj
        ask = self.first_term if not known and claiming else None
        return Absent(first_term=ask is not None and await ask(timeout))

    async def create(self, body: Obj, timeout: float) -> Obj:
        return await self.lease.create(body, timeout)

    async def replace(self, body: Obj, timeout: float) -> Obj:
        return await self.lease.replace(body, timeout)

    async def events(self) -> AsyncIterator[Event]:
        async for event in self.lease.events():
            if isinstance(event, Changed | Deleted):
                self._known = True
            if isinstance(event, Changed):
                self._saw(event.obj)
                if self.roster is not None:
                    self.roster.seen(event.obj)
            yield event
            # The elector asks for the next event once it has taken this one in.
            self._relayed.set()

    async def release(
        self,
        election: Election,
        clock: Clock,
        log: Logger,
        budget: float,
        successor: str | None = None,
    ) -> None:
        async def seen(moved: Callable[[LeaseRecord], bool], seconds: float) -> bool:
            """Whether the watch shows the Lease deleted, or a record that has ``moved``,
            within ``seconds`` (the election takes in what the watch shows)."""
            deadline = clock.monotonic() + seconds
            while True:
                self._relayed.clear()
                record = election.seen.record
                if record is None or moved(record):
                    return True
                left = deadline - clock.monotonic()
                if left <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(left, MIN_WAIT)):
                        await self._relayed.wait()

        await release(self.lease, election, clock, log, budget, self.roster, seen, successor)
