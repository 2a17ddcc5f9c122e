"""A small HTTP/1.1 client for the API server: h11 framing over asyncio's TLS streams.

Why not a full client library: this code runs in every pod of every workload
that uses the sidecar, and the official client costs ~25 MB of RSS more than
this (see bench/). h11 does the protocol parsing; this module adds keep-alive,
timeouts, and a line-by-line streaming read for watches.

TLS is asyncio's (``asyncio.open_connection(sock=..., ssl=...)``): the
handshake, session tickets and the server's close_notify are the standard
library's to get right. The socket is connected here first, so that the
footprint stays as contract §1 says: an API server named by an IP address
(its address in a pod) is connected as it is, with no resolver thread, and an
ASCII name goes to the resolver and to ``ssl`` as bytes, so the ``idna`` codec
is never loaded (asyncio's own ``open_connection(host, port)`` would run every
name, ``str`` or ``bytes``, through that codec).

An idle keep-alive connection is watched by one small task that reads it
(``Connection.park``): when the server closes it (the API server drops idle
connections after a while) or sends what nobody asked for, the task closes it
and takes it out of the pool at once. Checking only when a connection is
taken again would not do: over plain HTTP (``kubectl proxy``) asyncio keeps a
connection the server closed half-open, in CLOSE-WAIT, until it is closed
here, and a follower may send no request for as long as it follows. Taking a
connection from the pool stops its task and checks it once more.

Every failure to talk to the server comes out as ``Unreachable`` so callers
handle "the API is down" in one place; HTTP statuses are for ``api`` to map.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import h11

from .. import __version__

USER_AGENT = f"grelmicro-sidecar/{__version__}"
CHUNK = 65536


class Unreachable(Exception):
    """The request did not get an answer (connect, TLS, timeout, reset)."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


class Connection:
    """One HTTP/1.1 connection; not safe for concurrent requests."""

    def __init__(
        self, sock: socket.socket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ):
        self.sock = sock
        self.reader = reader
        self.writer = writer
        self.conn = h11.Connection(h11.CLIENT)
        self._loop = asyncio.get_running_loop()  # the streams work in this loop only
        self._watch: asyncio.Task[None] | None = None  # while idle in the pool

    @classmethod
    async def open(
        cls, host: str, port: int, ssl_context: ssl.SSLContext | None, timeout: float
    ) -> Connection:
        name = host.strip("[]")
        try:
            async with asyncio.timeout(timeout):
                sock = await _connect(name, port)
                try:
                    reader, writer = await asyncio.open_connection(
                        sock=sock,
                        ssl=ssl_context,
                        server_hostname=_ascii(name) if ssl_context is not None else None,
                    )
                except BaseException:
                    sock.close()
                    raise
        except ssl.SSLCertVerificationError as err:
            raise Unreachable(
                f"TLS verification of {host}:{port} failed: {err.verify_message}"
            ) from None
        except (OSError, ssl.SSLError, TimeoutError) as err:
            raise Unreachable(f"cannot connect to {host}:{port}: {_describe(err)}") from None
        return cls(sock, reader, writer)

    @property
    def reusable(self) -> bool:
        return self.conn.our_state is h11.IDLE and self.conn.their_state is h11.IDLE

    def alive(self) -> bool:
        """Whether an idle connection can carry a request: the server has not closed it, and
        it was opened in the running event loop (not in an earlier ``asyncio.run``)."""
        return (
            self._loop is asyncio.get_running_loop()
            and self.reusable
            and not (self.writer.is_closing() or self.reader.at_eof())
        )

    def recycle(self) -> bool:
        """Ready the connection for another request; False when it must be closed instead."""
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
            return True
        return False

    async def send(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes | None
    ) -> None:
        hdrs = [*headers, ("Content-Length", str(len(body)))] if body is not None else headers
        data = self.conn.send(h11.Request(method=method, target=target, headers=hdrs))
        if body is not None:
            data += self.conn.send(h11.Data(data=body))
        data += self.conn.send(h11.EndOfMessage())
        self.writer.write(data)
        await self.writer.drain()

    async def _next_event(self) -> h11.Event:
        while True:
            event: Any = self.conn.next_event()
            if event is h11.NEED_DATA:
                # b"" at the end, with or without close_notify: h11 tells a cut-off answer
                self.conn.receive_data(await self.reader.read(CHUNK))
                continue
            if isinstance(event, h11.ConnectionClosed):
                raise Unreachable("the API server closed the connection")
            return event  # type: ignore[no-any-return]

    async def head(self) -> tuple[int, dict[str, str]]:
        event = await self._next_event()
        while isinstance(event, h11.InformationalResponse):
            event = await self._next_event()
        if not isinstance(event, h11.Response):
            raise Unreachable(f"unexpected HTTP event {type(event).__name__}")
        headers = {k.decode().lower(): v.decode(errors="replace") for k, v in event.headers}
        return event.status_code, headers

    async def body_chunks(self) -> AsyncIterator[bytes]:
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return

    def park(self, on_close: Callable[[], None]) -> None:
        """While idle, close at once when the server closes or sends anything, then call ``on_close``."""
        self._watch = asyncio.get_running_loop().create_task(self._idle(on_close))

    async def _idle(self, on_close: Callable[[], None]) -> None:
        with contextlib.suppress(Exception):  # an error ends the connection as the end does
            await self.reader.read(1)
        self._watch = None
        self.close()
        on_close()

    async def unpark(self) -> None:
        """Stop the idle watch; its read is over when this returns, the reader free for a request."""
        watch, self._watch = self._watch, None
        if watch is not None and watch.get_loop() is asyncio.get_running_loop():
            watch.cancel()
            try:
                await asyncio.wait([watch])
            except BaseException:  # the request was cancelled meanwhile: out of the pool already
                self.close()
                raise

    def close(self) -> None:
        """Close the socket at once: no TLS close_notify to wait for (HTTP frames every answer).

        Also once the event loop it was opened in has ended (``status`` closes its
        store after ``asyncio.run``).
        """
        watch, self._watch = self._watch, None
        with contextlib.suppress(RuntimeError):  # that loop is closed: nothing to tell it
            if watch is not None:
                watch.cancel()
            self.writer.transport.abort()
        self.sock.close()


