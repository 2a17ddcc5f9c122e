"""The chaos run's apps and the faults that move leadership while every sidecar runs on (issue 39).

Each of today's candidates checks an "app" of its own (``HealthApp``: an HTTP
server in the harness, on loopback, whose answer the faults set), with short
settings (``HEALTH_FLAGS``), so a restarted sidecar is a candidate again after
one passed check. The faults:

``transfer``   the leader's app asks ``POST /transfer`` (to a random other
               candidate, or the next), and acknowledges the drain half the time
``unhealthy``  the leader's app fails its checks for a few seconds, often longer
               than the hold, then passes again
``ack-hang``   a transfer whose app acknowledges at once, then its sidecar is
               SIGSTOPped for longer than the lease (frozen mid-hand-over), and
               resumed

An acknowledgement is recorded (``acks``): an app that said it stopped acting on
a term no longer claims it (the checker cuts a lazy app's claim there).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

#: Checks every 0.5 s, 2 failures to stand aside, 1 pass to stand again, a 2 s hold.
HEALTH_FLAGS = (
    "--health-period=500ms",
    "--health-failures=2",
    "--health-successes=1",
    "--health-hold=2s",
)


class HealthApp(http.server.ThreadingHTTPServer):
    """``GET /healthz``: 200 while ``healthy``, else 503."""

    healthy = True

    def __init__(self) -> None:
        app = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200 if app.healthy else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def flags(self) -> tuple[str, ...]:
        return (f"--health-url=http://127.0.0.1:{self.server_address[1]}/healthz", *HEALTH_FLAGS)

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@dataclass(frozen=True)
class Ack:
    who: str
    token: int
    at: float


def post(port: int, path: str) -> tuple[int, str]:
    """(status, body) of ``POST path`` on a sidecar's port; (0, "") when it did not answer."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST", data=b"")
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode()
    except OSError:
        return 0, ""


def drain_token(state_file: str, within: float) -> int | None:
    """The token of the drain the state file tells, waiting up to ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(state_file) as f:
                drain = json.load(f).get("drain")
        except (OSError, ValueError):
            drain = None
        if isinstance(drain, dict) and isinstance(drain.get("token"), int):
            return int(drain["token"])
        time.sleep(0.01)
    return None
