"""One election's Lease, as the elector sees it: read, create, replace, and a watch that says what changed.

The elector's whole view of the API server (client-go's ``resourcelock``
seam). Hidden here: that a read is a list with a field selector on the name
(its answer carries the resourceVersion the watch resumes from, and it is a
quorum read, the API server's current truth); the watch's resourceVersion
(moved on by every event, bookmarks included); the server ending a watch (it
reconnects from where it was); 410 Gone (events were missed: ``Lost``, and the
watch waits for the next read); lost connections (reconnect after a capped,
jittered backoff, reported as ``Failed`` with the delay). ``events`` yields
``Changed``, ``Deleted``, ``Lost``, ``Failed`` and ``Healthy`` and nothing else.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import ApiError, Gone
from .leases import jittered
from .skew import ClockOffset

#: How long one watch request lasts before the server ends it (jittered ± 20 %).
WATCH_SECONDS = 300
MIN_WATCH_SECONDS = 1.0  # a watch that ends sooner, cleanly, is backed off like a failure


@dataclass(frozen=True)
class Changed:
    obj: dict[str, Any]


@dataclass(frozen=True)
class Deleted:
    obj: dict[str, Any]  # the Lease's last state, as the API server sends it


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
    """A watch request ran its course: the watch works."""


LeaseEvent = Changed | Deleted | Lost | Failed | Healthy


class Store(Protocol):
    """The Lease calls this needs (``LeaseStore``, or a test's in-memory store)."""

    request_timeout: float

    @property
    def clock_offset(self) -> ClockOffset | None: ...

    async def list(
        self, label_selector: str = "", field_selector: str = "", timeout: float | None = None
    ) -> tuple[list[dict[str, Any]], str]: ...

    async def create(
        self, body: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]: ...

    async def replace(
        self, body: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]: ...

    def watch(
        self, name: str, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]: ...


class LeaseLock:
    """The Lease ``name`` of the store's namespace."""

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name
        self.request_timeout = store.request_timeout
        self._version: str | None = None
        self._known = asyncio.Event()

    async def read(self, timeout: float) -> dict[str, Any] | None:
        """The Lease now (None when absent); the watch resumes from this read."""
        items, version = await self.store.list(
            field_selector=f"metadata.name={self.name}", timeout=timeout
        )
        if version:
            self._version = version
            self._known.set()
        return next((i for i in items if (i.get("metadata") or {}).get("name") == self.name), None)

    async def create(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        return await self.store.create(body, timeout=timeout)

    async def replace(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """PUT with the body's resourceVersion: ``Conflict`` when someone wrote since."""
        return await self.store.replace(body, timeout=timeout)

    async def events(self) -> AsyncIterator[LeaseEvent]:
        failures = 0
        while True:
            await self._known.wait()
            version = self._version
            if version is None:
                self._known.clear()
                continue
            started = asyncio.get_running_loop().time()
            try:
                async for kind, obj in self.store.watch(
                    self.name, version, int(jittered(WATCH_SECONDS))
                ):
                    failures = 0
                    meta = obj.get("metadata") or {}
                    self._version = str(meta.get("resourceVersion", "")) or self._version
                    if kind in ("ADDED", "MODIFIED"):
                        yield Changed(obj)
                    elif kind == "DELETED":
                        yield Deleted(obj)
                yield Healthy()
                if asyncio.get_running_loop().time() - started < MIN_WATCH_SECONDS:
                    # A stream that ends at once, cleanly (a proxy cutting it): back off
                    # as after an error rather than reconnect in a tight loop.
                    failures += 1
                    await asyncio.sleep(_backoff(failures))
            except Gone:
                self._version = None
                self._known.clear()
                yield Lost()
            except ApiError as err:
                failures += 1
                delay = _backoff(failures)
                yield Failed(err, delay)
                await asyncio.sleep(delay)


def _backoff(failures: int) -> float:
    return float(min(10.0, 0.5 * 2 ** min(failures, 5)) * random.uniform(0.5, 1.0))
