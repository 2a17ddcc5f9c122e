"""``publish.changes.Changes``: the numbered sequence of published states that /events and ?wait= follow."""

from __future__ import annotations

import asyncio
import dataclasses

from sidecar.core.state import State
from sidecar.publish.changes import HISTORY, Changes

FOLLOWER = State(
    election="main",
    namespace="ns",
    lease="leader-main",
    identity="pod-a",
    is_leader=False,
    holder="pod-b",
    fencing_token=None,
    acquired_at="2026-11-23T10:00:00.000000Z",
    renewed_at="2026-11-23T10:00:02.000000Z",
    valid_until=None,
    updated_at="2026-11-23T10:00:02.100000Z",
)
LEADER = dataclasses.replace(
    FOLLOWER, is_leader=True, holder="pod-a", fencing_token=7, valid_until="2026-11-23T10:00:12Z"
)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_a_state_that_differs_only_in_when_it_was_taken_or_renewed_is_no_change() -> None:
    changes = Changes(FOLLOWER)
    assert not changes.offer(dataclasses.replace(FOLLOWER, updated_at="2026-11-23T10:00:03Z"))
    # Issue 28 item 3: a renew seen by a follower is no change (a leader's moves valid_until).
    assert not changes.offer(dataclasses.replace(FOLLOWER, renewed_at="2026-11-23T10:00:04Z"))
    assert changes.version == 1
    assert changes.offer(dataclasses.replace(FOLLOWER, acquired_at="2026-11-23T10:00:05Z"))
    assert changes.offer(LEADER)
    assert not changes.offer(dataclasses.replace(LEADER, renewed_at="2026-11-23T10:00:06Z"))
    assert changes.offer(dataclasses.replace(LEADER, valid_until="2026-11-23T10:00:16Z"))
    assert changes.version == 4 and changes.state.valid_until == "2026-11-23T10:00:16Z"


def test_a_reader_behind_is_answered_at_once_and_a_current_one_waits_for_the_change() -> None:
    async def scenario() -> None:
        changes = Changes(FOLLOWER)
        changes.offer(LEADER)
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert await changes.wait(1, 5) == 2  # seen 1, now 2: no waiting
        assert loop.time() - start < 0.5
        waiter = asyncio.create_task(changes.wait(2, 5))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        changes.offer(FOLLOWER)
        assert await waiter == 3

    run(scenario())


def test_a_wait_without_a_change_ends_at_its_timeout_with_the_same_version() -> None:
    async def scenario() -> None:
        changes = Changes(FOLLOWER)
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert await changes.wait(None, 0.2) == 1
        assert 0.15 < loop.time() - start < 2

    run(scenario())


def test_close_answers_every_waiter_at_once() -> None:
    async def scenario() -> None:
        changes = Changes(FOLLOWER)
        waiters = [asyncio.create_task(changes.wait(1, 60)) for _ in range(3)]
        await asyncio.sleep(0.05)
        changes.close()
        assert await asyncio.wait_for(asyncio.gather(*waiters), 1) == [1, 1, 1]
        assert await asyncio.wait_for(changes.wait(1, 60), 1) == 1  # and later ones too

    run(scenario())


def test_a_reader_gets_every_change_it_missed_in_order_up_to_the_history_bound() -> None:
    changes = Changes(FOLLOWER)
    changes.offer(LEADER)
    changes.offer(FOLLOWER)
    assert [(v, s.is_leader) for v, s in changes.since(1)] == [(2, True), (3, False)]
    assert changes.since(3) == []
    for i in range(HISTORY + 10):
        changes.offer(dataclasses.replace(LEADER, fencing_token=100 + i))
    kept = changes.since(0)
    assert len(kept) == HISTORY
    assert [v for v, _ in kept] == list(range(changes.version - HISTORY + 1, changes.version + 1))
