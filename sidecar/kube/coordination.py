"""Reads and writes of the namespace's coordination Lease (``core.roster``), shared by this process.

It holds the elections' marks and the sweep duty (each election's roster is in
its own Lease: ``driver.membership``). Guarantees: the first read is shared by
the observers that need it at start (one GET per process, not one each, from
the API server's watch cache: a mass start does not read the object from etcd
once per pod); ``merge`` (a JSON merge patch) creates the object when it is
missing, and conflicts only when given the resourceVersion it must apply over
(a 409 at once: without one, the API server retries a patch on every
conflict, which hundreds of writers of this one object turn into seconds of
its CPU per patch); ``swap`` is optimistic (the whole object written against
the resourceVersion it read, re-read and retried on a 409) for what must not
be lost to a race, the sweep duty. Errors are the ``kube.errors`` classes;
callers decide, but a write the API server refuses as invalid (422: the
annotations past their cap) is also logged here as an error, since it stops
marks and the sweep duty until the object has room. ``store`` is the
process's Lease store, for the election's own Lease.

Whoever creates the object (it was never there, or it was deleted) lists the
namespace's Leases first and creates it with a mark for each: an election
whose Lease outlived the object keeps its mark (contract §2). ``turn_over``
drops the oldest generation of marks when it is due (``marks.rotated``), over
the version read.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..core import marks, roster
from ..kit.clock import Clock
from ..kit.logs import Logger
from .errors import ApiError, Conflict, NotFound
from .leases import LeaseStore

#: How long the reads of the background work wait for an answer (the first read, a join's
#: retry): in a mass start the API server answers them late, not never; a read given up
#: on is work done for nothing and one more retry, and reads do not conflict.
PATIENT_READ = 15.0
#: ``change(current annotations)`` -> the annotations to set, or None to write nothing.
Change = Callable[[dict[str, str]], dict[str, str] | None]


class Coordination:
    def __init__(
        self,
        store: LeaseStore,
        namespace: str,
        log: Logger | None = None,
        clock: Clock | None = None,
    ):
        self.store, self.namespace = store, namespace
        self.log, self.clock = log or Logger("warning"), clock or Clock()
        self._first: asyncio.Future[dict[str, Any] | None] | None = None

    def server_now(self) -> dt.datetime:
        """The API server's clock now, at the earliest (this node's wall clock, corrected by
        the offset the last answer's ``Date`` showed, when there was one)."""
        offset = self.store.clock_offset
        return self.clock.wall() - dt.timedelta(seconds=offset.high if offset else 0.0)

    @contextlib.contextmanager
    def _refusal_logged(self) -> Iterator[None]:
        try:
            yield
        except ApiError as err:
            if err.status == 422:
                self.log.error(
                    f"the API server refused a write of the coordination Lease {roster.NAME}; "
                    "until it has room, elections are not marked (a candidate that finds its "
                    "Lease absent waits a lease duration) and the sweep duty is not claimed",
                    lease=roster.NAME,
                    error=str(err),
                )
            raise

    async def _create(self, notes: dict[str, str], timeout: float | None) -> None:
        """Create the object with ``notes`` and a mark for every Lease there now."""
        items, _ = await self.store.list(timeout=timeout)
        turned = marks.rotated(notes, roster.present(items), self.server_now(), carry=True)
        kept = {k: v for k, v in {**notes, **turned}.items() if v is not None}
        with self._refusal_logged():
            await self.store.create(roster.new_object(self.namespace, kept), timeout)

    async def read(
        self, fresh: bool = False, timeout: float | None = None, cached: bool = False
    ) -> dict[str, Any] | None:
        """The object (None when absent); without ``fresh``, the first read of this process.
        ``cached``: a fresh read, from the API server's watch cache (``LeaseStore.get``), as
        the first read is (what it decides is re-read or written without a precondition)."""
        if fresh or cached:
            return await self.store.get(roster.NAME, timeout=timeout, cached=cached)
        if self._first is None:
            first = self.store.get(roster.NAME, timeout=timeout or PATIENT_READ, cached=True)
            self._first = asyncio.ensure_future(first)
        return await asyncio.shield(self._first)

    async def merge(
        self,
        notes: Mapping[str, str | None],
        timeout: float | None = None,
        version: str | None = None,
    ) -> None:
        """Set (or, with None, remove) annotations; the object is created when missing.
        ``version``: only over that resourceVersion, else ``Conflict``, a missing object too
        (what was read is gone: a new one is no continuation of it)."""
        meta: dict[str, Any] = {"annotations": notes}
        if version:
            meta["resourceVersion"] = version
        for _ in range(3):
            try:
                with self._refusal_logged():
                    await self.store.patch(roster.NAME, {"metadata": meta}, timeout=timeout)
                    return
            except NotFound:
                if version:
                    raise Conflict(
                        f"patch leases: {roster.NAME} deleted since {version}",
                        status=409,
                        verb="patch",
                    ) from None
            kept = {k: v for k, v in notes.items() if v is not None}
            with contextlib.suppress(Conflict):  # another process created it first: patch it
                await self._create(kept, timeout)
                return

    async def swap(self, change: Change, timeout: float | None = None) -> bool:
        """Apply ``change`` to what is there now, optimistically; False when it wrote nothing."""
        for _ in range(3):
            obj = await self.store.get(roster.NAME, timeout=timeout)
            notes = change(roster.notes_of(obj))
            if notes is None:
                return False
            try:
                if obj is None:
                    await self._create(notes, timeout)
                else:
                    meta = obj.setdefault("metadata", {})
                    meta["annotations"] = {**roster.notes_of(obj), **notes}
                    with self._refusal_logged():
                        await self.store.replace(obj, timeout=timeout)
                return True
            except Conflict:
                continue  # someone wrote in between (a mark): judge again on what is there
        return False

    async def turn_over(self, obj: dict[str, Any] | None, timeout: float | None = None) -> bool:
        """Turn the marks of ``obj`` (the object as read) over when due (``marks.due``): list
        the namespace's Leases, then write ``marks.rotated`` over the version read, so a
        mark written since (a Lease created since writes one: ``FirstTermMark``) is a 409
        here, never overwritten; then read again and judge again (3 tries: a starting
        sidecar writes its election's mark at the same time). False when nothing was done."""
        for _ in range(3):
            notes, version = roster.notes_of(obj), roster.version_of(obj)
            if version is None or not marks.due(notes, self.server_now()):
                return False
            items, _ = await self.store.list(timeout=timeout)
            changes = marks.rotated(notes, roster.present(items), self.server_now())
            try:
                await self.merge(changes, timeout, version=version)
            except Conflict:
                obj = await self.store.get(roster.NAME, timeout=timeout)
                continue
            self.log.info("turned the marks over", lease=roster.NAME, listed=len(items))
            return True
        return False
