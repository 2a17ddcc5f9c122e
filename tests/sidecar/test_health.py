"""Health-driven candidacy against the real API server, in real processes (contract §2, health).

Each sidecar checks its own "app": an HTTP server on loopback whose answer
(200 or 503) the test sets (``tests.chaos.moves.HealthApp``, the chaos run's
apps), as ``--health-url`` asks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.chaos.moves import HealthApp
from tests.sidecar.proc import FAST, SidecarProcess, leaders, wait_for

Spawn = Callable[..., SidecarProcess]
#: Checks every 0.5 s, 2 failures to stand aside, 1 pass to stand again, a short hold.
HEALTH = ("--health-period=500ms", "--health-failures=2", "--health-successes=1")
HOLD = "--health-hold=1s"


@pytest.fixture
def apps() -> Iterator[dict[str, HealthApp]]:
    made = {name: HealthApp() for name in ("pod-a", "pod-b")}
    yield made
    for app in made.values():
        app.close()


def test_leadership_leaves_an_unhealthy_app_and_comes_back_once_healthy(
    spawn: Spawn, apps: dict[str, HealthApp]
) -> None:
    def candidate(name: str) -> SidecarProcess:
        return spawn(name, extra=(*FAST, *HEALTH, HOLD, apps[name].flags[0]))

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


def test_a_pod_whose_app_fails_never_leads(spawn: Spawn, apps: dict[str, HealthApp]) -> None:
    apps["pod-a"].healthy = False
    a = spawn("pod-a", extra=(*FAST, *HEALTH, apps["pod-a"].flags[0]))
    time.sleep(6)
    assert not a.leads() and (a.state() or {}).get("holder") is None
