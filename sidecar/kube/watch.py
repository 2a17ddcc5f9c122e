"""Following one Lease: a watch that says what changed, and hides how it is kept.

``LeaseWatch.events`` yields ``Changed(obj)``, ``Deleted(obj)`` or ``Lost()`` and
nothing else. Hidden here: the field selector on the Lease's name; the
resourceVersion it resumes from (moved on by every event, bookmarks included;
set by the caller's reads through ``resume_from``); bookmarks themselves; the
server ending a watch (it reconnects from where it was); 410 Gone (events were
missed: it yields ``Lost`` and waits for the caller's next read); and lost
connections (reconnect after a capped, jittered backoff, each failure reported
to ``on_error`` with the delay).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from .errors import ApiError, Gone
from .leases import LeaseStore, jittered

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


LeaseEvent = Changed | Deleted | Lost


class LeaseWatch:
    def __init__(
        self,
        store: LeaseStore,
        name: str,
        on_error: Callable[[ApiError, float], None],
        on_ok: Callable[[], None],
    ) -> None:
        self.store = store
        self.name = name
        self.on_error = on_error
        self.on_ok = on_ok
        self._version: str | None = None
        self._known = asyncio.Event()

    def resume_from(self, resource_version: str) -> None:
        """A read saw the Lease at ``resource_version``: watch from there."""
        if resource_version:
            self._version = resource_version
            self._known.set()

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
                self.on_ok()
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
                self.on_error(err, delay)
                await asyncio.sleep(delay)


def _backoff(failures: int) -> float:
    return float(min(10.0, 0.5 * 2 ** min(failures, 5)) * random.uniform(0.5, 1.0))
