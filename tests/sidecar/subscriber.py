"""An application's side of the change notifications (test and bench support).

``EventStream`` reads a sidecar's ``/events`` in a thread the way an app
would, recording every state with the wall time it arrived; ``long_poll`` is
one ``GET /leader?wait=`` with the ETag the app last saw.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Received:
    at: float  # time.time() when the app read it
    id: str
    state: dict[str, Any]


@dataclass
class EventStream:
    port: int
    timeout: float = 60.0
    events: list[Received] = field(default_factory=list)
    keepalives: int = 0
    status: int = 0
    content_type: str = ""
    error: str = ""
    ended: threading.Event = field(default_factory=threading.Event)
    _conn: http.client.HTTPConnection | None = None

    def __post_init__(self) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        threading.Thread(target=self._read, args=(self._conn,), daemon=True).start()

    def close(self) -> None:
        """Hang up, as an app that stops listening does."""
        if self._conn is not None and self._conn.sock is not None:
            with contextlib.suppress(OSError):
                self._conn.sock.shutdown(socket.SHUT_RDWR)
        self.ended.wait(5)

    def _read(self, conn: http.client.HTTPConnection) -> None:
        try:
            conn.request("GET", "/events")
            resp = conn.getresponse()
            self.status, self.content_type = resp.status, resp.getheader("Content-Type", "")
            ident = ""
            while line := resp.readline():
                text = line.decode().rstrip("\n")
                if text.startswith("id: "):
                    ident = text[4:]
                elif text.startswith("data: "):
                    self.events.append(Received(time.time(), ident, json.loads(text[6:])))
                elif text.startswith(":"):
                    self.keepalives += 1
        except (OSError, ValueError, http.client.HTTPException) as err:
            self.error = repr(err)
        finally:
            conn.close()
            self.ended.set()

    def first(self, predicate: Any) -> Received | None:
        return next((e for e in self.events if predicate(e.state)), None)


@dataclass
class Answer:
    status: int
    etag: str
    state: dict[str, Any] | None
    seconds: float
    body: str


def long_poll(port: int, wait: str, etag: str | None = None, timeout: float = 60.0) -> Answer:
    """``GET /leader?wait=...`` with ``If-None-Match: etag``; what came back and how long it took."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    start = time.monotonic()
    try:
        conn.request("GET", f"/leader?wait={wait}", headers={"If-None-Match": etag} if etag else {})
        resp = conn.getresponse()
        body = resp.read().decode()
    finally:
        conn.close()
    state = json.loads(body) if resp.getheader("Content-Type") == "application/json" else None
    return Answer(resp.status, resp.getheader("ETag", ""), state, time.monotonic() - start, body)