class HttpClient:
    """Requests to one server, reusing an idle keep-alive connection.

    At most one connection is kept idle: a client's requests come one after
    another once running, and each connection kept holds asyncio's TLS
    buffers, so the extra ones a burst of concurrent requests opened (at
    start-up) are closed when their answer is in.
    """

    def __init__(
        self, host: str, port: int, ssl_context: ssl.SSLContext | None, connect_timeout: float = 5.0
    ):
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self._idle: list[Connection] = []

    async def _connection(self, timeout: float) -> Connection:
        while self._idle:
            conn = self._idle.pop()
            await conn.unpark()
            if conn.alive():
                return conn
            conn.close()
        return await Connection.open(
            self.host, self.port, self.ssl_context, min(timeout, self.connect_timeout)
        )

    async def request(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes | None = None,
        timeout: float = 10.0,
    ) -> Response:
        conn: Connection | None = None
        try:
            async with asyncio.timeout(timeout):
                conn = await self._connection(timeout)
                await conn.send(method, target, self._headers(headers), body)
                status, hdrs = await conn.head()
                chunks = [c async for c in conn.body_chunks()]
        except BaseException as err:
            if conn is not None:
                conn.close()
            where = f"{method} {target.split('?')[0]}"
            if isinstance(err, TimeoutError):
                raise Unreachable(f"{where}: no answer within {timeout:.1f}s") from None
            if isinstance(err, OSError | ssl.SSLError | h11.ProtocolError):
                raise Unreachable(f"{where}: {_describe(err)}") from None
            raise
        if conn.recycle() and not self._idle:
            self._idle.append(conn)
            conn.park(lambda: self._forget(conn))
        else:
            conn.close()
        return Response(status, hdrs, b"".join(chunks))

    async def stream_lines(
        self,
        target: str,
        headers: list[tuple[str, str]],
        connect_timeout: float,
        idle_timeout: float,
    ) -> AsyncIterator[tuple[int, bytes]]:
        """GET ``target`` on a fresh connection; yield (status, line) per newline-terminated line.

        A non-2xx answer yields its whole body once. ``idle_timeout`` bounds
        the silence between two reads, so a half-open connection is noticed.
        """
        conn = await Connection.open(self.host, self.port, self.ssl_context, connect_timeout)
        try:
            try:
                async with asyncio.timeout(connect_timeout):
                    await conn.send("GET", target, self._headers(headers), None)
                    status, _ = await conn.head()
            except TimeoutError:
                raise Unreachable(f"watch: no answer within {connect_timeout:.1f}s") from None
            if status >= 300:
                body = b""
                with contextlib.suppress(TimeoutError, Unreachable):
                    async with asyncio.timeout(connect_timeout):
                        body = b"".join([c async for c in conn.body_chunks()])
                yield status, body
                return
            buffer = b""
            chunks = conn.body_chunks()
            while True:
                try:
                    async with asyncio.timeout(idle_timeout):
                        chunk = await anext(chunks)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise Unreachable(f"watch: silent for {idle_timeout:.0f}s") from None
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield status, line
        except (OSError, ssl.SSLError, h11.ProtocolError) as err:
            raise Unreachable(f"watch: {_describe(err)}") from None
        finally:
            conn.close()

    def _forget(self, conn: Connection) -> None:
        """An idle connection the server closed."""
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)

    def _headers(self, extra: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [("Host", f"{self.host}:{self.port}"), ("User-Agent", USER_AGENT), *extra]

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()


def _describe(err: BaseException) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, ConnectionResetError):
        return "connection reset"
    if isinstance(err, TimeoutError):
        return "timed out"
    text = getattr(err, "strerror", None) or str(err) or type(err).__name__
    return str(text)


def _ascii(host: str) -> str | bytes:
    """``host`` as ``ssl`` and the resolver take it without the ``idna`` codec.

    Both accept an ASCII name (every IP address, and every host name in
    practice) as bytes and use it as it is; a ``str`` goes through the codec,
    whose ``stringprep`` and ``unicodedata`` tables then stay loaded for the
    process's life. Other names still go as ``str``, to be encoded.
    """
    return host.encode("ascii") if host.isascii() else host


async def _connect(host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket to the first address of ``host`` that answers.

    An IP address is used as it is: no resolver thread is started for it (the
    API server's address in a pod is one). TCP keep-alive probes end a
    half-open connection (a watch above all) in about a minute.
    """
    loop = asyncio.get_running_loop()
    literal = socket.AF_INET6 if ":" in host else socket.AF_INET
    infos: list[tuple[int, Any]] = [(literal, (host, port))]
    try:
        socket.inet_pton(literal, host)
    except OSError:
        found = await loop.getaddrinfo(_ascii(host), port, type=socket.SOCK_STREAM)
        infos = [(fam, address) for fam, _, _, _, address in found]
    last: OSError | None = None
    for family, address in infos:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _keepalive(sock)
            await loop.sock_connect(sock, address)
            return sock
        except OSError as err:
            sock.close()
            last = err
        except BaseException:
            sock.close()
            raise
    raise last or OSError(f"no address for {host}")


def _keepalive(sock: socket.socket) -> None:
    with contextlib.suppress(OSError, AttributeError):  # the TCP_KEEP* names are Linux's
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
