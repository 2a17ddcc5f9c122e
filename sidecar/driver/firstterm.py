"""Whether this election ever had a Lease: its mark in the namespace's coordination Lease.

An observer (contract §2, "No Lease" and "the first term"). It keeps the mark
that says this election has had a Lease: written once any Lease of it is
seen, in the namespace's coordination Lease, which outlives the election's;
written again into the newest generation when it is only in older ones, and
after each Lease this candidate creates more than ``marks.REMARK_AFTER`` after
its own mark (``_remark``).
It answers ``first_term``: whether an absent Lease was never created, so no
term can still be vouched for and the first candidate may lead at once. A
coordination Lease that is absent, or younger than a lease duration, proves
nothing of the kind (it may have been deleted with the marks): then the
candidate waits, as for a mark.

None of it decides who leads by itself: a mark that cannot be read or
written makes a first leader wait a lease duration, as for a deleted Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ..core import backoff, marks, roster
from ..core.defaults import LEASE_DURATION
from ..kit import aio
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.coordination import PATIENT_READ, Coordination
from ..kube.errors import ApiError, Conflict
from .observer import Control, Observer, View
from .rosterwrites import CONFLICT_FIRST, JITTER, written


class FirstTermMark(Observer):
    def __init__(
        self,
        shared: Coordination,
        lease: str,
        identity: str,
        clock: Clock,
        log: Logger,
        duration: float = LEASE_DURATION,
    ):
        self.shared, self.lease, self.identity = shared, lease, identity
        self.clock, self.log = clock, log
        #: Our lease duration: what a gone mark of this election must outlast, and how old
        #: the coordination Lease must be before a missing mark proves a first term.
        self.duration = duration
        #: Whether the election is known to be marked (None until the first read).
        self.marked: bool | None = None
        #: Whether the mark read was in the newest generation (None until the first read):
        #: one only in older ones is written again once a Lease of the election is seen.
        self._live: bool | None = None
        #: The uid of the last Lease of the election seen: one first seen held by us is one
        #: we created, and we write its mark again (``_remark``).
        self._seen_uid: str | None = None
        #: When (monotonic) the last live mark this process wrote was stamped.
        self._wrote_at: float | None = None
        self.seen_lease = self._stopping = False
        self._tasks = aio.Background("mark")

    async def start(self, control: Control) -> None:
        self._tasks.spawn(self._mark())

    def on_state(self, view: View) -> None:
        record = view.record
        if record is None:
            return
        if not self.seen_lease:
            self.seen_lease = True
            if self._live is False:  # the first read is in: mark now, else it will
                self._tasks.spawn(self._mark(reread=True))
        uid = record.uid
        if uid != self._seen_uid:
            self._seen_uid = uid
            if record.holder == self.identity and not self._stopping:  # we created it
                self._tasks.spawn(self._remark())

    async def before_release(self) -> None:
        self._stopping = True
        self._tasks.cancel()

    async def _write_mark(self, obj: dict[str, Any] | None, timeout: float | None = None) -> None:
        """Write this election's live mark over the version of ``obj`` (``Conflict`` when
        someone wrote since)."""
        stamped = self.clock.monotonic()
        mark = marks.marking(
            roster.notes_of(obj), self.lease, self.shared.server_now(), self.duration
        )
        await self.shared.merge(mark, timeout, version=roster.version_of(obj))
        self.marked = self._live = True
        self._wrote_at = stamped

    async def _mark(self, reread: bool = False) -> None:
        """Learn whether this election is marked (the process's first read of the namespace's
        coordination Lease); once a Lease of it was seen, record the mark if it is not; retrying.
        ``reread``: the first read is older than the Lease seen (its creator marked it since,
        most likely): read again before writing over it."""

        async def once(retry: bool) -> None:
            obj = await self.shared.read(cached=retry or reread, timeout=PATIENT_READ)
            found = marks.read(roster.notes_of(obj))
            self.marked = self.marked or found.has(self.lease)
            self._live = self._live or found.live(self.lease)
            if self.seen_lease and not self._live:
                await self._write_mark(obj)

        await written("mark", roster.NAME, once, self.log)

    async def _remark(self) -> None:
        """After this candidate created its election's Lease: make sure the mark is live.

        The turnover (``Coordination.turn_over``) that listed the namespace
        before the create leaves the bit out of the newest generation; the bit
        is then in an older one, dropped at the turnover after next. A create
        within ``marks.REMARK_AFTER`` of this process's own mark needs nothing:
        the next turnover lists the Lease (``marks.epoch`` is longer). Otherwise
        the bit is read (a quorum read) and, when not in the newest generation,
        set there over the version read.
        """
        wrote = self._wrote_at
        if wrote is not None and self.clock.monotonic() - wrote < marks.REMARK_AFTER:
            return

        async def once(retry: bool) -> None:
            obj = await self.shared.read(fresh=True, timeout=PATIENT_READ)
            if marks.live(roster.notes_of(obj), self.lease):
                return
            await self._write_mark(obj)

        await written("mark", roster.NAME, once, self.log)

    async def first_term(self, timeout: float | None = None) -> bool:
        """Whether this election never had a Lease: then no term of it can still be vouched for.

        True only once the mark is written, so that the next candidate to find
        the Lease absent (deleted under a leader that may still vouch) waits.
        False, after writing the mark all the same, when the coordination Lease
        is absent or younger than our lease duration (``roster.settled``): it
        may have been deleted with this election's mark, under a Lease deleted
        with it whose holder still vouches (``kubectl delete leases --all``).
        """
        try:
            for attempt in range(3):  # the mark goes over the version read; a 409: judge again
                if attempt:  # others wrote in between: a mass start; spread out, not at once
                    await asyncio.sleep(backoff.delay(attempt, CONFLICT_FIRST, 1.0, jitter=JITTER))
                # From the watch cache: a stale read is a 409 below, never a wrong answer.
                obj = await self.shared.read(cached=True, timeout=timeout)
                if marks.marked(roster.notes_of(obj), self.lease):
                    return False
                settled = obj is not None and roster.settled(
                    obj, self.shared.server_now(), self.duration
                )
                with contextlib.suppress(Conflict):
                    await self._write_mark(obj, timeout)
                    if not settled:
                        self.log.info(
                            f"no mark of the election, but the coordination Lease {roster.NAME} "
                            "is new (or was deleted): waiting a lease duration",
                            lease=self.lease,
                        )
                    return settled
        except ApiError as err:
            self.log.debug("could not read or mark the election; waiting a lease", error=str(err))
        return False
