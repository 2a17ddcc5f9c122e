"""Change notifications: long polls (``/leader?wait=``) and Server-Sent Events (``/events``).

Both wait on ``Changes``, numbered by a version named ``<process>-<n>``
(contract §4, change notifications). At most ``MAX_WAITERS`` requests wait at
once, so waiting clients can never hold every connection a probe needs; at
shutdown every stream gets the last state and ends, and long polls answer.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Coroutine
from typing import Any, TypeVar
from urllib.parse import parse_qs

import h11

from ..core.durations import ACCEPTED_FORM, parse_duration
from .changes import Changes

# At most this many long polls and streams at once, a wait of at most MAX_WAIT
# seconds, and a comment line on an idle stream every KEEPALIVE seconds (a proxy
# keeps it open; a vanished client is noticed on the write).
MAX_WAITERS = 16
MAX_WAIT = 300.0
KEEPALIVE = 15.0
#: An event a client does not read within this closes its stream.
SEND_DEADLINE = 5.0
CLOSE_GRACE = 0.5  # at shutdown, time for streams to send their last event

Answer = tuple[int, str, bytes]
T = TypeVar("T")


class Notifications:
    def __init__(self, changes: Changes):
        self.changes = changes
        self._waiting: set[asyncio.Task[Any]] = set()
        # ETags name this process too: a version number from a restarted sidecar never matches.
        self._boot = os.urandom(4).hex()

    def event_id(self, version: int) -> str:
        """``<process>-<version>``: the SSE ``id`` and, quoted, /leader's ETag."""
        return f"{self._boot}-{version}"

    def etag(self, version: int) -> str:
        return f'"{self.event_id(version)}"'

    def too_many(self) -> Answer | None:
        """429 when ``MAX_WAITERS`` requests already wait, else None."""
        if len(self._waiting) < MAX_WAITERS:
            return None
        return (
            429,
            "text/plain",
            f"too many waiting requests ({MAX_WAITERS}); retry later\n".encode(),
        )

    async def waiter(self, waiting: Coroutine[Any, Any, T]) -> T:
        """Run one waiting request where ``close`` can see it (the caller checked the bound)."""
        task = asyncio.ensure_future(waiting)
        self._waiting.add(task)
        try:
            return await task
        finally:
            self._waiting.discard(task)

    async def conditional(self, query: str, seen: str | None) -> Answer | None:
        """``?wait=`` and ``If-None-Match`` on /leader: an answer of their own (400, 429, 304) or None.

        With ``wait`` the request is held until the version differs from ``seen``
        (an ETag; without one, from the version when it arrived) or the wait ends.
        """
        wait = parse_qs(query).get("wait")
        if wait is not None:
            seconds = _wait_seconds(wait[-1])
            if isinstance(seconds, tuple):
                return seconds
            if (refused := self.too_many()) is not None:
                return refused
            known = self.changes.version
            if seen is None or seen == self.etag(known):  # else the client is behind: answer now
                await self.waiter(self.changes.wait(known, seconds))
        return (304, "", b"") if seen == self.etag(self.changes.version) else None

    async def stream(self, conn: h11.Connection, writer: asyncio.StreamWriter) -> None:
        """Server-Sent Events: the state now, then every change, until shutdown."""
        headers = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-store")]
        writer.write(conn.send(h11.Response(status_code=200, headers=headers)))
        sent = self.changes.version - 1  # the state now comes first, then every change
        while True:
            for version, state in self.changes.since(sent):
                data = json.dumps(state.as_dict(), separators=(",", ":"))
                line = f"id: {self.event_id(version)}\ndata: {data}\n\n"
                writer.write(conn.send(h11.Data(data=line.encode())))
                sent = version
            if self.changes.closed:
                writer.write(conn.send(h11.EndOfMessage()))
            async with asyncio.timeout(SEND_DEADLINE):
                await writer.drain()
            if self.changes.closed:
                return
            if await self.changes.wait(sent, KEEPALIVE) == sent and not self.changes.closed:
                writer.write(conn.send(h11.Data(data=b": keep-alive\n\n")))

    async def close(self) -> None:
        """Streams send what is pending and end; long polls answer (bounded)."""
        self.changes.close()
        if self._waiting:
            await asyncio.wait(set(self._waiting), timeout=CLOSE_GRACE)


def _wait_seconds(wait: str) -> float | Answer:
    """``?wait=``'s seconds, or the 400 that says what is wrong with it."""
    try:
        seconds = parse_duration(wait)
    except ValueError:
        return 400, "text/plain", f"wait: {wait!r} is not {ACCEPTED_FORM}\n".encode()
    if seconds > MAX_WAIT:
        return 400, "text/plain", f"wait: {wait!r} is longer than {MAX_WAIT:g}s\n".encode()
    return seconds
