"""A small HTTP/1.1 client for the API server: h11 framing over asyncio's TLS streams.

It runs in every pod, so not the official client (bench/). The socket is connected
here: an IP address needs no resolver thread, an ASCII name never loads the ``idna``
codec (contract §1). At most one connection is kept idle (each holds TLS buffers),
read while idle by a small task that closes it when the server does: over plain HTTP
(``kubectl proxy``) asyncio would keep it half-open, in CLOSE-WAIT, for as long as a
follower sends nothing. Every failure to talk to the server is ``Unreachable``.

asyncio gives every TLS connection a zeroed 256 KiB read buffer, held for the
connection's life: the most of a sharded sidecar's memory (a watch per shard), and
churned by each new connection. One TLS record is 16 KiB, so that is the buffer here
(``TLS_READ_BUFFER``; bench/ §4 and §5d measure it).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from asyncio import StreamReader, StreamWriter, sslproto
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import h11

from .. import __version__

USER_AGENT = f"grelmicro-sidecar/{__version__}"
Fields = list[tuple[str, str]]
#: Bytes read from a TLS connection at a time: one record's plaintext at most.
TLS_READ_BUFFER = 16 * 1024
if getattr(sslproto.SSLProtocol, "max_size", 0) > TLS_READ_BUFFER:  # only ever lowered
    sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


class Unreachable(Exception):
    """The request did not get an answer (connect, TLS, timeout, reset)."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


class Connection:
    """One HTTP/1.1 connection; not safe for concurrent requests."""

    def __init__(self, sock: socket.socket, reader: StreamReader, writer: StreamWriter, host: str):
        self.sock, self.reader, self.writer, self.host = sock, reader, writer, host
        self.conn = h11.Connection(h11.CLIENT)
        self._loop = asyncio.get_running_loop()  # the streams work in this loop only
        self._watch: asyncio.Task[None] | None = None  # while idle in the pool

    @classmethod
    async def open(
        cls, host: str, port: int, ssl_context: ssl.SSLContext | None, timeout: float
    ) -> Connection:
        name, at = host.strip("[]"), f"{host}:{port}"
        with _unreachable(f"cannot connect to {at}", "timed out"):
            async with asyncio.timeout(timeout):
                sock = await _connect(name, port)
                try:
                    hostname = _ascii(name) if ssl_context is not None else None
                    streams = await asyncio.open_connection(
                        sock=sock, ssl=ssl_context, server_hostname=hostname
                    )
                except BaseException as err:
                    # Not close(): a transport may own it (a timeout after the handshake
                    # leaves TLS shutting down), and its fd reused under it crashes the loop.
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                    if isinstance(err, ssl.SSLCertVerificationError):
                        why = err.verify_message
                        raise Unreachable(f"TLS verification of {at} failed: {why}") from None
                    raise
        return cls(sock, *streams, at)

    def alive(self) -> bool:
        """Whether an idle connection can carry a request: the server has not closed it, and
        it was opened in the running event loop (not in an earlier ``asyncio.run``)."""
        return (
            self._loop is asyncio.get_running_loop()
            and self.conn.our_state is self.conn.their_state is h11.IDLE
            and not (self.writer.is_closing() or self.reader.at_eof())
        )

    async def send(self, method: str, target: str, headers: Fields, body: bytes | None) -> None:
        fields = [("Host", self.host), ("User-Agent", USER_AGENT), *headers]
        fields += [] if body is None else [("Content-Length", str(len(body)))]
        data = self.conn.send(h11.Request(method=method, target=target, headers=fields))
        data += b"" if body is None else self.conn.send(h11.Data(data=body))
        self.writer.write(data + self.conn.send(h11.EndOfMessage()))
        await self.writer.drain()

    async def _event(self) -> Any:
        while (event := self.conn.next_event()) is h11.NEED_DATA:
            # b"" at the end, with or without close_notify: h11 tells a cut-off answer
            self.conn.receive_data(await self.reader.read(65536))
        if isinstance(event, h11.ConnectionClosed):
            raise Unreachable("the API server closed the connection")
        return event

    async def head(self) -> tuple[int, dict[str, str]]:
        while isinstance(event := await self._event(), h11.InformationalResponse):
            pass
        if not isinstance(event, h11.Response):
            raise Unreachable(f"unexpected HTTP event {type(event).__name__}")
        return event.status_code, {k.decode(): v.decode(errors="replace") for k, v in event.headers}

    async def body_chunks(self) -> AsyncIterator[bytes]:
        while not isinstance(event := await self._event(), h11.EndOfMessage):
            if isinstance(event, h11.Data):
                yield bytes(event.data)

    def park(self, pool: list[Connection]) -> None:
        """Into ``pool`` if the answer is complete and ``pool`` empty (else closed), watched
        there: closed and taken out at once when the server closes or sends anything."""
        if pool or not (self.conn.our_state is self.conn.their_state is h11.DONE):
            self.close()
            return
        self.conn.start_next_cycle()
        pool.append(self)
        self._watch = asyncio.create_task(self._idle(pool))

    async def _idle(self, pool: list[Connection]) -> None:
        with contextlib.suppress(Exception):  # an error ends the connection as the end does
            await self.reader.read(1)
        self._watch = None
        self.close()
        with contextlib.suppress(ValueError):
            pool.remove(self)

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
        Also once its event loop has ended (``status`` closes its store after ``asyncio.run``)."""
        watch, self._watch = self._watch, None
        with contextlib.suppress(RuntimeError):  # that loop is closed: nothing to tell it
            if watch is not None:
                watch.cancel()
            self.writer.transport.abort()
        self.sock.close()


class HttpClient:
    """Requests to one server, reusing an idle keep-alive connection."""

    def __init__(
        self, host: str, port: int, ssl_context: ssl.SSLContext | None, connect_timeout: float = 5.0
    ):
        self.host, self.port, self.ssl_context = host, port, ssl_context
        self.connect_timeout = connect_timeout
        self._idle: list[Connection] = []

    async def _connection(self, timeout: float) -> Connection:
        while self._idle:
            conn = self._idle.pop()
            await conn.unpark()
            if conn.alive():
                return conn
            conn.close()
        timeout = min(timeout, self.connect_timeout)
        return await Connection.open(self.host, self.port, self.ssl_context, timeout)

    async def request(
        self, method: str, url: str, fields: Fields, timeout: float, body: bytes | None = None
    ) -> Response:
        conn: Connection | None = None
        try:
            with _unreachable(f"{method} {url.split('?')[0]}", f"no answer within {timeout:.1f}s"):
                async with asyncio.timeout(timeout):
                    conn = await self._connection(timeout)
                    await conn.send(method, url, fields, body)
                    status, headers = await conn.head()
                    chunks = [c async for c in conn.body_chunks()]
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        conn.park(self._idle)
        return Response(status, headers, b"".join(chunks))

    async def stream_lines(
        self, url: str, fields: Fields, connect_timeout: float, idle_timeout: float
    ) -> AsyncIterator[tuple[int, bytes]]:
        """GET ``url`` on a fresh connection: (status, line) per non-blank line, or a non-2xx
        answer's whole body once; ``idle_timeout`` bounds the silence (a half-open connection)."""
        conn = await Connection.open(self.host, self.port, self.ssl_context, connect_timeout)
        try:
            with _unreachable("watch", f"no answer within {connect_timeout:.1f}s"):
                async with asyncio.timeout(connect_timeout):
                    await conn.send("GET", url, fields, None)
                    status, _ = await conn.head()
            with _unreachable("watch", f"silent for {idle_timeout:.0f}s"):
                if status >= 300:
                    body = b""
                    with contextlib.suppress(TimeoutError, Unreachable):
                        async with asyncio.timeout(connect_timeout):
                            body = b"".join([c async for c in conn.body_chunks()])
                    yield status, body
                    return
                buffer, chunks = b"", conn.body_chunks()
                while True:
                    async with asyncio.timeout(idle_timeout):
                        if (chunk := await anext(chunks, None)) is None:
                            return
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield status, line
        finally:
            conn.close()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


