"""A TCP fault proxy: one per sidecar, between it and the API server.

TLS passes through untouched (the API server's certificate names 127.0.0.1),
so the sidecar verifies the real server and the proxy only shapes bytes.
Modes, switched at any time from any thread:

- ``pass``: forward both ways.
- ``delay``: every chunk is held ``delay`` seconds (order kept), both ways.
- ``drop``: a flaky link: each new connection, and each chunk of an open
  one, is cut (FIN both ways) with probability ``drop_rate``.
- ``blackhole``: a partition: nothing moves, in either direction, on open or
  new connections; bytes wait in the kernel buffers as TCP would retransmit
  them, and flow again when the mode goes back to ``pass`` (so a request the
  client gave up on may still reach the server late, as in a real network).
- ``reset``: every open connection is reset (RST) at once, and new ones are
  reset on accept.

All proxies share one asyncio loop in a daemon thread. Test support only.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from typing import Literal

Mode = Literal["pass", "delay", "drop", "blackhole", "reset"]
MODES: tuple[Mode, ...] = ("pass", "delay", "drop", "blackhole", "reset")


class _Loop:
    """One event loop in a daemon thread, shared by every proxy of a run."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="fault-proxy", daemon=True
        )
        self.thread.start()

    def call(self, coro, timeout: float = 10.0):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class FaultProxy:
    def __init__(self, loop: _Loop, upstream_host: str, upstream_port: int, seed: int = 0):
        self._loop = loop
        self.upstream = (upstream_host, upstream_port)
        self.mode: Mode = "pass"
        self.delay = 0.5
        self.drop_rate = 0.3
        self.rng = random.Random(seed)
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._open: set[_Pipe] = set()
        self._flow: asyncio.Event | None = None

    # ---- control (any thread) ---------------------------------------------
    def start(self) -> FaultProxy:
        self._loop.call(self._start())
        return self

    async def _start(self) -> None:
        self._flow = asyncio.Event()
        self._flow.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def set(
        self, mode: Mode, *, delay: float | None = None, drop_rate: float | None = None
    ) -> None:
        async def apply() -> None:
            assert self._flow is not None
            self.mode = mode
            if delay is not None:
                self.delay = delay
            if drop_rate is not None:
                self.drop_rate = drop_rate
            if mode == "blackhole":
                self._flow.clear()
            else:
                self._flow.set()
            if mode == "reset":
                for pipe in list(self._open):
                    pipe.abort(reset=True)

        self._loop.call(apply())

    def close(self) -> None:
        async def shut() -> None:
            assert self._flow is not None
            self._flow.set()
            if self._server is not None:
                self._server.close()
            for pipe in list(self._open):
                pipe.abort(reset=True)

        with contextlib.suppress(Exception):
            self._loop.call(shut())

    # ---- data path (proxy thread) -------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        assert self._flow is not None
        if self.mode == "reset" or (self.mode == "drop" and self.rng.random() < self.drop_rate):
            _close(writer, reset=self.mode == "reset")
            return
        await self._flow.wait()  # a partition: the connection is parked until it heals
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.upstream), 5
            )
        except (OSError, TimeoutError):
            _close(
                writer, reset=True
            )  # upstream down: the client sees a reset, as from a dead host
            return
        pipe = _Pipe(self, writer, up_writer)
        self._open.add(pipe)
        try:
            await asyncio.gather(
                pipe.pump(reader, up_writer), pipe.pump(up_reader, writer), return_exceptions=True
            )
        finally:
            pipe.abort(reset=False)
            self._open.discard(pipe)


class _Pipe:
    def __init__(
        self, proxy: FaultProxy, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter
    ):
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.closed = False

    def abort(self, reset: bool) -> None:
        if self.closed:
            return
        self.closed = True
        _close(self.client, reset)
        _close(self.upstream, reset)

    async def pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        proxy = self.proxy
        assert proxy._flow is not None
        release_at = 0.0
        while not self.closed:
            await proxy._flow.wait()
            data = await src.read(65536)
            if not data:
                with contextlib.suppress(OSError, RuntimeError):
                    dst.write_eof()
                return
            await proxy._flow.wait()  # read before a partition began: held until it heals
            if self.closed:
                return
            if proxy.mode == "drop" and proxy.rng.random() < proxy.drop_rate:
                self.abort(reset=False)
                return
            if proxy.mode == "delay":
                release_at = max(release_at, time.monotonic() + proxy.delay)
                await asyncio.sleep(release_at - time.monotonic())
                await proxy._flow.wait()
            if self.closed:
                return
            if dst.is_closing():
                self.abort(reset=False)  # its other end is gone: so is the pipe, both ways
                return
            dst.write(data)
            try:
                await dst.drain()
            except (OSError, ConnectionError):
                self.abort(reset=False)
                return


def _close(writer: asyncio.StreamWriter, reset: bool) -> None:
    with contextlib.suppress(Exception):
        if reset:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # linger 0 + close: the peer gets a RST
        else:
            writer.close()


def proxy_loop() -> _Loop:
    return _Loop()
