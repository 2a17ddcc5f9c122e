"""One election's Lease, as the elector sees it: read, create, replace, and a watch that says what changed.

The elector's whole view of the API server (client-go's ``resourcelock`` seam).
A read is a quorum GET by name (client-go's): one key from etcd. The watch
resumes from the Lease's own resourceVersion, or, where there is none to
resume from (the Lease is absent, or the watch lost its place: a quiet Lease's
version may be older than the API server's watch window), starts at the most
recent one, whose first event is the Lease as it is then, if it is there. No
list: a consistent list waits for the API server's watch cache to catch up,
which under load outlasts the request timeout (contract §3). Every event
(bookmarks too) moves the version on; a watch the server ends is resumed; 410 Gone is
``Lost`` (the watch waits for the next read); a broken one is ``Failed``,
retried after a capped, jittered backoff.

A candidate that no release can name (``follow``) watches only the writes
that leave the Lease vacant, which every write of this lock labels
(``VACANT``), and reads the Lease from the API server's watch cache at the
intervals it is given instead: the hand-offs, claims and roster writes of a
crowd reach the few that act on them, not every candidate.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import cast

from ..core import backoff
from .errors import ApiError, Gone
from .leases import LeaseStore, Obj

#: How long one watch request lasts before the server ends it (jittered ± 20 %).
WATCH_SECONDS = 300
MIN_WATCH_SECONDS = 1.0  # a watch that ends sooner, cleanly, is backed off like a failure
#: The label every write of this lock sets on a Lease that names no holder, and removes
#: from one that names one (contract §2, "quiet followers").
VACANT = "leader-election.grelmicro.io/vacant"
VACANCIES = f"{VACANT}=true"

Answers = AsyncIterator[tuple[str, Obj]]
Stream = AsyncGenerator[tuple[str, Obj], None]


@dataclass(frozen=True)
class Changed:
    obj: Obj


@dataclass(frozen=True)
class Deleted:
    obj: Obj  # the Lease's last state, as the API server sends it


@dataclass(frozen=True)
class Lost:
    """Events were missed (410): re-read the Lease; its version resumes the watch."""


@dataclass(frozen=True)
class Failed:
    """The watch broke; it reconnects by itself in ``retry_in`` seconds."""

    error: ApiError
    retry_in: float


@dataclass(frozen=True)
class Healthy:
    """A watch request ran its course, or answered after a failure: the watch works."""


class LeaseLock:
    """The Lease ``name`` of the store's namespace; every write sets ``labels`` on it."""

    def __init__(self, store: LeaseStore, name: str, labels: Mapping[str, str] | None = None):
        self.store, self.name, self.request_timeout = store, name, store.request_timeout
        self.labels = dict(labels or {})
        self._version: str | None = None
        self._known = asyncio.Event()
        self._lost = False  # the watch lost its place: the next one starts at the most recent
        #: Seconds until the next read of a watch that follows vacancies only; None: every write.
        self._checks: Callable[[], float] | None = None
        self._switched = asyncio.Event()  # ``follow`` changed what the watch follows

    def follow(self, checks: Callable[[], float] | None) -> None:
        """Watch every write (``checks`` None), or only those that leave the Lease vacant,
        reading it again every ``checks()`` seconds (from the API server's watch cache)."""
        if (checks is None) != (self._checks is None):
            self._switched.set()
        self._checks = checks

    async def read(self, timeout: float) -> Obj | None:
        """The Lease now (None when absent); the watch resumes from this read."""
        obj = await self.store.get(self.name, timeout=timeout)
        version = str((obj or {}).get("metadata", {}).get("resourceVersion") or "")
        self._version = "" if self._lost else version  # "": the most recent
        self._lost = False
        self._known.set()
        return obj

    async def create(self, body: Obj, timeout: float) -> Obj:
        return await self.store.create(labelled(body, self.labels), timeout=timeout)

    async def replace(self, body: Obj, timeout: float) -> Obj:  # ``Conflict``: someone wrote since
        return await self.store.replace(labelled(body, self.labels), timeout=timeout)

    async def events(self) -> AsyncIterator[Changed | Deleted | Lost | Failed | Healthy]:
        failures = 0
        while True:
            await self._known.wait()
            if (version := self._version) is None:
                self._known.clear()
                continue
            started = asyncio.get_running_loop().time()
            self._switched.clear()
            try:
                async for kind, obj in self._request(version):
                    if failures:  # the first answer after a failure: the API works again
                        failures = 0
                        yield Healthy()
                    seen = str((obj.get("metadata") or {}).get("resourceVersion", ""))
                    self._version = seen or self._version
                    if kind in ("ADDED", "MODIFIED"):
                        yield Changed(obj)
                    elif kind == "DELETED":
                        yield Deleted(obj)
                    elif kind == "ABSENT":
                        yield Lost()  # a check found it gone: the elector reads it
                if self._switched.is_set():
                    continue  # the next request follows what ``follow`` said
                yield Healthy()
                if asyncio.get_running_loop().time() - started < MIN_WATCH_SECONDS:
                    failures += 1  # ended at once, cleanly (a proxy cutting it): no tight loop
                    await asyncio.sleep(_backoff(failures))
            except Gone:
                self._version, self._lost = None, True
                self._known.clear()
                yield Lost()
            except ApiError as err:
                failures += 1
                delay = _backoff(failures)
                yield Failed(err, delay)
                await asyncio.sleep(delay)

    async def _request(self, version: str) -> Answers:
        """One watch request from ``version``, as ``follow`` said; it ends early on a switch."""
        seconds = int(WATCH_SECONDS * random.uniform(0.8, 1.2))  # no sidecars in lockstep
        quiet = self._checks is not None
        watch = cast(
            Stream, self.store.watch(self.name, version, seconds, VACANCIES if quiet else "")
        )
        answers = cast(Stream, self._with_checks(watch)) if quiet else watch
        async with contextlib.aclosing(watch), contextlib.aclosing(answers):
            async for answer in answers:
                yield answer
                if self._switched.is_set():
                    return

    async def _with_checks(self, watch: Answers) -> Answers:
        """``watch`` (of vacancies) with a read of the Lease every ``_checks()`` seconds, and
        at once when the watch says a vacancy ended (its DELETED: a claim, or a deletion);
        ends when ``follow`` switches to every write. ``ABSENT``: a read found no Lease."""
        loop = asyncio.get_running_loop()
        switched = asyncio.ensure_future(self._switched.wait())
        pending = asyncio.ensure_future(anext(watch))
        check_at = loop.time() + self._next_check()
        try:
            while not self._switched.is_set():
                left = max(0.0, check_at - loop.time())
                done, _ = await asyncio.wait(
                    (pending, switched), timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                if pending in done:
                    try:
                        kind, obj = pending.result()
                    except StopAsyncIteration:
                        return
                    pending = asyncio.ensure_future(anext(watch))
                    if kind != "DELETED":
                        yield kind, obj
                        continue
                elif switched in done:
                    return
                found = await self.store.get(self.name, timeout=self.request_timeout, cached=True)
                yield ("MODIFIED", found) if found is not None else ("ABSENT", {})
                check_at = loop.time() + self._next_check()  # by what this check showed
        finally:
            switched.cancel()
            pending.cancel()
            await asyncio.wait((pending,))
            if not pending.cancelled():
                pending.exception()  # taken: what the watch met after the switch is moot

    def _next_check(self) -> float:
        checks = self._checks
        return checks() if checks is not None else WATCH_SECONDS


def labelled(body: Obj, extra: Mapping[str, str] | None = None) -> Obj:
    """``body`` with ``extra`` labels, and ``VACANT`` set when it names no holder, removed
    when it names one."""
    meta = dict(body.get("metadata") or {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != VACANT}
    labels |= extra or {}
    if not (body.get("spec") or {}).get("holderIdentity"):
        labels[VACANT] = "true"
    return {**body, "metadata": {**meta, "labels": labels}}


def _backoff(failures: int) -> float:
    return backoff.delay(failures, 1.0, 10.0)
