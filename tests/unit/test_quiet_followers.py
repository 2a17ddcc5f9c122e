"""Quiet followers (contract §2): a follower no release can name hears only of vacancies.

In-process, on the fake store (its selector watch held to the real server's by
``lease_conformance_quiet``), with real electors wired as in a pod and
looptime's virtual clock. What is asserted is what a crowd needs: a hand-off's
writes reach the holder and the seated followers only, no quiet follower
writes a claim while the holder lives, and when the holder and every seated
follower crash, a quiet one leads within its lease plus one check.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.core import roster
from sidecar.core.lease import claim
from sidecar.driver import handofflock
from sidecar.driver.handofflock import CHECK_EVERY, DEFAULT_DURATION, HandoffLock
from sidecar.driver.membership import JOIN_SPREAD, Membership
from sidecar.kit.logs import Logger
from sidecar.kube.coordination import Coordination
from sidecar.kube.leaselock import VACANCIES, LeaseLock
from tests.unit.fake_leases import FakeLeases
from tests.unit.test_driver import LEASE, Candidate, LoopClock, _listed, run, until

#: The longest a quiet follower goes without reading the Lease.
CHECK = CHECK_EVERY[1] * DEFAULT_DURATION


class CountingLeases(FakeLeases):
    """The fake store, counting the events its watches deliver, by label selector."""

    def __init__(self) -> None:
        super().__init__()
        self.told: collections.Counter[str] = collections.Counter()

    async def watch(  # type: ignore[override]
        self, name: str, resource_version: str, timeout_seconds: int, label_selector: str = ""
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        async for event in super().watch(name, resource_version, timeout_seconds, label_selector):
            self.told[label_selector] += 1
            yield event


def _quiet(c: Candidate) -> bool:
    lock = c.elector.lock
    assert isinstance(lock, HandoffLock) and lock.roster is not None
    return lock.roster.quiet()


def _crash(c: Candidate) -> None:
    """As SIGKILL: every task of the candidate ends where it is, nothing more is written."""
    assert c.task is not None
    c.task.cancel()
    for task in c.elector._tasks:
        task.cancel()


async def _crowd(store: FakeLeases, tmp_path: Path, followers: int) -> list[Candidate]:
    a = await Candidate("a", store, tmp_path).start()
    await until(a.leads, 16, "a leads")
    crowd = [a]
    for i in range(followers):
        crowd.append(await Candidate(f"f{i}", store, tmp_path).start())
        await asyncio.sleep(1.5)
    await asyncio.sleep(CHECK + 2)  # every follower has seen every seat taken, or taken one
    return crowd


def test_a_handover_goes_unheard_by_the_followers_no_release_can_name(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = CountingLeases()
        a, *followers = await _crowd(store, tmp_path, 10)
        seated = _listed(store)
        assert len(seated) == roster.SEATS
        quiet = [f for f in followers if f.identity not in seated]
        assert [f.identity for f in followers if _quiet(f)] == [f.identity for f in quiet]
        told = store.told.copy()
        assert await a.stop() == 0
        await until(lambda: any(f.leads() for f in followers), 5, "a follower takes over")
        await asyncio.sleep(0.5)
        assert store.told[VACANCIES] == told[VACANCIES], "a quiet follower heard the hand-off"
        assert store.told[""] > told[""]
        (successor,) = [f.identity for f in followers if f.leads()]
        assert successor in seated
        await asyncio.sleep(CHECK + 1)
        for f in quiet:  # each read the Lease since, and knows who leads
            assert f.elector.election.seen.holder == successor, f.identity
        await asyncio.sleep(60)
        claims = [
            w for w in store.writes if w[0] != "patch" and w[1] in {f.identity for f in quiet}
        ]
        assert claims == [], "a quiet follower claimed while the holder lived"
        assert [f.identity for f in followers if f.leads()] == [successor]
        for f in followers:
            await f.stop()

    run(scenario)


def test_when_the_holder_and_the_seated_crash_a_quiet_follower_leads(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = FakeLeases()
        crowd = await _crowd(store, tmp_path, 6)
        seated = set(_listed(store))
        gone = [c for c in crowd if c.identity in seated or c.leads()]
        assert len(gone) == roster.SEATS + 1
        loop = asyncio.get_running_loop()
        crashed = loop.time()
        for c in gone:
            _crash(c)
        left = [c for c in crowd if c not in gone]
        bound = DEFAULT_DURATION + CHECK + 2
        await until(lambda: any(c.leads() for c in left), bound, "a quiet follower leads")
        await asyncio.sleep(5)
        assert len([c for c in left if c.leads()]) == 1
        assert store.holder(LEASE) in {c.identity for c in left}
        assert loop.time() - crashed >= DEFAULT_DURATION  # nobody in before the lease ran out
        for c in left:
            await c.stop()

    run(scenario)


def test_a_lease_older_than_our_join_does_not_make_us_quiet_again() -> None:
    """A quiet follower that joins goes to the full watch, which resumes from the version it
    last saw, before its join: the Leases it replays first lack its entry. Taken as news,
    they made it quiet again, and the join's own write, no vacancy, was never told: named
    at the next release, it heard of it a check later (the crowd bench's 1 s hand-offs)."""

    async def scenario() -> None:
        store = FakeLeases()
        clock = LoopClock()
        now = clock.wall()
        body = claim(None, name=LEASE, namespace="ns", identity="a", lease_duration=15, now=now)
        for who in ("f0", "f1", "f2"):
            body["metadata"].setdefault("annotations", {}).update(roster.entry(LEASE, who, now))
        full = await store.create(body)
        shared = Coordination(store, "ns")  # type: ignore[arg-type]
        m = Membership(shared, LEASE, "q", clock, Logger("error"))  # type: ignore[arg-type]
        told: list[bool] = []
        m.on_quiet = lambda: told.append(m.quiet())
        m.seen(full)
        assert m.quiet() and told == [True]  # every seat taken
        key = roster.entry_key(LEASE, "f0")
        freed = await store.patch(LEASE, {"metadata": {"annotations": {key: None}}})
        m.seen(freed)  # a check finds a seat free
        await until(
            lambda: "q" in roster.notes_of(store.objects[LEASE]).__str__(),
            2 * JOIN_SPREAD,
            "q joins",
        )
        assert not m.quiet() and told == [True, False]
        m.seen(freed)  # replayed by the full watch: older than the join
        assert not m.quiet() and told == [True, False]
        await m.before_release()

    run(scenario)


def test_a_quiet_follower_reads_by_the_duration_of_the_lease_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its reads go by the Lease's own duration, the one its elector judges expiry by, from
    the first read on: a follower that went quiet at start-up (every seat already taken)
    and read by a longer default claimed a live holder's Lease after its duration (on the
    real server, a 3 s lease: tests/sidecar/test_handoff.py)."""
    monkeypatch.setattr(handofflock, "DEFAULT_DURATION", 4 * DEFAULT_DURATION)

    async def scenario() -> None:
        store = FakeLeases()
        crowd = await _crowd(store, tmp_path, 6)
        writes, conflicts = len(store.writes), store.conflicts
        late = [await Candidate(f"late{i}", store, tmp_path).start() for i in range(3)]
        await asyncio.sleep(5 * DEFAULT_DURATION)
        assert store.writes[writes:] == [w for w in store.writes[writes:] if w[1] == "a"]
        assert store.conflicts == conflicts
        for c in [*crowd, *late]:
            await c.stop()

    run(scenario)


@pytest.mark.parametrize("duration", [None, 0, "15"])
def test_a_lease_naming_no_valid_duration_is_read_by_the_candidates_own(
    duration: object,
) -> None:
    """A Lease whose duration is absent or invalid is judged expired by the candidate's
    own ``--lease-duration`` (``Sighting``); its quiet reads go by that one too, not by a
    default that may be longer than the lease (a 3 s lease read every 8 to 11 s lets a
    quiet follower claim a holder it never read alive)."""
    lock = HandoffLock(LeaseLock(FakeLeases(), LEASE), None, None, 3.0)
    lock._saw({"spec": {"holderIdentity": "a", "leaseDurationSeconds": duration}})
    checks = [lock._check_in() for _ in range(200)]
    assert all(CHECK_EVERY[0] * 3.0 <= c <= CHECK_EVERY[1] * 3.0 for c in checks)
    lock._saw({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 7}})
    assert all(c <= CHECK_EVERY[1] * 7 for c in [lock._check_in() for _ in range(50)])
