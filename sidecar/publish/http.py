"""The local HTTP endpoints: ``/healthz``, ``/leader``, ``/status``, ``/metrics``, ``/events``.

Every answer is computed at request time from the election's live state and
the monotonic clock, never from a cached flag, so ``/leader`` turns 503 the
instant leadership lapses even if the election loop is busy. A probe that
cannot connect at all (the process is stopped) fails, which is the other half
of the safety story for a paused sidecar.

Change notifications (``/leader?wait=``, ``/events``) wait on ``Changes``; at
most ``MAX_WAITERS`` requests wait at once, so waiting clients can never hold
every connection a probe needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar
from urllib.parse import parse_qs

import h11

from ..core.durations import ACCEPTED_FORM, parse_duration
from ..core.state import State
from ..kit.logs import Logger
from .changes import Changes

StateFn = Callable[[], State]

# Bounds that keep a flood of connections from taking the sidecar down (contract §4):
# at most this many at once (the idle longest is closed to admit a new one), each
# request must arrive whole within the deadline, and no request head may exceed 16 KiB.
MAX_CONNECTIONS = 32
REQUEST_DEADLINE = 5.0
MAX_REQUEST_BYTES = 16 * 1024
TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
# Change notifications: at most this many long polls and streams at once, a wait of
# at most MAX_WAIT seconds, and a comment line on an idle stream every KEEPALIVE
# seconds (a proxy keeps it open; a vanished client is noticed on the write).
MAX_WAITERS = 16
MAX_WAIT = 300.0
KEEPALIVE = 15.0
#: The status port listens on IPv4 and IPv6 everywhere (IPv6 only where the kernel has it).
EVERY_INTERFACE = ("0.0.0.0", "::")
CLOSE_GRACE = 0.5  # at shutdown, time for streams to send their last event

Answer = tuple[int, str, bytes]
T = TypeVar("T")


class StatusServer:
    def __init__(
        self,
        port: int,
        state: StateFn,
        healthy: Callable[[], bool],
        metrics: Callable[[], str],
        log: Logger,
        changes: Changes,
    ):
        self.port = port
        self.state = state
        self.healthy = healthy
        self.metrics = metrics
        self.log = log
        self.changes = changes
        self.server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        # Connections waiting for a request, oldest first (a dict keeps insertion order).
        self._idle: dict[asyncio.StreamWriter, None] = {}
        self._waiting: set[asyncio.Task[Any]] = set()
        # ETags name this process too: a version number from a restarted sidecar never matches.
        self._boot = os.urandom(4).hex()

    async def start(self) -> None:
        # Every interface: the kubelet probes the pod IP, the app uses loopback. Named by
        # address, not None: None is resolved in a thread that then idles in every pod.
        self.server = await asyncio.start_server(
            self._serve, EVERY_INTERFACE, self.port, reuse_address=True
        )

    @property
    def bound_port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self.changes.close()  # streams send what is pending and end; long polls answer
        if self._waiting:
            await asyncio.wait(set(self._waiting), timeout=CLOSE_GRACE)
        if self.server is not None:
            self.server.close()
            for writer in list(self._open):
                writer.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    def event_id(self, version: int) -> str:
        """``<process>-<version>``: the SSE ``id`` and, quoted, /leader's ETag."""
        return f"{self._boot}-{version}"

    def etag(self, version: int) -> str:
        return f'"{self.event_id(version)}"'

    def answer(self, method: str, path: str) -> Answer:
        """(status, content type, body) for one request."""
        path = path.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        if path == "/healthz":
            ok = self.healthy()
            return (
                (200 if ok else 500),
                "text/plain",
                b"ok\n" if ok else b"election loop not running\n",
            )
        if path == "/leader":
            state = self.state()
            return (200 if state.is_leader else 503), "application/json", _json(state.as_dict())
        if path == "/status":
            state = self.state()
            return 200, "application/json", _json({**state.as_dict(), "name": state.holder})
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4; charset=utf-8", self.metrics().encode()
        if path == "/events":  # HEAD: what a GET would start with
            return 200, "text/event-stream", b""
        return (
            404,
            "text/plain",
            b"not found: try /leader, /status, /events, /healthz or /metrics\n",
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._admit(writer)
        try:
            await self._converse(reader, writer)
        except (h11.RemoteProtocolError, ConnectionError, TimeoutError, OSError):
            pass
        except asyncio.CancelledError:
            # Only our own close() or the loop's shutdown cancels a connection; Python
            # 3.11's stream callback prints a traceback for a handler that ends cancelled.
            pass
        finally:
            self._open.discard(writer)
            self._idle.pop(writer, None)
            writer.close()

    def _admit(self, writer: asyncio.StreamWriter) -> None:
        """Make room for a new connection by closing the one idle the longest.

        A probe sends its request as soon as it connects, so the connections that sit
        idle are the ones that are not probes; the newest connection always gets in.
        """
        if len(self._open) >= MAX_CONNECTIONS:
            oldest = next(iter(self._idle), None)
            victim = oldest if oldest is not None else next(iter(self._open))
            self._idle.pop(victim, None)
            self._open.discard(victim)
            victim.transport.abort()
        self._open.add(writer)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer requests on one connection, each within ``REQUEST_DEADLINE`` of the last."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_BYTES)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REQUEST_DEADLINE
        received = 0  # bytes of the request being read: h11 bounds only an incomplete head
        self._idle[writer] = None
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as err:
                if conn.our_state is h11.SEND_RESPONSE:
                    status = err.error_status_hint
                    empty = [("Content-Length", "0")]
                    writer.write(conn.send(h11.Response(status_code=status, headers=empty)))
                return
            if event is h11.NEED_DATA:
                async with asyncio.timeout_at(deadline):
                    data = await reader.read(8192)
                received += len(data)
                if received > MAX_REQUEST_BYTES:
                    writer.write(TOO_LARGE)
                    return
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                self._idle.pop(writer, None)
                if _is_stream(event) and self._too_many() is None:
                    await self._waiter(self._stream(conn, writer))
                    return
                writer.write(await self._respond(conn, event))
                async with asyncio.timeout(REQUEST_DEADLINE):
                    await writer.drain()
            elif isinstance(event, h11.EndOfMessage) and conn.our_state is h11.DONE:
                if conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
                deadline, received = loop.time() + REQUEST_DEADLINE, 0
                self._idle[writer] = None
            elif isinstance(event, h11.ConnectionClosed) or conn.our_state in (
                h11.MUST_CLOSE,
                h11.CLOSED,
            ):
                return

    async def _respond(self, conn: h11.Connection, request: h11.Request) -> bytes:
        method, target = request.method.decode(), request.target.decode()
        path, _, query = target.partition("?")
        answer: Answer | None = None
        if _is_stream(request):
            answer = self._too_many()
        elif path == "/leader" and method in ("GET", "HEAD"):
            answer = await self._conditional(query, _header(request, b"if-none-match"))
        version = self.changes.version
        if answer is None:
            answer = self.answer(method, target)
        status, ctype, body = answer
        headers = [("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
        if ctype:
            headers.insert(0, ("Content-Type", ctype))
        if path == "/leader":
            headers.append(("ETag", self.etag(version)))
        out = conn.send(h11.Response(status_code=status, headers=headers))
        if request.method != b"HEAD":
            out += conn.send(h11.Data(data=body))
        return out + conn.send(h11.EndOfMessage())

    def _too_many(self) -> Answer | None:
        """429 when ``MAX_WAITERS`` requests already wait, else None."""
        if len(self._waiting) < MAX_WAITERS:
            return None
        return (
            429,
            "text/plain",
            f"too many waiting requests ({MAX_WAITERS}); retry later\n".encode(),
        )

    async def _waiter(self, waiting: Coroutine[Any, Any, T]) -> T:
        """Run one waiting request where ``close`` can see it (the caller checked the bound)."""
        task = asyncio.ensure_future(waiting)
        self._waiting.add(task)
        try:
            return await task
        finally:
            self._waiting.discard(task)

    async def _conditional(self, query: str, seen: str | None) -> Answer | None:
        """``?wait=`` and ``If-None-Match`` on /leader: an answer of their own (400, 429, 304) or None.

        With ``wait`` the request is held until the version differs from ``seen``
        (an ETag; without one, from the version when it arrived) or the wait ends.
        """
        wait = parse_qs(query).get("wait")
        if wait is not None:
            seconds = _wait_seconds(wait[-1])
            if isinstance(seconds, tuple):
                return seconds
            if (refused := self._too_many()) is not None:
                return refused
            known = self.changes.version
            if seen is None or seen == self.etag(known):  # else the client is behind: answer now
                await self._waiter(self.changes.wait(known, seconds))
        return (304, "", b"") if seen == self.etag(self.changes.version) else None

    async def _stream(self, conn: h11.Connection, writer: asyncio.StreamWriter) -> None:
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
            async with asyncio.timeout(REQUEST_DEADLINE):
                await writer.drain()
            if self.changes.closed:
                return
            if await self.changes.wait(sent, KEEPALIVE) == sent and not self.changes.closed:
                writer.write(conn.send(h11.Data(data=b": keep-alive\n\n")))


def _wait_seconds(wait: str) -> float | Answer:
    """``?wait=``'s seconds, or the 400 that says what is wrong with it."""
    try:
        seconds = parse_duration(wait)
    except ValueError:
        return 400, "text/plain", f"wait: {wait!r} is not {ACCEPTED_FORM}\n".encode()
    if seconds > MAX_WAIT:
        return 400, "text/plain", f"wait: {wait!r} is longer than {MAX_WAIT:g}s\n".encode()
    return seconds


def _is_stream(request: h11.Request) -> bool:
    return request.method == b"GET" and request.target.split(b"?", 1)[0] == b"/events"


def _header(request: h11.Request, name: bytes) -> str | None:
    for key, value in request.headers:
        if key == name:
            return value.decode(errors="replace")
    return None


def _json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()
