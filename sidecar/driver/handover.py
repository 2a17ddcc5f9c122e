"""This candidate's part in handovers and first terms: its entry in its election's Lease, the mark.

An observer (contract §2, "Hand-off" and "the roster"). Once it sees its
election's Lease held by another (or by nobody), it joins the election's
roster: an annotation of that Lease (``core.roster``), written by a merge
patch over the version it saw, dropping the oldest entries beyond ``KEEP``;
a releasing leader names the candidate that joined last straight from the
Lease it writes over, with no request. Only the candidates of one election
write its Lease's roster, so a namespace of hundreds of elections starting at
once does not have all its candidates take turns at one shared object. After
taking over from a hand-off whose named successor never claimed, it takes that
name out; a stopping follower leaves first, before any release, so it is not
named. A stopping holder whose hand-off was claimed does not leave: its
successor takes the name out, seconds later (``FORGET_AFTER``), and only if it
was not written again since; a holder whose release named nobody leaves
after it.

It also keeps the mark that says this election has had a Lease (written once
any Lease of it is seen, in the namespace's coordination Lease, which outlives
the election's; written again, live, over a gone one, and after each Lease
this candidate creates: ``_remark``), and answers ``first_term``: whether an
absent Lease was never created, so no term can still be vouched for. A
coordination Lease that is absent, or younger than a lease duration, proves
nothing of the kind (it may have been deleted with the marks): then the
candidate waits, as for a mark.

None of it decides who leads: a roster that cannot be read or written costs
only speed (a release then names nobody, and a first leader waits a lease
duration, as for a deleted Lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ..core import roster
from ..core.defaults import LEASE_DURATION
from ..core.election import Event
from ..core.lease import LeaseRecord
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.errors import ApiError, ApiUnavailable, Conflict, NotFound
from .coordination import PATIENT_READ, Coordination
from .observer import Control, Observer, View

#: How long a stopping candidate waits to leave the roster before its release goes ahead.
LEAVE_BUDGET = 1.0
#: A refused join or mark is retried after up to this (full jitter), doubling up to
#: ``RETRY_MAX``: a mass start's hundreds of writers of one object spread out, not in waves.
RETRY_FIRST, RETRY_MAX = 2.0, 120.0
#: A write that met another (409) is tried again sooner: the server answers, and one of
#: the writers went through; the waits double from this, with full jitter, too.
CONFLICT_FIRST = 0.5
#: Tries of a leave or forget that meets other writes of the roster (409s).
FORGET_TRIES = 10
#: A new leader takes the name of the holder that handed off to it out of the roster after
#: a delay drawn from this range (seconds): a mass rollout's leavers write the shared
#: object spread over it, after the handovers, not all in the same moment.
FORGET_AFTER = (3.0, 20.0)


class Handover(Observer):
    def __init__(
        self,
        shared: Coordination,
        lease: str,
        identity: str,
        clock: Clock,
        log: Logger,
        duration: float = LEASE_DURATION,
    ):
        self.shared, self.lease, self.identity, self.clock, self.log = (
            shared,
            lease,
            identity,
            clock,
            log,
        )
        #: Our lease duration: what a gone mark of this election must outlast, and how old
        #: the coordination Lease must be before a missing mark proves a first term.
        self.duration = duration
        self.joined = False
        #: The uid of the Lease this candidate joined (or is joining): a Lease created again
        #: holds no entries, so it joins again; one that dropped our entry keeps it out.
        self._joined_uid: str | None = None
        self._stopping = False
        #: Whether the election is known to be marked (None until the first read).
        self.marked: bool | None = None
        #: Whether the mark read was live (None until the first read): a gone one is written
        #: live again once a Lease of the election is seen.
        self._live: bool | None = None
        #: The uid of the last Lease of the election seen: one first seen held by us is one
        #: we created, and we write its mark again (``_remark``).
        self._seen_uid: str | None = None
        self.seen_lease = self.holding = False
        #: Our release handed off and the successor claimed: it takes our name out.
        self.handed_over = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, control: Control) -> None:
        self._background(self._mark())

    def on_state(self, view: View) -> None:
        record = view.record
        self.holding = record is not None and record.holder == self.identity
        if record is None:
            return
        if not self.seen_lease:
            self.seen_lease = True
            if self._live is False:  # the first read is in: mark now, else it will
                self._background(self._mark())
        uid = str((record.raw.get("metadata") or {}).get("uid") or "")
        if uid != self._seen_uid:
            self._seen_uid = uid
            if self.holding and not self._stopping:
                self._background(self._remark())
        if not self.holding and not self._stopping and uid != self._joined_uid:
            self._joined_uid = uid
            self._background(self.join(record))

    def on_event(self, event: Event, view: View) -> None:
        """Our acquisition replaced a hand-off: to someone who never claimed it (forget that
        name now), or to us (forget the holder that handed off, later)."""
        over = event.replaced
        if event.kind != "leading" or over is None or over.handoff_from is None:
            return
        if over.holder not in (None, self.identity):
            self._background(self._forgotten(over.holder))
        elif over.holder == self.identity and over.handoff_from != self.identity:
            self._background(self._forget_released(over.handoff_from, self.clock.wall()))

    def handed_off(self, successor: str) -> None:
        """Our release named ``successor`` and it claimed: leaving is its to do (``on_event``)."""
        self.handed_over = True

    async def before_release(self) -> None:
        """A follower leaves the roster first, so no release names a candidate that is stopping."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        if not self.holding:
            await self.after_release()

    async def after_release(self) -> None:
        if self.joined and not self.handed_over:
            with contextlib.suppress(ApiError, TimeoutError):
                async with asyncio.timeout(LEAVE_BUDGET):
                    await self.forget(self.identity)
            self.joined = False

    async def join(self, seen: LeaseRecord) -> None:
        """List this candidate in the election's Lease, over the version ``seen``; retrying.

        A retry reads afresh, from the API server's watch cache (``_written``).
        The Lease gone meanwhile ends it: a Lease created again is joined when
        it is seen.
        """

        sent: list[str] = []  # the entry of the last try

        async def once(retry: bool) -> None:
            obj = await self._election_lease() if retry else seen.raw
            if obj is None:
                return
            notes = roster.notes_of(obj)
            found = roster.entry_of(notes, self.lease, self.identity)
            if found is not None and found[0] in sent:  # a try that got no answer was
                self.joined = True  # applied after all: written again, it would add load
                return
            entry = roster.entry(self.lease, self.identity, self.clock.wall())
            sent[:] = entry.values()
            patch = {**roster.stale(notes, self.lease, self.identity), **entry}
            with contextlib.suppress(NotFound):
                await self._patch_lease(patch, roster.version_of(obj))
                self.joined = True

        await self._written("join", once)

    async def _election_lease(self, timeout: float | None = PATIENT_READ) -> dict[str, Any] | None:
        """The election's Lease as the API server's watch cache has it (None when absent)."""
        return await self.shared.store.get(self.lease, timeout=timeout, cached=True)

    async def _patch_lease(
        self, notes: dict[str, str | None], version: str | None, timeout: float | None = None
    ) -> None:
        """Set (None: remove) annotations of the election's Lease, only over ``version``."""
        meta = {"annotations": notes, "resourceVersion": version}
        await self.shared.store.patch(self.lease, {"metadata": meta}, timeout=timeout)

    async def _mark(self) -> None:
        """Learn whether this election is marked (the process's first read of the namespace's
        coordination Lease); once a Lease of it was seen, record the mark if it is not; retrying."""

        async def once(retry: bool) -> None:
            obj = await self.shared.read(cached=retry, timeout=PATIENT_READ)
            notes = roster.notes_of(obj)
            self.marked = self.marked or roster.marked(notes, self.lease)
            self._live = self._live or roster.live(notes, self.lease)
            if self.seen_lease and not self._live:
                mark = roster.mark(self.lease, self.clock.wall(), self.duration)
                await self.shared.merge(mark, version=roster.version_of(obj))
                self.marked = self._live = True

        await self._written("mark", once)

    async def _remark(self) -> None:
        """After this candidate created its election's Lease: make sure the mark is live.

        A tidy (``Coordination.tidy``) that listed the namespace before the
        create may be writing this mark gone, over a version it read before;
        the object it read was past ``roster.TIDY_AT``. So when the object is
        past it now, or the mark is not live, the mark is written (a quorum
        read, then a write over its version): either the tidy's write gets a
        409, or ours comes after it and is live. A smaller object means a write
        since any such read, so that tidy gets a 409 anyway.
        """

        async def once(retry: bool) -> None:
            obj = await self.shared.read(fresh=True, timeout=PATIENT_READ)
            notes = roster.notes_of(obj)
            if roster.live(notes, self.lease) and roster.size(notes) <= roster.TIDY_AT:
                return
            mark = roster.mark(self.lease, self.clock.wall(), self.duration)
            await self.shared.merge(mark, version=roster.version_of(obj))
            self.marked = self._live = True

        await self._written("mark", once)

    async def _written(self, what: str, write: Callable[[bool], Awaitable[None]]) -> None:
        """``write(retry)`` until it succeeds, after a backoff with full jitter between tries.

        Each try writes over the version it read: in a mass start, hundreds of
        writers of the one shared object take turns through 409s, where patches
        without a version made the API server retry each on every conflict
        until they timed out (504) and were sent again. A 409, an API server that
        did not answer, or a 5xx or 429, is retried; anything else is not.
        """
        delays = {"conflict": CONFLICT_FIRST, "unavailable": RETRY_FIRST}
        retry = False
        while True:
            try:
                await write(retry)
                return
            except Conflict:
                why = "conflict"  # another writer went first: the server answers; read again
            except ApiError as err:
                self._refused(what, err)
                if not isinstance(err, ApiUnavailable):
                    return
                why = "unavailable"
            retry, delay = True, delays[why]
            delays[why] = min(2 * delay, RETRY_MAX)
            await asyncio.sleep(delay * random.uniform(0.1, 1.0))

    def _refused(self, what: str, err: ApiError) -> None:
        """One warning; retried (``ApiUnavailable``: 5xx, 429, no answer) or given up (a 403,
        a missing namespace: the elector reports those, and retrying would not help)."""
        where = self.lease if what == "join" else roster.NAME
        if err.status == 422 and what == "mark":
            return  # logged as an error where it was written (``Coordination``)
        if not isinstance(err, ApiUnavailable):
            consequence = (
                "handovers will not name this pod (it still takes over as any follower does)"
                if what == "join"
                else "a candidate that finds its Lease absent waits a lease duration"
            )
            self.log.once(
                f"roster:{what}",
                "warning",
                f"could not {what} the election in Lease {where}; {consequence}",
                lease=where,
                error=str(err),
            )
        else:
            self.log.once(
                f"roster:{what}:retry",
                "warning",
                f"could not {what} the election in Lease {where} yet; retrying with backoff",
                lease=where,
                error=str(err),
            )

    async def forget(
        self, identity: str, timeout: float | None = None, before: dt.datetime | None = None
    ) -> None:
        """Take ``identity`` out of the election's Lease (it left, or was named and never
        claimed; with ``before``, only an entry that joined before then: not a rejoin); raises
        ``errors``. Over the version read (from the watch cache), so an entry written since
        is judged again; read again after a short jittered wait on a 409 (a renewal, another
        candidate joining or leaving), ``FORGET_TRIES`` times at most."""
        key = roster.entry_key(self.lease, identity)
        for attempt in range(FORGET_TRIES):
            obj = await self._election_lease(timeout)
            found = roster.entry_of(roster.notes_of(obj), self.lease, identity)
            if obj is None or found is None or (before is not None and found[1] >= before):
                return
            try:
                await self._patch_lease({key: None}, roster.version_of(obj), timeout)
                return
            except NotFound:
                return
            except Conflict:
                if attempt == FORGET_TRIES - 1:
                    raise
                await asyncio.sleep(random.uniform(0.0, 0.05 * 2 ** min(attempt, 4)))

    def successor(self, record: LeaseRecord) -> str | None:
        """Who a release written over ``record`` names (the release asks): the candidate
        listed in it that joined last, other than this one; no request."""
        return roster.successor(roster.notes_of(record.raw), self.lease, self.identity)

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
            for _ in range(3):  # the mark goes over the version read; a 409: judge again
                obj = await self.shared.read(fresh=True, timeout=timeout)
                if roster.marked(roster.notes_of(obj), self.lease):
                    return False
                settled = obj is not None and roster.settled(
                    obj, self.shared.server_now(), self.duration
                )
                mark = roster.mark(self.lease, self.clock.wall(), self.duration)
                with contextlib.suppress(Conflict):
                    await self.shared.merge(mark, timeout, version=roster.version_of(obj))
                    self.marked = self._live = True
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

    async def _forgotten(self, identity: str) -> None:
        try:
            await self.forget(identity)
            self.log.info(
                "named successor did not take the lease; removed it from the roster",
                successor=identity,
            )
        except ApiError as err:
            self.log.debug("could not update the roster", error=str(err))

    async def _forget_released(self, identity: str, taken: dt.datetime) -> None:
        """After a while, take out ``identity`` (it handed off to us and stopped), unless its
        entry was written at or after ``taken`` (it rejoined: a restart under the same name)."""
        await asyncio.sleep(random.uniform(*FORGET_AFTER))
        try:
            await self.forget(identity, before=taken)
        except ApiError as err:
            self.log.debug("did not take the last holder out of the roster", error=str(err))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name="roster")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