@contextlib.contextmanager
def _unreachable(where: str, late: str) -> Iterator[None]:
    """Every error of the connection as ``Unreachable``: a timeout says ``late``."""
    try:
        yield
    except TimeoutError:
        raise Unreachable(f"{where}: {late}") from None
    except (OSError, ssl.SSLError, h11.ProtocolError) as err:
        raise Unreachable(f"{where}: {_describe(err)}") from None


def _describe(err: BaseException) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, ConnectionResetError):
        return "connection reset"
    if isinstance(err, TimeoutError):
        return "timed out"
    return str(getattr(err, "strerror", None) or str(err) or type(err).__name__)


def _ascii(host: str) -> str | bytes:
    """As bytes when ASCII: ``ssl`` and the resolver run a ``str`` through the ``idna`` codec."""
    return host.encode("ascii") if host.isascii() else host


async def _connect(host: str, port: int) -> socket.socket:
    """A connected TCP socket to the first address of ``host`` that answers (an IP address
    as it is, no resolver); keep-alive probes end a half-open one (a watch) in a minute."""
    loop = asyncio.get_running_loop()
    literal = socket.AF_INET6 if ":" in host else socket.AF_INET
    infos: list[tuple[int, Any]] = [(literal, (host, port))]
    try:
        socket.inet_pton(literal, host)
    except OSError:
        found = await loop.getaddrinfo(_ascii(host), port, type=socket.SOCK_STREAM)
        infos = [(info[0], info[4]) for info in found]
    last = OSError(f"no address for {host}")
    for family, address in infos:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError, AttributeError):  # the TCP_KEEP* names are Linux's
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
            await loop.sock_connect(sock, address)
            return sock
        except BaseException as err:
            sock.close()
            if not isinstance(err, OSError):
                raise
            last = err
    raise last
