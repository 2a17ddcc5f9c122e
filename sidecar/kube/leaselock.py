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
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..core import backoff
from .errors import ApiError, Gone
from .leases import LeaseStore, Obj

#: How long one watch request lasts before the server ends it (jittered ± 20 %).
WATCH_SECONDS = 300
MIN_WATCH_SECONDS = 1.0  # a watch that ends sooner, cleanly, is backed off like a failure


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
    """The Lease ``name`` of the store's namespace."""

    def __init__(self, store: LeaseStore, name: str) -> None:
        self.store, self.name, self.request_timeout = store, name, store.request_timeout
        self._version: str | None = None
        self._known = asyncio.Event()
        self._lost = False  # the watch lost its place: the next one starts at the most recent

    async def read(self, timeout: float) -> Obj | None:
        """The Lease now (None when absent); the watch resumes from this read."""
        obj = await self.store.get(self.name, timeout=timeout)
        version = str((obj or {}).get("metadata", {}).get("resourceVersion") or "")
        self._version = "" if self._lost else version  # "": the most recent
        self._lost = False
        self._known.set()
        return obj

    async def create(self, body: Obj, timeout: float) -> Obj:
        return await self.store.create(body, timeout=timeout)

    async def replace(self, body: Obj, timeout: float) -> Obj:  # ``Conflict``: someone wrote since
        return await self.store.replace(body, timeout=timeout)

    async def events(self) -> AsyncIterator[Changed | Deleted | Lost | Failed | Healthy]:
        failures = 0
        while True:
            await self._known.wait()
            if (version := self._version) is None:
                self._known.clear()
                continue
            started = asyncio.get_running_loop().time()
            try:
                seconds = int(WATCH_SECONDS * random.uniform(0.8, 1.2))  # no sidecars in lockstep
                async for kind, obj in self.store.watch(self.name, version, seconds):
                    if failures:  # the first answer after a failure: the API works again
                        failures = 0
                        yield Healthy()
                    seen = str((obj.get("metadata") or {}).get("resourceVersion", ""))
                    self._version = seen or self._version
                    if kind in ("ADDED", "MODIFIED"):
                        yield Changed(obj)
                    elif kind == "DELETED":
                        yield Deleted(obj)
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


def _backoff(failures: int) -> float:
    return backoff.delay(failures, 1.0, 10.0)
