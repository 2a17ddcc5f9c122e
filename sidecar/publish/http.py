"""The local HTTP endpoints: ``/healthz``, ``/leader``, ``/status``, ``/metrics``.

Every answer is computed at request time from the election's live state and
the monotonic clock, never from a cached flag, so ``/leader`` turns 503 the
instant leadership lapses even if the election loop is busy. A probe that
cannot connect at all (the process is stopped) fails, which is the other half
of the safety story for a paused sidecar.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import h11

from ..logs import Logger

StateFn = Callable[[], dict[str, Any]]


class StatusServer:
    def __init__(
        self,
        port: int,
        state: StateFn,
        healthy: Callable[[], bool],
        metrics: Callable[[], str],
        log: Logger,
    ):
        self.port = port
        self.state = state
        self.healthy = healthy
        self.metrics = metrics
        self.log = log
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        # Every interface: the kubelet probes the pod IP, the app uses loopback.
        self.server = await asyncio.start_server(self._serve, None, self.port, reuse_address=True)

    @property
    def bound_port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    def answer(self, method: str, path: str) -> tuple[int, str, bytes]:
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
            return (200 if state["is_leader"] else 503), "application/json", _json(state)
        if path == "/status":
            state = self.state()
            return 200, "application/json", _json({**state, "name": state.get("holder")})
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4; charset=utf-8", self.metrics().encode()
        return 404, "text/plain", b"not found: try /leader, /status, /healthz or /metrics\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    async with asyncio.timeout(30):
                        data = await reader.read(8192)
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    status, ctype, body = self.answer(event.method.decode(), event.target.decode())
                    headers = [
                        ("Content-Type", ctype),
                        ("Content-Length", str(len(body))),
                        ("Cache-Control", "no-store"),
                    ]
                    out = conn.send(h11.Response(status_code=status, headers=headers))
                    if event.method != b"HEAD":
                        out += conn.send(h11.Data(data=body))
                    out += conn.send(h11.EndOfMessage())
                    writer.write(out)
                    await writer.drain()
                    continue
                if (
                    isinstance(event, h11.EndOfMessage)
                    and conn.our_state is h11.DONE
                    and conn.their_state is h11.DONE
                ):
                    conn.start_next_cycle()
                    continue
                if isinstance(event, h11.ConnectionClosed) or conn.our_state in (
                    h11.MUST_CLOSE,
                    h11.CLOSED,
                ):
                    break
        except (h11.RemoteProtocolError, ConnectionError, TimeoutError, OSError):
            with contextlib.suppress(Exception):
                if conn.our_state is h11.SEND_RESPONSE:
                    writer.write(
                        conn.send(h11.Response(status_code=400, headers=[("Content-Length", "0")]))
                    )
        finally:
            with contextlib.suppress(Exception):
                writer.close()


def _json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()
