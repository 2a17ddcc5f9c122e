"""The wait before a retry: one formula for every retry loop of the sidecar and the injector.

``delay(attempt, first, cap)`` is ``first`` doubled for each attempt after the
first, at most ``cap``, times a factor drawn from ``jitter``: many retriers of
one object (a mass start, a node drain) spread out instead of coming back in
waves. ``jitter=(1, 1)`` is for a loop that is the only one of its kind (one
pod's own label, one injector's certificate). Pure: the random source is
given (the election's seeded one in tests).
"""

from __future__ import annotations

import random

#: Enough halvings that ``first * 2 ** n`` is past any cap in seconds.
MAX_DOUBLINGS = 40


def delay(
    attempt: int,
    first: float,
    cap: float,
    *,
    jitter: tuple[float, float] = (0.5, 1.0),
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt`` (1 for the first)."""
    doublings = min(max(attempt - 1, 0), MAX_DOUBLINGS)
    low, high = jitter
    factor = low if low == high else (rng or random).uniform(low, high)
    return float(min(cap, first * 2**doublings) * factor)
