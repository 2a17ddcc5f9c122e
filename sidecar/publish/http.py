"""The local HTTP endpoints: ``/healthz``, ``/leader``, ``/status``, ``/metrics``, ``/events``,
and the actions the pod itself may ask on loopback (``POST /drained``: the app ends a drain;
``POST /transfer``: leadership moved on request; contract §4).

Every answer is computed at request time from the election's live state and
the monotonic clock, never from a cached flag, so ``/leader`` turns 503 the
instant leadership lapses even if the election loop is busy. A probe that
cannot connect at all (the process is stopped) fails, which is the other half
of the safety story for a paused sidecar.

Change notifications (``/leader?wait=``, ``/events``) are ``notify``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import parse_qs

import h11

from ..core.state import State
from ..kit.logs import Logger
from .changes import Changes
from .exposition import CONTENT_TYPE
from .notify import Answer, Notifications, Waiter

StateFn = Callable[[], State]


#: What a ``POST /<path>?<query>`` asks: the query's last value of each key in, the status and
#: one line out (``driver.drain.Drain.acknowledge``, ``driver.transfer.Transfer.request``).
Action = Callable[[dict[str, str]], tuple[int, str]]


# Bounds that keep a flood of connections from taking the sidecar down (contract §4):
# at most this many at once (one from outside the pod is closed to admit a new one), each
# request must arrive whole within the deadline, and no request head may exceed 16 KiB.
MAX_CONNECTIONS = 32
REQUEST_DEADLINE = 5.0
MAX_REQUEST_BYTES = 16 * 1024
TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
NOT_RUNNING = b"election loop not running\n"
NOT_FOUND = (
    b"not found: try /leader, /shards/<i>, /status, /events, /healthz, /metrics; "
    b"POST /drained, /transfer\n"
)
NOT_LOCAL = b"only the pod's own containers may ask this: POST on loopback\n"
CLOSING = (h11.MUST_CLOSE, h11.CLOSED)
#: The status port listens on IPv4 and IPv6 everywhere (IPv6 only where the kernel has it).
EVERY_INTERFACE = ("0.0.0.0", "::")


class StatusServer:
    def __init__(
        self,
        port: int,
        state: StateFn,
        healthy: Callable[[], bool],
        metrics: Callable[[], str],
        log: Logger,
        changes: Changes,
        actions: dict[str, Action] | None = None,
    ):
        self.port, self.state, self.healthy, self.metrics = port, state, healthy, metrics
        self.log, self.changes, self.actions = log, changes, actions or {}
        self.notify = Notifications(changes)
        self.server: asyncio.Server | None = None
        # Open connections (whether from loopback), and those waiting for the bytes of a
        # request, head or body, oldest first (dicts keep order).
        self._open: dict[asyncio.StreamWriter, bool] = {}
        self._pending: dict[asyncio.StreamWriter, None] = {}

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
        await self.notify.close()
        if self.server is not None:
            self.server.close()
            for writer in list(self._open):
                writer.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    def answer(self, method: str, path: str) -> Answer:
        """(status, content type, body) for one request."""
        path = path.split("?", 1)[0]
        if path in self.actions:
            return 405, "text/plain", f"method not allowed: POST {path}\n".encode()
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        if path == "/healthz":
            ok = self.healthy()
            return (200, "text/plain", b"ok\n") if ok else (500, "text/plain", NOT_RUNNING)
        if path == "/leader":
            state = self.state()
            return (200 if state.is_leader else 503), "application/json", _json(state.as_dict())
        if path == "/status":
            state = self.state()
            return 200, "application/json", _json({**state.as_dict(), "name": state.holder})
        if path.startswith("/shards/"):
            return _shard(self.state(), path[len("/shards/") :])
        if path == "/metrics":
            return 200, CONTENT_TYPE, self.metrics().encode()
        if path == "/events":  # HEAD: what a GET would start with
            return 200, "text/event-stream", b""
        return 404, "text/plain", NOT_FOUND

    def _act(self, action: Action, query: str, local: bool) -> Answer:
        if not local:
            return 403, "text/plain", NOT_LOCAL
        asked = {key: values[-1] for key, values in parse_qs(query).items()}
        status, line = action(asked)
        return status, "text/plain", (line + "\n").encode()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        local = _loopback(writer.get_extra_info("peername"))
        self._admit(writer, local)
        try:
            await self._converse(reader, writer, local)
        except (h11.RemoteProtocolError, OSError, asyncio.CancelledError):
            # Only our own close() or the loop's shutdown cancels a connection; Python
            # 3.11's stream callback prints a traceback for a handler that ends cancelled.
            pass
        finally:
            self._open.pop(writer, None)
            self._pending.pop(writer, None)
            writer.close()

    def _admit(self, writer: asyncio.StreamWriter, local: bool) -> None:
        """Make room for a new connection: close one from outside the pod while there is
        one, the app's (loopback) only when all are; the newest connection always gets in.
        """
        if len(self._open) >= MAX_CONNECTIONS:
            victim = self._victim(local=False) or self._victim(local=True)
            assert victim is not None  # the connections are full, so one is open
            self._pending.pop(victim, None)
            self._open.pop(victim, None)
            victim.transport.abort()
        self._open[writer] = local

    def _victim(self, local: bool) -> asyncio.StreamWriter | None:
        """The connection from this origin to close first: the one that has waited the
        longest for the bytes of a request (its head or its body), else the oldest waiting
        request (long poll or stream), else the oldest.

        Whatever a client outside the pod does, its connections go before the app's: one
        that never sends the body its head announced is neither idle nor waiting, and one
        that pipelines requests and reads the answers slowly stays busy as long as it
        likes. A probe sends its request as soon as it connects, so the connections that
        wait for bytes are not probes.
        """
        # A connection already closed may wait for bytes once more before its task ends.
        pending = (w for w in self._pending if self._open.get(w) == local)
        waiting = (w for w in self.notify.waiting(local) if w in self._open)
        ours = (w for w, here in self._open.items() if here == local)
        return next(pending, None) or next(waiting, None) or next(ours, None)

    async def _converse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, local: bool
    ) -> None:
        """Answer requests on one connection, each within ``REQUEST_DEADLINE`` of the last."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_BYTES)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REQUEST_DEADLINE
        received = 0  # bytes of the request being read: h11 bounds only an incomplete head
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
                self._pending[writer] = None  # (already pending: keeps its place)
                async with asyncio.timeout_at(deadline):
                    data = await reader.read(8192)
                received += len(data)
                if received > MAX_REQUEST_BYTES:
                    writer.write(TOO_LARGE)
                    return
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                self._pending.pop(writer, None)
                who = Waiter(local, writer)
                if _is_stream(event) and self.notify.too_many(local) is None:
                    stream = functools.partial(self.notify.stream, conn)
                    await self.notify.waiter(stream, who, reader, conn)
                    return
                answer = await self._respond(conn, event, who, reader)
                if answer is None:
                    return  # the client hung up while waiting
                writer.write(answer)
                async with asyncio.timeout(REQUEST_DEADLINE):
                    await writer.drain()
            elif isinstance(event, h11.EndOfMessage) and conn.our_state is h11.DONE:
                if conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
                deadline, received = loop.time() + REQUEST_DEADLINE, 0
                self._pending.pop(writer, None)
            elif isinstance(event, h11.ConnectionClosed) or conn.our_state in CLOSING:
                return

    async def _respond(
        self, conn: h11.Connection, request: h11.Request, who: Waiter, reader: asyncio.StreamReader
    ) -> bytes | None:
        """The answer's bytes; None when the client hung up during a long poll."""
        method, target = request.method.decode(), request.target.decode()
        path, _, query = target.partition("?")
        answer: Answer | None = None
        refused: Answer | None = None
        stayed = True

        async def wait(work: Coroutine[Any, Any, Any]) -> None:
            """Hold a long poll in its pool's slot, or refuse it (429)."""
            nonlocal refused, stayed
            if (refused := self.notify.too_many(who.local)) is None:
                stayed = await self.notify.waiter(lambda _who: work, who, reader, conn)
            else:
                work.close()

        if _is_stream(request):
            answer = self.notify.too_many(who.local)
        elif path in self.actions and method == "POST":
            answer = self._act(self.actions[path], query, who.local)
        elif path == "/leader" and method in ("GET", "HEAD"):
            seen = _header(request, b"if-none-match")
            answer = await self.notify.conditional(query, seen, wait)
            answer = refused or answer
        if not stayed:
            return None
        version = self.changes.version
        status, ctype, body = answer or self.answer(method, target)
        headers = [("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
        if ctype:
            headers.insert(0, ("Content-Type", ctype))
        if path == "/leader":
            headers.append(("ETag", self.notify.etag(version)))
        out = conn.send(h11.Response(status_code=status, headers=headers))
        if request.method != b"HEAD":
            out += conn.send(h11.Data(data=body))
        return out + conn.send(h11.EndOfMessage())


def _shard(state: State, which: str) -> Answer:
    """``/shards/<i>``: 200 while this pod owns shard ``i`` (its entry of ``shards``), else 503."""
    shards = state.shards or []
    entry = next((s for s in shards if str(s["shard"]) == which), None)
    if entry is None:
        known = f"0 to {len(shards) - 1}" if shards else "none, this election is not sharded"
        return 404, "text/plain", f"no shard {which[:20]!r} here (shards: {known})\n".encode()
    return (200 if entry["is_leader"] else 503), "application/json", _json(entry)


def _loopback(peer: Any) -> bool:
    """Whether a connection comes from this pod (loopback, IPv4, IPv6 or IPv4-mapped)."""
    host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
    return host.startswith(("127.", "::ffff:127.")) or host == "::1"


def _is_stream(request: h11.Request) -> bool:
    return request.method == b"GET" and request.target.split(b"?", 1)[0] == b"/events"


def _header(request: h11.Request, name: bytes) -> str | None:
    return next((v.decode(errors="replace") for k, v in request.headers if k == name), None)


def _json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()
