"""A paused sidecar (SIGSTOP) cannot rewrite its file and its probe stops answering.

This proves, with real processes, the two halves of docs/reliability.md:
``valid_until`` in the stale file runs out before anyone else may lead, and
the ``/leader`` probe fails for as long as the process is stopped. After
SIGCONT the old leader never claims again on its own stale clock.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from tests.chaos.checker import parse_ts
from tests.sidecar.proc import SidecarProcess, leaders, wait_for

Spawn = Callable[..., SidecarProcess]
LEASE, RENEW = 3.0, 2.0  # tests.sidecar.proc.FAST


def test_paused_leader_is_covered_by_valid_until_and_the_failing_probe(spawn: Spawn) -> None:
    procs = [spawn("pod-a"), spawn("pod-b")]
    wait_for(lambda: len(leaders(procs)) == 1, 15, what="a leader")
    time.sleep(1.5)  # a few renewals
    old = next(p for p in procs if p.leads())
    new = next(p for p in procs if p is not old)

    old.signal(signal.SIGSTOP)
    stopped = time.time()
    try:
        stale = old.state()
        assert stale is not None and stale["is_leader"] is True
        vouched = parse_ts(stale["valid_until"])
        assert vouched is not None
        # valid_until = start of the last successful renew + renew deadline.
        assert vouched - stopped <= RENEW + 0.05, (vouched, stopped)

        status, _ = old.http("/leader", timeout=0.5)
        assert status == 0, "a stopped process must not answer its readiness probe"

        # The successor's first claim starts only after the stale file's vouch ran out.
        first: dict[str, object] | None = None
        deadline = time.monotonic() + 4 * LEASE
        while time.monotonic() < deadline:
            state = new.state()
            if state and state.get("is_leader"):
                first = state
                break
            assert old.state() == stale, "a stopped process cannot rewrite its file"
            time.sleep(0.005)
        assert first is not None, "nobody took over from the paused leader"
        took_over = parse_ts(first["updated_at"])
        assert took_over is not None
        margin = took_over - vouched
        assert margin > 0, (
            f"{new.identity} claimed {-margin:.3f}s before the stale file's valid_until"
        )
        # The stale file still says is_leader: true; only valid_until makes it false.
        assert old.state() == stale and stale["is_leader"] is True and not old.leads()
        print(
            f"successor claimed {margin:.3f}s after the paused leader's valid_until "
            f"(design margin lease - renew = {LEASE - RENEW:g}s)"
        )

        time.sleep(max(0.0, stopped + LEASE + 1.5 - time.time()))  # paused > lease duration
        assert old.http("/leader", timeout=0.5)[0] == 0
    finally:
        old.signal(signal.SIGCONT)

    # Resumed: it answers 503 at once (computed from its monotonic clock), its
    # file says not leader soon after, and it never claims while the other leads.
    resumed = time.monotonic()
    status = wait_for(lambda: old.http("/leader", timeout=0.5)[0] or None, 5, what="an answer")
    assert status == 503
    assert time.monotonic() - resumed < 2.0
    wait_for(
        lambda: (s := old.state()) is not None and s["is_leader"] is False,
        3,
        what="the resumed sidecar to rewrite its file",
    )
    end = time.monotonic() + 2 * LEASE
    while time.monotonic() < end:
        assert old.identity not in leaders(procs)
        assert old.http("/leader", timeout=0.5)[0] in (0, 503)
        time.sleep(0.02)
    assert new.leads()
    assert "Traceback" not in old.raw_log()
