"""A small HTTP/1.1 client for the API server: h11 framing over ``channel`` (socket, TLS).

Why not a full client library: this code runs in every pod of every workload
that uses the sidecar, and the official client costs ~25 MB of RSS more than
this (see bench/). h11 does the protocol parsing; this module adds keep-alive,
timeouts, and a line-by-line streaming read for watches.

Every failure to talk to the server comes out as ``Unreachable`` so callers
handle "the API is down" in one place; HTTP statuses are for ``api`` to map.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import h11

from .. import __version__
from .channel import Channel

USER_AGENT = f"grelmicro-sidecar/{__version__}"


class Unreachable(Exception):
    """The request did not get an answer (connect, TLS, timeout, reset)."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


class Connection:
    """One HTTP/1.1 connection; not safe for concurrent requests."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.conn = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(
        cls, host: str, port: int, ssl_context: ssl.SSLContext | None, timeout: float
    ) -> Connection:
        try:
            async with asyncio.timeout(timeout):
                channel = await Channel.open(host.strip("[]"), port, ssl_context)
        except ssl.SSLCertVerificationError as err:
            raise Unreachable(
                f"TLS verification of {host}:{port} failed: {err.verify_message}"
            ) from None
        except (OSError, ssl.SSLError, TimeoutError) as err:
            raise Unreachable(f"cannot connect to {host}:{port}: {_describe(err)}") from None
        channel.keepalive()
        return cls(channel)

    @property
    def reusable(self) -> bool:
        return self.conn.our_state is h11.IDLE and self.conn.their_state is h11.IDLE

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
        await self.channel.send(data)

    async def _next_event(self) -> h11.Event:
        while True:
            event: Any = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(await self.channel.recv())  # b"" at the end
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

    def close(self) -> None:
        self.channel.close()


class HttpClient:
    """Requests to one server, reusing idle keep-alive connections."""

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
            conn.channel.unpark()
            if conn.reusable and conn.channel.alive():
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
        if conn.recycle():
            self._idle.append(conn)
            conn.channel.park(lambda: self._forget(conn))
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
