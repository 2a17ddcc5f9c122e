"""Conformance cases of the quiet followers' watch: a label selector on one Lease, and the lock on it.

Run on both stores by the thin modules, as ``lease_conformance``'s cases are.
A follower that no release can name watches its election's Lease through the
selector ``leaselock.VACANCIES`` (contract §2, "quiet followers"); what it is
then told, and what it is not, is what these cases pin down on the real API
server, so that the fake the driver's tests run on cannot drift from it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from sidecar.core.lease import LeaseRecord, vacate
from sidecar.kube.leaselock import VACANCIES, VACANT, Changed, Deleted, LeaseLock, Lost
from tests.unit.lease_conformance import (
    NAME,
    T0,
    TIMEOUT,
    Every,
    Obj,
    Store,
    case,
    new,
    renew,
    rv,
)


def _labelled(obj: Obj, value: str | None) -> Obj:
    body: dict[str, Any] = {**obj, "metadata": dict(obj["metadata"])}
    labels = {k: v for k, v in (obj["metadata"].get("labels") or {}).items() if k != VACANT}
    body["metadata"]["labels"] = labels | ({VACANT: value} if value is not None else {})
    return body


async def _selected(store: Store, version: str, seconds: int = 2) -> list[tuple[str, int, Obj]]:
    """(type, version, object) of a ``VACANCIES`` watch on ``NAME`` until the server ends it."""
    async with asyncio.timeout(seconds + TIMEOUT):
        watch = store.watch(NAME, version, seconds, VACANCIES)
        return [(kind, rv(obj), obj) async for kind, obj in watch if kind != "BOOKMARK"]


@case()
async def test_a_selector_watch_tells_a_write_only_when_the_lease_matches_before_or_after(
    store: Store, every: Every
) -> None:
    """Writes while the Lease does not match: nothing. The write that makes it match: ADDED;
    while it matches: MODIFIED; the write that ends the match: DELETED, with the content
    before that write under the write's own version. Deleting a Lease that does not match:
    nothing; one that matches: DELETED."""
    made = await store.create(new(store, "a"))
    renewed = await store.replace(renew(made))  # no label: not told
    vacant = await store.replace(_labelled(renew(renewed, seconds=6), "true"))
    still = await store.replace(_labelled(renew(vacant, seconds=7), "true"))
    claimed = await store.replace(_labelled(renew(still, "b", seconds=8), None))
    quiet = await store.replace(renew(claimed, "b", seconds=9))  # no label: not told
    got = await _selected(store, str(rv(made)))
    assert [(kind, version) for kind, version, _ in got] == [
        ("ADDED", rv(vacant)),
        ("MODIFIED", rv(still)),
        ("DELETED", rv(claimed)),
    ], got
    assert got[2][2]["spec"] == still["spec"]  # the content before the write that ended it
    await store.delete(NAME, str(rv(quiet)))
    assert await _selected(store, str(rv(quiet))) == []
    again = await store.create(_labelled(new(store, "c"), "true"))
    await store.delete(NAME, str(rv(again)))
    assert [kind for kind, _, _ in await _selected(store, str(rv(again)))] == ["DELETED"]


@case()
async def test_the_locks_writes_say_whether_the_lease_is_vacant(store: Store, every: Every) -> None:
    """``LeaseLock``'s create and replace label a Lease that names no holder ``VACANT``, and
    take the label off one that names a holder (a hand-off names its successor)."""
    lock = LeaseLock(store, NAME)  # type: ignore[arg-type]
    made = await lock.create(new(store, "a"), TIMEOUT)
    assert VACANT not in (made["metadata"].get("labels") or {})
    released = await lock.replace(vacate(LeaseRecord.from_object(made), now=T0), TIMEOUT)
    assert released["metadata"]["labels"][VACANT] == "true"
    claimed = await lock.replace(renew(released, "b"), TIMEOUT)
    assert VACANT not in claimed["metadata"]["labels"]
    handed = await lock.replace(
        vacate(LeaseRecord.from_object(claimed), now=T0, successor="c"), TIMEOUT
    )
    assert VACANT not in handed["metadata"]["labels"]


@case()
async def test_a_quiet_lock_hears_vacancies_and_reads_in_between(
    store: Store, every: Every
) -> None:
    """A lock that follows vacancies only: a renewal is not told, but the next check reads
    it; a release to nobody is told at once; the claim that ends it is read at once (not told
    as a deletion); a Lease deleted under it is ``Lost`` at the next check (the elector
    reads); ``follow(None)`` switches to every write at once, from where it was."""
    writer = LeaseLock(store, NAME)  # type: ignore[arg-type]
    made = await writer.create(new(store, "a"), TIMEOUT)
    quiet = LeaseLock(store, NAME)  # type: ignore[arg-type]
    quiet.follow(lambda: 3.0)
    assert await quiet.read(TIMEOUT) == made
    told: list[object] = []
    loop = asyncio.get_running_loop()

    async def listen() -> None:
        async with contextlib.aclosing(quiet.events()) as events:
            async for event in events:
                if isinstance(event, Changed | Deleted | Lost):
                    told.append((loop.time(), event))

    async def until(count: int, seconds: float) -> None:
        async with asyncio.timeout(seconds):
            while len(told) < count:
                await asyncio.sleep(0.05)

    listening = asyncio.create_task(listen())
    try:
        began = loop.time()
        renewed = await writer.replace(renew(made), TIMEOUT)
        await until(1, 3.0 + TIMEOUT)
        at, event = told[0]  # type: ignore[misc]
        assert isinstance(event, Changed) and rv(event.obj) == rv(renewed)
        assert at - began >= 2.5, "a renewal is told to a quiet lock only by its check"
        began = loop.time()
        released = await writer.replace(vacate(LeaseRecord.from_object(renewed), now=T0), TIMEOUT)
        await until(2, 2.0)
        at, event = told[1]  # type: ignore[misc]
        assert isinstance(event, Changed) and rv(event.obj) == rv(released)
        assert at - began < 2.0
        claimed = await writer.replace(renew(released, "b"), TIMEOUT)
        await until(3, 2.0)  # the vacancy ended: read at once
        _, event = told[2]  # type: ignore[misc]
        assert isinstance(event, Changed) and rv(event.obj) >= rv(claimed)
        await store.delete(NAME, str(rv(claimed)))
        await until(4, 3.0 + TIMEOUT)
        assert isinstance(told[3][1], Lost)  # type: ignore[index]
        made = await writer.create(new(store, "c"), TIMEOUT)
        await quiet.read(TIMEOUT)  # the elector's read after ``Lost``
        quiet.follow(None)
        renewed = await writer.replace(renew(made, "c"), TIMEOUT)
        await until(5, 2.0)
        _, event = told[4]  # type: ignore[misc]
        assert isinstance(event, Changed) and rv(event.obj) == rv(renewed)
    finally:
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening
