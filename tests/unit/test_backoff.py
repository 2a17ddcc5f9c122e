"""core.backoff: the one retry formula (issue 38)."""

from __future__ import annotations

import random

from sidecar.core import backoff
from sidecar.core.election import Election
from sidecar.core.timing import Timing


def test_doubles_from_the_first_up_to_the_cap_without_jitter() -> None:
    waits = [backoff.delay(n, 0.5, 30.0, jitter=(1, 1)) for n in range(1, 10)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_jitter_stays_within_its_bounds_and_spreads() -> None:
    rng = random.Random(7)
    waits = [backoff.delay(3, 1.0, 10.0, rng=rng) for _ in range(1000)]
    assert all(2.0 <= w <= 4.0 for w in waits)
    assert max(waits) - min(waits) > 1.5  # spread, not one value


def test_a_huge_attempt_count_is_the_cap_not_an_overflow() -> None:
    assert backoff.delay(10**9, 1.0, 120.0, jitter=(1, 1)) == 120.0


def test_a_failing_follower_backs_off_one_two_four_retry_periods_with_jitter() -> None:
    """Through the state machine: retry period x 1, 2, 4, 4... times 0.5-1.0 (issue 38 moved
    the formula to core.backoff; the waits stayed)."""
    election = Election("me", "leader-main", "ns", Timing(15, 10, 2), rng=random.Random(1))
    now = 100.0
    for base in (2.0, 4.0, 8.0, 8.0, 8.0):
        election.on_error(now)
        wait = election.not_before - now
        assert base * 0.5 <= wait <= base, (base, wait)
        now = election.not_before
