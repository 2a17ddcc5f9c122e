"""Change notifications: long polls (``/leader?wait=``) and Server-Sent Events (``/events``).

Both wait on ``Changes``, numbered by a version named ``<process>-<n>``
(contract §4, change notifications). Guarantees:

- the pod's own app always gets a slot: waiting requests from loopback and
  from other addresses have pools of their own, so no client outside the pod
  can starve the app (``MAX_LOCAL``, ``MAX_REMOTE``);
- a client that hangs up frees its slot at once, not when its wait ends;
- ``flush`` returns once every stream was sent the current state (its
  connection accepted it) and every long poll was answered, or, past its
  bound, after closing those that were not: the shutdown calls it before the
  release, so no subscriber hears "not leader" after a successor leads;
- at shutdown every stream gets the last state and ends, and long polls answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import h11

from ..core.durations import ACCEPTED_FORM, parse_duration
from .changes import Changes

#: Waiting requests at once, from loopback (the pod's own app) and from anywhere else.
MAX_LOCAL = 16
MAX_REMOTE = 8
#: The longest ``?wait=``; an idle stream gets a comment this often (a proxy keeps it open).
MAX_WAIT = 300.0
KEEPALIVE = 15.0
#: An event a client does not read within this closes its stream.
SEND_DEADLINE = 5.0
#: How long the shutdown gives the subscribers to be told, before and after the release.
FLUSH_BOUND = 1.0
CLOSE_GRACE = 0.5

Answer = tuple[int, str, bytes]


@dataclass
class Waiter:
    """One waiting request: where it came from, and (a stream) the last version it was sent."""

    local: bool
    writer: asyncio.StreamWriter
    sent: int = 0
    stream: bool = False


class Notifications:
    def __init__(self, changes: Changes):
        self.changes = changes
        self._waiting: dict[asyncio.Task[Any], Waiter] = {}
        # ETags name this process too: a version number from a restarted sidecar never matches.
        self._boot = os.urandom(4).hex()

    def event_id(self, version: int) -> str:
        """``<process>-<version>``: the SSE ``id`` and, quoted, /leader's ETag."""
        return f"{self._boot}-{version}"

    def etag(self, version: int) -> str:
        return f'"{self.event_id(version)}"'

    def too_many(self, local: bool) -> Answer | None:
        """429 when this client's pool is full, else None."""
        bound = MAX_LOCAL if local else MAX_REMOTE
        if sum(w.local == local for w in self._waiting.values()) < bound:
            return None
        return 429, "text/plain", f"too many waiting requests ({bound}); retry later\n".encode()

    def waiting(self, local: bool) -> Iterator[asyncio.StreamWriter]:
        """The connections of the waiting requests from loopback or from elsewhere, oldest first
        (closed first of their origin's busy connections when connections run out)."""
        return (w.writer for w in self._waiting.values() if w.local == local)

    async def waiter(
        self,
        waiting: Callable[[Waiter], Coroutine[Any, Any, Any]],
        who: Waiter,
        reader: asyncio.StreamReader,
        conn: h11.Connection,
    ) -> bool:
        """Run one waiting request (the caller checked the bound); False when the client left.

        Bytes the client sends meanwhile (a pipelined request) go to ``conn``.
        """
        task = asyncio.ensure_future(waiting(who))
        self._waiting[task] = who
        gone = asyncio.ensure_future(_hang_up(reader, conn))
        try:
            await asyncio.wait([task, gone], return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return False
            task.result()
            return True
        finally:
            gone.cancel()
            del self._waiting[task]

    async def conditional(
        self, query: str, seen: str | None, wait: Callable[[Coroutine[Any, Any, Any]], Any]
    ) -> Answer | None:
        """``?wait=`` and ``If-None-Match`` on /leader: an answer of their own (400, 304) or None.

        With ``wait`` the request is held (through ``wait``, which holds its
        slot) until the version differs from ``seen`` (an ETag; without one,
        from the version when it arrived) or the wait ends.
        """
        raw = parse_qs(query).get("wait")
        if raw is not None:
            seconds = _wait_seconds(raw[-1])
            if isinstance(seconds, tuple):
                return seconds
            known = self.changes.version
            if seen is None or seen == self.etag(known):  # else the client is behind: answer now
                await wait(self.changes.wait(known, seconds))
        return (304, "", b"") if seen == self.etag(self.changes.version) else None

    async def stream(self, conn: h11.Connection, who: Waiter) -> None:
        """Server-Sent Events: the state now, then every change, until shutdown."""
        writer, who.stream = who.writer, True
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
            who.sent = sent
            if self.changes.closed:
                return
            if await self.changes.wait(sent, KEEPALIVE) == sent and not self.changes.closed:
                writer.write(conn.send(h11.Data(data=b": keep-alive\n\n")))

    async def flush(self, bound: float = FLUSH_BOUND) -> None:
        """Until every subscriber was told the current state; past ``bound``, close the rest."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        while loop.time() < deadline and self._behind():
            await asyncio.sleep(0.005)
        for task in self._behind():
            self._waiting[task].writer.transport.abort()

    def _behind(self) -> list[asyncio.Task[Any]]:
        version = self.changes.version
        return [t for t, w in self._waiting.items() if not w.stream or w.sent < version]

    async def close(self) -> None:
        """Streams send what is pending and end; long polls answer (bounded)."""
        self.changes.close()
        if self._waiting:
            await asyncio.wait(set(self._waiting), timeout=CLOSE_GRACE)


async def _hang_up(reader: asyncio.StreamReader, conn: h11.Connection) -> None:
    """Return when the client closes its side; anything it sends meanwhile goes to ``conn``."""
    while data := await reader.read(8192):
        conn.receive_data(data)


def _wait_seconds(wait: str) -> float | Answer:
    """``?wait=``'s seconds, or the 400 that says what is wrong with it."""
    try:
        seconds = parse_duration(wait)
    except ValueError:
        return 400, "text/plain", f"wait: {wait!r} is not {ACCEPTED_FORM}\n".encode()
    if seconds > MAX_WAIT:
        return 400, "text/plain", f"wait: {wait!r} is longer than {MAX_WAIT:g}s\n".encode()
    return seconds
