"""A planned transfer with an acknowledged drain, beside client-go's graceful release (issue 39).

Three sidecars in one election. The leader's app asks ``POST /transfer`` (to
the next candidate) and, told of the drain in the state file, acknowledges at
once (``POST /drained``), as an app that stops on the notice would. Measured:
**leaderless**, from the old leader's "not leader" state file to the
successor's "leading" one, and the whole move from the request. client-go has
no transfer: its nearest move is the graceful release of a stopping leader
(``ReleaseOnCancel``), whose leaderless time is the same span in this run's
graceful handovers (the successor's leading file minus the old leader's step-down).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.chaos.moves import post

from .figures import ms, summary
from .harness import IMPLS, Candidate, Credentials, Pool, parse_time, wait_until
from .scenarios import _one_leader

#: Between moves: every candidate back in the roster (joins within 1 s) and a renewal or two.
SETTLE = 3.0


def measure(workdir: Path, creds: Credentials, count: int) -> dict[str, Any]:
    """``count`` transfers among 3 sidecars; the raw figures of each."""
    pool = Pool(IMPLS["sidecar"], "transfer", workdir, creds, prefix="xfer")
    moves: list[dict[str, float]] = []
    try:
        for _ in range(3):
            pool.spawn()
        _one_leader(pool, 60)
        time.sleep(SETTLE)
        for _ in range(count):
            leader = _one_leader(pool, 60)
            others = [c for c in pool.live() if c is not leader]
            asked = time.time()
            if post(leader.port, "/transfer")[0] != 202:
                continue

            def told_drain(leader: Candidate = leader) -> dict[str, Any] | None:
                st = leader.state()
                return st if st and st.get("drain") else None

            state = wait_until(told_drain, 15, 0.002, "the drain told")
            told = parse_time(str(state["updated_at"]))
            post(leader.port, f"/drained?token={state['drain']['token']}")
            acked = time.time()

            def successor(others: list[Candidate] = others, asked: float = asked) -> float | None:
                found = [t for c in others if (t := c.leading_since()) and t >= asked - 0.001]
                return min(found) if found else None

            led = wait_until(successor, 15, 0.002, "the successor leading")
            moves.append(
                {"leaderless": led - told, "request_to_leading": led - asked, "ack": acked - told}
            )
            time.sleep(SETTLE)
    finally:
        pool.stop()
    return {"moves": moves}


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The transfer's leaderless p50 and max against client-go's graceful release's."""
    moves = ((res.get("transfer") or {}).get("moves")) or []
    peer = ((res.get("graceful_handover") or {}).get("clientgo") or {}).get("handovers") or []
    theirs = [h["latency"] - h["stepdown"] for h in peer if h.get("stepdown") is not None]
    if not moves or not theirs:
        return []
    a, b = summary([m["leaderless"] for m in moves]), summary(theirs)
    out = []
    for stat in ("p50", "max"):
        out.append(
            {
                "id": "39",
                "metric": f"planned transfer, acknowledged drain: leaderless {stat}",
                "target": "≤ client-go's graceful release",
                "measured": f"{ms(a[stat])} vs {ms(b[stat])} (n = {a['n']}, {b['n']})",
                "met": a[stat] <= b[stat],
            }
        )
    return out
