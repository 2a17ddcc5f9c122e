"""Health-driven candidacy against the real API server, in real processes (contract §2, health).

Each sidecar checks its own "app": an HTTP server in this test whose answer
(200 or 503) the test sets, on loopback, as ``--health-url`` asks.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.sidecar.proc import FAST, SidecarProcess, leaders, wait_for

Spawn = Callable[..., SidecarProcess]
#: Checks every 0.5 s, 2 failures to stand aside, 1 pass to stand again, a short hold.
HEALTH = ("--health-period=500ms", "--health-failures=2", "--health-successes=1")
HOLD = "--health-hold=1s"


class App(http.server.ThreadingHTTPServer):
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
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/healthz"


@pytest.fixture
def apps() -> Iterator[dict[str, App]]:
    made = {name: App() for name in ("pod-a", "pod-b")}
    yield made
    for app in made.values():
        app.shutdown()
        app.server_close()


def test_leadership_leaves_an_unhealthy_app_and_comes_back_once_healthy(
    spawn: Spawn, apps: dict[str, App]
) -> None:
    def candidate(name: str) -> SidecarProcess:
        return spawn(name, extra=(*FAST, *HEALTH, HOLD, f"--health-url={apps[name].url}"))

    a = candidate("pod-a")
    wait_for(a.leads, 30, what="pod-a to lead")
    b = candidate("pod-b")
    wait_for(lambda: (b.state() or {}).get("holder") == "pod-a", 20, what="pod-b to follow")
    time.sleep(2)  # pod-b listed; pod-a has led past its hold

    apps["pod-a"].healthy = False
    failed = time.monotonic()
    wait_for(lambda: leaders([a, b]) == ["pod-b"], 10, what="pod-b alone leads")
    took = time.monotonic() - failed
    # Two checks 0.5 s apart, then the drain up to the last valid_until (the 2 s renew deadline).
    assert took < 1.0 + 2.0 + 2.0, f"pod-b led {took:.2f}s after pod-a's app failed"
    time.sleep(3)
    assert leaders([a, b]) == ["pod-b"], "the unhealthy pod led again"

    apps["pod-a"].healthy = True
    time.sleep(1.5)  # a pass: pod-a a candidate again, and listed
    b.stop()
    wait_for(a.leads, 10, what="pod-a to lead once healthy")
    assert "the app is unhealthy: standing aside" in a.messages()


def test_a_pod_whose_app_fails_never_leads(spawn: Spawn, apps: dict[str, App]) -> None:
    apps["pod-a"].healthy = False
    a = spawn("pod-a", extra=(*FAST, *HEALTH, f"--health-url={apps['pod-a'].url}"))
    time.sleep(6)
    assert not a.leads() and (a.state() or {}).get("holder") is None
