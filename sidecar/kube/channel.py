"""A connection to the API server: a non-blocking socket, with TLS done in memory.

Why not ``asyncio.open_connection(ssl=...)``: asyncio's TLS layer gives every
connection a 256 kB read buffer (``sslproto.SSLProtocol.max_size``), written
through at creation, so each connection a sidecar keeps costs about 290 kB of
RSS in every pod. Here TLS runs in an ``ssl.SSLObject`` between two memory
BIOs, and bytes move with the event loop's socket calls only when a request
reads or writes; a connection costs OpenSSL's own state (tens of kB).

Guarantees: ``recv`` returns ``b""`` once the server has closed; every
failure is an ``OSError`` or ``ssl.SSLError`` for the HTTP layer to report;
``alive`` tells whether an idle connection can still carry a request,
without blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable
from typing import Any

CHUNK = 65536


class Channel:
    """One connected socket; TLS when ``open`` was given a context. Not for concurrent use."""

    def __init__(self, sock: socket.socket, tls: ssl.SSLObject | None = None) -> None:
        self.sock = sock
        self.tls = tls
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.closed = False
        self.ended = False  # the server closed its side (TLS close_notify or end of stream)
        self._parked: asyncio.AbstractEventLoop | None = None

    @classmethod
    async def open(cls, host: str, port: int, context: ssl.SSLContext | None) -> Channel:
        """Connect (and shake hands) or raise ``OSError`` / ``ssl.SSLError``."""
        loop = asyncio.get_running_loop()
        sock = await _connect(loop, host, port)
        channel = cls(sock)
        try:
            if context is not None:
                channel.tls = context.wrap_bio(
                    channel._incoming, channel._outgoing, server_hostname=_ascii(host)
                )
                await channel._handshake()
        except BaseException:
            channel.close()
            raise
        return channel

    async def _handshake(self) -> None:
        assert self.tls is not None
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise ConnectionResetError(
                        "the server closed the connection during TLS"
                    ) from None
        await self._flush()

    async def _flush(self) -> None:
        """Send what TLS has written to the outgoing BIO."""
        data = self._outgoing.read()
        if data:
            await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def _fill(self) -> bool:
        """Read from the socket into the incoming BIO; False at end of stream."""
        data = await asyncio.get_running_loop().sock_recv(self.sock, CHUNK)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def send(self, data: bytes) -> None:
        if self.tls is None:
            await asyncio.get_running_loop().sock_sendall(self.sock, data)
            return
        self.tls.write(data)
        await self._flush()

    async def recv(self) -> bytes:
        """Up to 64 kB of what the server sent; ``b""`` once it has closed."""
        if self.ended:
            return b""
        if self.tls is None:
            data = await asyncio.get_running_loop().sock_recv(self.sock, CHUNK)
            self.ended = not data
            return data
        while True:
            try:
                return self.tls.read(CHUNK)
            except ssl.SSLWantReadError:
                await self._flush()  # a post-handshake message may want an answer
                if not await self._fill():
                    continue  # the BIO now reports the end: read() says how it ended
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self.ended = True  # closed (h11 tells a cut-off answer from a finished one)
                return b""

    def alive(self) -> bool:
        """Whether an idle connection is still open: the server sent nothing and did not close.

        Reads only what is already there. TLS 1.3 servers send session
        tickets after the handshake; those are taken in and are not data.
        """
        while not (self.closed or self.ended):
            try:
                data = self.sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                return True  # nothing waiting: open and quiet
            except OSError:
                break
            if not data or self.tls is None:
                break  # closed, or an answer nobody asked for
            self._incoming.write(data)
            try:
                self.tls.read(CHUNK)
                break  # data outside a request
            except ssl.SSLWantReadError:
                continue  # only TLS housekeeping so far
            except ssl.SSLError:
                break  # close_notify, or a broken record
        self.ended = True
        return False

    def park(self, on_close: Callable[[], None]) -> None:
        """While idle, close at once when the server closes its side, then call ``on_close``.

        The API server drops idle connections after a while; without this the
        socket would wait in CLOSE-WAIT until the next request found it dead.
        """
        loop = asyncio.get_running_loop()

        def readable() -> None:
            if not self.alive():
                self.close()
                on_close()

        loop.add_reader(self.sock, readable)
        self._parked = loop

    def unpark(self) -> None:
        if self._parked is not None:
            with contextlib.suppress(RuntimeError, ValueError):  # a closed loop or socket
                self._parked.remove_reader(self.sock)
            self._parked = None

    def keepalive(self) -> None:
        """TCP keep-alive probes, so a half-open connection (a watch above all) dies in about a minute."""
        with contextlib.suppress(OSError, AttributeError):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)

    def close(self) -> None:
        if not self.closed:
            self.unpark()
            self.closed = True
            self.sock.close()


def _ascii(host: str) -> str | bytes:
    """``host`` as ``ssl`` and the resolver take it without the ``idna`` codec.

    Both accept an ASCII name (every IP address, and every host name in
    practice) as bytes and use it as it is; a ``str`` goes through the codec,
    whose ``stringprep`` and ``unicodedata`` tables then stay loaded for the
    process's life. Other names still go as ``str``, to be encoded.
    """
    return host.encode("ascii") if host.isascii() else host


async def _connect(loop: asyncio.AbstractEventLoop, host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket to the first address of ``host`` that answers.

    An IP address is used as it is: no resolver thread is started for it (the
    API server's address in a pod is one).
    """
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
            await loop.sock_connect(sock, address)
            return sock
        except OSError as err:
            sock.close()
            last = err
        except BaseException:
            sock.close()
            raise
    raise last or OSError(f"no address for {host}")
