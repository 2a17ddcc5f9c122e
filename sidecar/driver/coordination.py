"""Reads and writes of the namespace's coordination Lease (``core.roster``), shared by this process.

It holds the elections' marks and the sweep duty (each election's roster is in
its own Lease: ``driver.handover``). Guarantees: the first read is shared by
the observers that need it at start (one GET per process, not one each, from
the API server's watch cache: a mass start does not read the object from etcd
once per pod); ``merge`` (a JSON merge patch) creates the object when it is
missing, and conflicts only when given the resourceVersion it must apply over
(a 409 at once: without one, the API server retries a patch on every
conflict, which hundreds of writers of this one object turn into seconds of
its CPU per patch); ``swap`` is optimistic (the whole object written against
the resourceVersion it read, re-read and retried on a 409) for what must not
be lost to a race, the sweep duty. Errors are the ``kube.errors`` classes;
callers decide. ``store`` is the process's Lease store, for the election's own
Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from ..core import roster
from ..kube.errors import Conflict, NotFound
from ..kube.leases import LeaseStore

#: How long the reads of the background work wait for an answer (the first read, a join's
#: retry): in a mass start the API server answers them late, not never; a read given up
#: on is work done for nothing and one more retry, and reads do not conflict.
PATIENT_READ = 15.0
#: ``change(current annotations)`` -> the annotations to set, or None to write nothing.
Change = Callable[[dict[str, str]], dict[str, str] | None]


class Coordination:
    def __init__(self, store: LeaseStore, namespace: str):
        self.store, self.namespace = store, namespace
        self._first: asyncio.Future[dict[str, Any] | None] | None = None

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
        ``version``: only over that resourceVersion, else ``Conflict``."""
        meta: dict[str, Any] = {"annotations": notes}
        if version:
            meta["resourceVersion"] = version
        for _ in range(3):
            with contextlib.suppress(NotFound):
                await self.store.patch(roster.NAME, {"metadata": meta}, timeout=timeout)
                return
            kept = {k: v for k, v in notes.items() if v is not None}
            with contextlib.suppress(Conflict):  # another process created it first: patch it
                await self.store.create(roster.new_object(self.namespace, kept), timeout=timeout)
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
                    body = roster.new_object(self.namespace, notes)
                    await self.store.create(body, timeout=timeout)
                else:
                    meta = obj.setdefault("metadata", {})
                    meta["annotations"] = {**roster.notes_of(obj), **notes}
                    await self.store.replace(obj, timeout=timeout)
                return True
            except Conflict:
                continue  # someone wrote in between (a mark): judge again on what is there
        return False
