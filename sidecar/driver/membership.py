"""This candidate's entry in its election's roster: joined, left, forgotten, named as successor.

An observer (contract §2, "Hand-off" and "the roster"). Once it sees its
election's Lease held by another (or by nobody), it joins the election's
roster: an annotation of that Lease (``core.roster``), written by a merge
patch over the version it saw, dropping the oldest entries beyond ``KEEP``,
if a seat is free (``roster.room``: a few write, not every candidate of a
crowd) at a random moment soon after it saw one; a releasing leader names
the candidate that joined last straight from the Lease it writes over, with
no request (``successor``). After taking over from a hand-off whose named successor
never claimed, it takes that name out; a stopping follower leaves first,
before any release, so it is not named. A stopping holder whose hand-off was
claimed does not leave: its successor takes the name out, seconds later
(``FORGET_AFTER``), and only if it was not written again since; a holder
whose release named nobody leaves after it.

A follower that saw every seat taken and is not listed cannot be named
(``quiet``): the lock then has it hear only of vacancies, and read the Lease
now and then instead (``kube.leaselock.follow``); a seat it finds free there
is joined over a fresh read, as the Lease seen may be seconds old by then.

None of it decides who leads: a roster that cannot be read or written costs
only speed (a release then names nobody).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
from collections.abc import Callable
from typing import Any

from ..core import roster
from ..core.election import Event
from ..core.lease import LeaseRecord, uid_of, version_number
from ..kit import aio
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.coordination import PATIENT_READ, Coordination
from ..kube.errors import ApiError, Conflict, NotFound
from . import rosterwrites
from .observer import Observer, View
from .rosterwrites import written

#: How long a stopping candidate waits to leave the roster before its release goes ahead.
LEAVE_BUDGET = 1.0
#: A new leader takes the name of the holder that handed off to it out of the roster after
#: a delay drawn from this range (seconds): a mass rollout's leavers write the shared
#: object spread over it, after the handovers, not all in the same moment.
FORGET_AFTER = (3.0, 20.0)
#: A follower that sees a free seat joins after a random wait of up to this (seconds).
JOIN_SPREAD = 1.0


class Membership(Observer):
    def __init__(self, shared: Coordination, lease: str, identity: str, clock: Clock, log: Logger):
        self.shared, self.lease, self.identity = shared, lease, identity
        self.clock, self.log = clock, log
        self.joined = self.holding = self._stopping = False
        self.out = False  # out of the roster while it may not lead (``stand``)
        #: The uid of the Lease this candidate joined: a Lease created again holds no
        #: entries, so it joins again; one that dropped our entry keeps it out.
        self._joined_uid: str | None = None
        #: The Lease as last seen, which a join waiting for its moment judges room by.
        self._seen: LeaseRecord | None = None
        #: A join is under way; every seat was seen taken (``quiet`` until it takes one).
        self._joining = self._waited = False
        self._refused: str | None = None  # the version a join of ours met a 409 over
        #: Our release handed off and the successor claimed: it takes our name out.
        self.handed_over = False
        #: The holder that handed off to us and stopped, and when we took over: listed until
        #: ``_forget_released`` takes it out; our release drops it meanwhile (``departed``),
        #: so a successor that stops as soon never leaves it to be named.
        self._gone: tuple[str, dt.datetime] | None = None
        self._tasks, self._key = aio.Background("roster"), roster.entry_key(lease, identity)
        #: This candidate's entry is in the Lease as last seen (or a join of it just landed).
        self._listed = self._told_quiet = False
        self._listed_since: int | None = None  # the version our join wrote
        self.on_quiet: Callable[[], None] | None = None  # told when ``quiet`` changes

    def quiet(self) -> bool:
        """No release can name it (not holding, not listed, every seat seen taken)."""
        return self._waited and not (self.holding or self._listed)

    def _note_listed(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        listed, since = self._key in (meta.get("annotations") or {}), self._listed_since
        version = version_number(str(meta.get("resourceVersion", "")))
        if listed or since is None or (version is not None and version > since):
            self._listed = listed

    def _tell(self) -> None:
        if self.quiet() != self._told_quiet and self.on_quiet is not None:
            self._told_quiet = not self._told_quiet
            self.on_quiet()

    def on_state(self, view: View) -> None:
        self._consider(view.record)

    def seen(self, obj: dict[str, Any]) -> None:
        """Every Lease the watch shows (``handofflock``): a seat frees when a candidate
        leaves or an entry ages, which changes no state the elector tells. Once joined,
        only its own entry is looked up: no second parse of every event."""
        if self._joined_uid is not None and uid_of(obj) == self._joined_uid:
            self._note_listed(obj)
            self._tell()
            return
        self._consider(LeaseRecord.from_object(obj))

    def _consider(self, record: LeaseRecord | None) -> None:
        """Join soon if ``record``, the Lease as seen last, has a seat for this candidate."""
        self.holding = record is not None and record.holder == self.identity
        self._seen = record
        if record is not None:
            self._note_listed(record.raw)
        self._begin_join(record)
        self._tell()

    def _begin_join(self, record: LeaseRecord | None) -> None:
        if record is None or self.holding or self._stopping or self._joining or self.out:
            return
        if record.uid == self._joined_uid or record.resource_version == self._refused:
            return
        if not self._room(record):
            self._waited = True
            return
        self._joining = True
        self._tasks.spawn(self._join_soon())

    def on_event(self, event: Event, view: View) -> None:
        """Our acquisition replaced a hand-off: to someone who never claimed it (forget that
        name now), or to us (forget the holder that handed off, later)."""
        over = event.replaced
        if event.kind != "leading" or over is None or over.handoff_from is None:
            return
        if over.holder not in (None, self.identity):
            self._tasks.spawn(self._forgotten(over.holder))
        elif over.holder == self.identity and over.handoff_from != self.identity:
            self._gone = (over.handoff_from, self.clock.wall())
            self._tasks.spawn(self._forget_released(*self._gone))

    async def stand(self, candidate: bool) -> None:
        """Out of the roster while this candidate may not lead (its app unhealthy: no release
        names it), back in once it may."""
        self.out = not candidate
        if candidate:
            self._joined_uid = None  # our leave dropped the entry: join again
            self._consider(self._seen)
        elif self.joined:
            self.joined = False
            with contextlib.suppress(ApiError, TimeoutError):
                async with asyncio.timeout(LEAVE_BUDGET):
                    await self.forget(self.identity)

    def handed_off(self, successor: str) -> None:
        """Our release named ``successor``, which claimed: leaving is its to do after a stop.
        Running on (a hand-over), we join again: to it, a rejoin, not a leftover to drop."""
        if self._stopping:
            self.handed_over = True
            return
        self._joined_uid = None
        self._consider(self._seen)

    async def before_release(self) -> None:
        """A follower leaves the roster first, so no release names a candidate that is stopping."""
        self._stopping = True
        self._tasks.cancel()
        if not self.holding:
            await self.after_release()

    async def after_release(self) -> None:
        if self.joined and not self.handed_over:
            with contextlib.suppress(ApiError, TimeoutError):
                async with asyncio.timeout(LEAVE_BUDGET):
                    await self.forget(self.identity)
            self.joined = False

    def _room(self, record: LeaseRecord) -> bool:
        """Whether the Lease ``record`` has a seat for this candidate (``roster.room``)."""
        notes = roster.notes_of(record.raw)
        return roster.room(notes, self.lease, record.holder, self.identity, self.clock.wall())

    async def _join_soon(self) -> None:
        """Join after a random wait (up to ``JOIN_SPREAD``), over the Lease as seen by then
        (read again, when ``quiet``: its checks are seconds apart), if it still has a seat:
        the candidates that saw the same seat free mostly see it taken by then, and write
        nothing. A 409 waits for the next version seen, then judges again."""
        try:
            await asyncio.sleep(random.uniform(0.0, JOIN_SPREAD))
            seen = self._seen
            if seen is not None and not (self.holding or self._stopping):
                await self.join(seen, fresh=self.quiet())
        finally:
            self._joining = False
        self._consider(self._seen)

    async def join(self, seen: LeaseRecord, fresh: bool = False) -> None:
        """List this candidate in the election's Lease, over the version ``seen`` (``fresh``:
        read first), while it has a seat (``roster.room``).

        A 409 ends it: another write went first, whose event the watch brings
        (``seen``), and the candidates that raced for one seat do not all read
        again. A try the API server did not answer is retried, reading afresh
        from its watch cache: a seat taken meanwhile ends it, and so does the
        Lease gone (a Lease created again is joined when it is seen).
        """

        sent: list[str] = []  # the entry of the last try

        async def once(retry: bool) -> None:
            obj = await self._election_lease() if retry or fresh else seen.raw
            if obj is None:
                return
            record, notes = LeaseRecord.from_object(obj), roster.notes_of(obj)
            if retry or fresh:
                self._seen = record  # what the next judgement goes by, not an older sight
            found = roster.entry_of(notes, self.lease, self.identity)
            if found is not None and found[0] in sent:  # a try that got no answer was
                self._listed_now(obj)  # applied after all: written again, it would add load
                return
            if not self._room(record):
                return
            entry = roster.entry(self.lease, self.identity, self.clock.wall())
            sent[:] = entry.values()
            patch = {**roster.stale(notes, self.lease, self.identity), **entry}
            version = roster.version_of(obj)
            try:
                written_obj = await self._patch_lease(patch, version)
            except NotFound:
                return
            except Conflict:
                self._refused = version
                return
            self._listed_now(written_obj)

        if not await written("join", self.lease, once, self.log):
            self._joined_uid = seen.uid  # refused for good (no patch): not tried again here

    def _listed_now(self, obj: dict[str, Any]) -> None:
        """Our join is in ``obj``: a release may name us from now on, and a Lease older than
        it (a watch resumed from before it replays those) does not say otherwise."""
        self.joined = self._listed = True
        self._joined_uid = uid_of(obj)
        self._listed_since = version_number(roster.version_of(obj) or "")
        self._tell()

    async def _election_lease(self, timeout: float | None = PATIENT_READ) -> dict[str, Any] | None:
        """The election's Lease as the API server's watch cache has it (None when absent)."""
        return await self.shared.store.get(self.lease, timeout=timeout, cached=True)

    async def _patch_lease(
        self, notes: dict[str, str | None], version: str | None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Set (None: remove) annotations of the election's Lease, only over ``version``."""
        meta = {"annotations": notes, "resourceVersion": version}
        return await self.shared.store.patch(self.lease, {"metadata": meta}, timeout=timeout)

    async def forget(
        self, identity: str, timeout: float | None = None, before: dt.datetime | None = None
    ) -> None:
        """Take ``identity`` out of the election's Lease (``rosterwrites.forget``)."""
        await rosterwrites.forget(self.shared.store, self.lease, identity, timeout, before)

    def successor(self, record: LeaseRecord) -> str | None:
        """Who a release written over ``record`` names (the release asks): the candidate
        listed in it that joined last, other than this one and those it drops
        (``departed``); no request."""
        gone = self.departed(record)
        notes = {k: v for k, v in roster.notes_of(record.raw).items() if k not in gone}
        return roster.successor(notes, self.lease, self.identity)

    def departed(self, record: LeaseRecord) -> list[str]:
        """The entry of the holder that handed off to us and stopped, if ``record`` still
        lists it as joined before we took over (one written since is a rejoin: kept)."""
        if self._gone is None:
            return []
        who, taken = self._gone
        found = roster.entry_of(roster.notes_of(record.raw), self.lease, who)
        return [roster.entry_key(self.lease, who)] if found and found[1] < taken else []

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
