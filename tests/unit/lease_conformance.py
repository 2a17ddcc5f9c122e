"""The Lease store's conformance suite: what ``sidecar/`` relies on, written once, run on both stores.

``tests/unit/test_lease_conformance.py`` runs these cases in-process on
``FakeLeases`` (looptime's virtual time; ``make test-fast``), and
``tests/sidecar/test_lease_conformance.py`` on a ``LeaseStore`` against the
real kube-apiserver, a fresh namespace per case: where the fake drifts from
the server, a case fails on the fake, not a driver test that trusted it.

The cases are the calls ``sidecar/`` makes. Here, the elector's through
``LeaseLock`` (get and list by name, create, replace, a watch resumed from the
read) and the versions it fences with; in ``lease_conformance_sweep``, the
hand-off and roster's (``driver.membership``, ``driver.firstterm``, ``kube.coordination``: cached
get, merge patch over a version) and the sweeps' (``kube.sweep``,
``injector.sweep``: list by label, delete over a version, in every namespace).
A case one store cannot show is skipped there, saying why. ``case`` makes each
a test of the ``backend`` fixture, which the two thin modules define.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from sidecar.core.lease import LeaseRecord, claim, vacate, version_number
from sidecar.kube.errors import ApiError, Conflict, Gone
from sidecar.kube.leaselock import Changed, Deleted, Failed, LeaseLock, Lost

Obj = dict[str, Any]
NAME, OTHER = "leader-conformance", "leader-other"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TIMEOUT = 10.0  # seconds any one call or wait of a case may take


class Store(Protocol):
    """The ``LeaseStore`` methods ``sidecar/`` calls: the interface both stores must honour."""

    namespace: str
    request_timeout: float

    async def get(self, name: str, timeout: float | None = None, cached: bool = False) -> Any: ...
    async def list(
        self, label_selector: str = "", field_selector: str = "", timeout: float | None = None
    ) -> tuple[list[Obj], str]: ...
    async def create(self, body: Obj, timeout: float | None = None) -> Obj: ...
    async def replace(self, body: Obj, timeout: float | None = None) -> Obj: ...
    async def patch(self, name: str, body: Obj, timeout: float | None = None) -> Obj: ...
    async def delete(self, name: str, version: str, *, namespace: str | None = None) -> None: ...
    def watch(
        self, name: str, version: str, timeout_seconds: int, label_selector: str = ""
    ) -> AsyncIterator[Any]: ...


#: A store of every namespace (the injector's); None on the fake.
Every = Store | None
#: A case: the store of an empty namespace, and ``Every``.
Case = Callable[[Store, Every], Awaitable[None]]


@dataclass(frozen=True)
class Backend:
    """What the thin modules give the ``backend`` fixture: which store, and how to run a case."""

    fake: bool
    run: Callable[[Case], None]


def case(*, fake: str = "", real: str = "") -> Callable[[Case], Callable[[Backend], None]]:
    """A test of ``backend``; ``fake``/``real``: why that store cannot show it (skipped there)."""

    def wrap(body: Case) -> Callable[[Backend], None]:
        def test(backend: Backend) -> None:
            if why := (fake if backend.fake else real):
                pytest.skip(why)
            backend.run(body)

        test.__name__ = test.__qualname__ = body.__name__
        test.__doc__ = body.__doc__
        return test

    return wrap


# ---- helpers ----------------------------------------------------------------------
def new(store: Store, holder: str, name: str = NAME, **notes: str) -> Obj:
    """The Lease a first leader creates (``core.lease.claim``), with annotations ``notes``."""
    body = claim(
        None, name=name, namespace=store.namespace, identity=holder, lease_duration=15, now=T0
    )
    if notes:
        body["metadata"]["annotations"] = notes
    return body


def renew(obj: Obj, holder: str = "a", seconds: float = 5) -> Obj:
    """The renew (or, another ``holder``, the takeover) written over ``obj``."""
    record, now = LeaseRecord.from_object(obj), T0 + dt.timedelta(seconds=seconds)
    acquire = record.holder != holder
    where = {"name": record.name, "namespace": record.namespace}
    return claim(record, **where, identity=holder, lease_duration=15, now=now, acquire=acquire)


def rv(obj: Obj) -> int:
    version = version_number(str(obj["metadata"]["resourceVersion"]))
    assert version is not None, obj["metadata"]
    return version


def over(obj: Obj, **notes: str | None) -> Obj:
    """A merge patch of annotations, only over ``obj``'s version (the roster's writes)."""
    version = obj["metadata"]["resourceVersion"]
    return {"metadata": {"annotations": notes, "resourceVersion": version}}


async def lease_events(store: Store, version: str, seconds: int = 1) -> list[tuple[str, int]]:
    """(type, version) of the watch on ``NAME`` from ``version`` until the server ends it;
    bookmarks left out (the server sends them when it likes; they change nothing)."""
    async with asyncio.timeout(seconds + TIMEOUT):
        events = [(kind, obj) async for kind, obj in store.watch(NAME, version, seconds)]
    return [(kind, rv(obj)) for kind, obj in events if kind != "BOOKMARK"]


async def changes(lock: LeaseLock, count: int) -> list[Changed | Deleted]:
    """The first ``count`` changes ``lock.events()`` reports; a lost or failed watch fails."""
    got: list[Changed | Deleted] = []
    async with asyncio.timeout(TIMEOUT), contextlib.aclosing(lock.events()) as events:
        async for event in events:
            assert not isinstance(event, Lost | Failed), event
            if isinstance(event, Changed | Deleted):
                got.append(event)
            if len(got) == count:
                return got
    raise AssertionError(f"the watch ended after {got}")


# ---- the cases ----------------------------------------------------------------------
@case()
async def test_an_absent_lease_reads_as_none(store: Store, every: Every) -> None:
    """A get, a cached get, a list by name and ``LeaseLock.read`` of no Lease: None, with a
    version to watch from."""
    assert await store.get(NAME) is None
    assert await store.get(NAME, cached=True) is None
    items, version = await store.list(field_selector=f"metadata.name={NAME}")
    assert items == [] and version_number(version) is not None
    assert await LeaseLock(store, NAME).read(TIMEOUT) is None  # type: ignore[arg-type]


@case()
async def test_create_once_then_conflict(store: Store, every: Every) -> None:
    """A create answers the Lease as sent, with a version and a uid; a second create of the
    name is 409 (another candidate created it first) and the first stays."""
    sent = new(store, "a")
    made = await store.create(sent)
    assert made["spec"] == sent["spec"] and made["metadata"]["labels"] == sent["metadata"]["labels"]
    assert rv(made) > 0 and made["metadata"]["uid"]
    assert made["metadata"]["namespace"] == store.namespace
    with pytest.raises(Conflict):
        await store.create(new(store, "b"))
    assert (await store.get(NAME))["spec"]["holderIdentity"] == "a"


@case()
async def test_a_replace_goes_over_the_version_read_only(store: Store, every: Every) -> None:
    """Over the version read: written as sent; over an older one: 409; with none: refused
    (422, never written blindly); of a deleted Lease: 409, not 404 (the body read names the
    uid that is gone), and without a uid it creates the Lease (Leases allow create on update)."""
    made = await store.create(new(store, "a"))
    renewed = await store.replace(sent := renew(made))
    assert renewed["spec"] == sent["spec"] and rv(renewed) > rv(made)
    assert renewed["metadata"]["uid"] == made["metadata"]["uid"]
    with pytest.raises(Conflict):
        await store.replace(renew(made, "b"))  # a takeover judged on the Lease before the renew
    blind = renew(renewed, "b")
    del blind["metadata"]["resourceVersion"]
    with pytest.raises(ApiError) as refused:
        await store.replace(blind)
    assert refused.value.status == 422, refused.value
    for successor in ("b", None):  # a release with a hand-off, then one to nobody
        record = LeaseRecord.from_object(renewed)
        released = await store.replace(sent := vacate(record, now=T0, successor=successor))
        assert released["spec"] == sent["spec"], (released["spec"], sent["spec"])
        notes = released["metadata"].get("annotations") or {}  # none: the server omits {}
        assert notes == (sent["metadata"].get("annotations") or {})
        renewed = released
    assert await store.get(NAME) == renewed
    await store.delete(NAME, str(rv(renewed)))
    with pytest.raises(Conflict):
        await store.replace(renew(renewed))
    anew = renew(renewed)
    del anew["metadata"]["uid"]
    made_again = await store.replace(anew)
    assert made_again["metadata"]["uid"] not in ("", made["metadata"]["uid"])
    assert rv(made_again) > rv(renewed) and made_again["spec"] == anew["spec"]
    old_uid = copy.deepcopy(made_again)
    old_uid["metadata"]["uid"] = made["metadata"]["uid"]
    with pytest.raises(Conflict):  # a body of the Lease deleted, over the one created again
        await store.replace(old_uid)


@case()
async def test_every_write_moves_the_version_up(store: Store, every: Every) -> None:
    """The fencing token (contract §2): one counter over every Lease, up with each write, a
    delete and a create again included; a Lease created again has a new uid; a list's
    version is at least its items'."""
    a = await store.create(new(store, "a"))
    b = await store.create(new(store, "b", name=OTHER))
    renewed = await store.replace(renew(a))
    patched = await store.patch(NAME, over(renewed, note="1"))
    items, version = await store.list()
    assert int(version) >= max(rv(i) for i in items)
    await store.delete(NAME, str(rv(patched)))
    [(kind, deleted)] = await lease_events(store, str(rv(patched)))
    again = await store.create(new(store, "c"))
    seen = [rv(a), rv(b), rv(renewed), rv(patched), deleted, rv(again)]
    assert kind == "DELETED" and seen == sorted(set(seen)), seen
    assert again["metadata"]["uid"] != a["metadata"]["uid"]


@case()
async def test_a_write_that_changes_nothing_is_no_write(store: Store, every: Every) -> None:
    """The server stores nothing for a write that changes nothing (a roster patch removing an
    entry that is not there): same version, no event; the next change is the next event."""
    made = await store.create(new(store, "a", kept="1"))
    assert rv(await store.replace(copy.deepcopy(made))) == rv(made)
    assert rv(await store.patch(NAME, over(made, kept="1", absent=None))) == rv(made)
    changed = await store.patch(NAME, over(made, added="2"))
    assert await lease_events(store, str(rv(made))) == [("MODIFIED", rv(changed))]


@case()
async def test_the_watch_reports_each_change_in_order(store: Store, every: Every) -> None:
    """``LeaseLock``: from the read's version on (not the create before it), each write as
    ``Changed``, in order, another Lease's not at all; the delete as ``Deleted`` with the last
    state under the delete's own version, from which a watch sees nothing more."""
    await store.create(new(store, "a"))
    lock = LeaseLock(store, NAME)  # type: ignore[arg-type]
    renewed = await store.replace(renew(await lock.read(TIMEOUT) or {}))
    await store.create(new(store, "x", name=OTHER))
    handed = await store.replace(vacate(LeaseRecord.from_object(renewed), now=T0, successor="b"))
    await store.delete(NAME, str(rv(handed)))
    got = await changes(lock, 3)
    assert [type(e) for e in got] == [Changed, Changed, Deleted], got
    assert [rv(e.obj) for e in got[:2]] == [rv(renewed), rv(handed)]
    last = got[2].obj
    assert last["spec"] == handed["spec"] and rv(last) > rv(handed), (last, handed)
    assert await lease_events(store, str(rv(last))) == []


@case()
async def test_the_watch_of_an_absent_lease_sees_it_created(store: Store, every: Every) -> None:
    """A read that finds no Lease still starts the watch: the create, made while it runs, is
    ``Changed``."""
    lock = LeaseLock(store, NAME)  # type: ignore[arg-type]
    assert await lock.read(TIMEOUT) is None
    watching = asyncio.create_task(changes(lock, 1))
    await asyncio.sleep(0.5)  # the watch is open (or not yet: it resumes from the read anyway)
    made = await store.create(new(store, "a"))
    [event] = await watching
    assert isinstance(event, Changed) and event.obj == made


@case()
async def test_a_watch_ends_when_its_time_is_up(store: Store, every: Every) -> None:
    """The server ends a watch after its ``timeoutSeconds``; ``LeaseLock`` then resumes it."""
    _, version = await store.list()
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await lease_events(store, version, seconds=1) == []
    assert loop.time() - start >= 0.9


@case(real="410 needs the watch cache to have dropped the version: tests/chaos's restore-bump")
async def test_a_watch_from_a_compacted_version_is_gone(store: Store, every: Every) -> None:
    """A version compacted away is 410 ``Gone`` (``LeaseLock``: ``Lost``, until the next read)."""
    await store.create(new(store, "a"))
    lock = LeaseLock(store, NAME)  # type: ignore[arg-type]
    await lock.read(TIMEOUT)  # the watch resumes from the Lease's version
    await store.compact()  # type: ignore[attr-defined]  # FakeLeases only
    with pytest.raises(Gone):
        await lease_events(store, "1")
    async with asyncio.timeout(TIMEOUT), contextlib.aclosing(lock.events()) as events:
        assert isinstance(await anext(events), Lost)


@case(real="410 needs the watch cache to have dropped the version: tests/chaos's restore-bump")
async def test_after_the_watch_lost_its_place_it_starts_again_at_the_most_recent(
    store: Store, every: Every
) -> None:
    """A read is a GET by name, whose version the watch resumes from. A quiet Lease's own
    version may be older than the server keeps (410, ``Lost``): after the next read the
    watch starts at the most recent version, not at the Lease's again (a 410 each time)."""
    made = await store.create(new(store, "a"))
    await store.create(new(store, "x", name=OTHER))
    await store.compact()  # type: ignore[attr-defined]  # FakeLeases only
    lock = LeaseLock(store, NAME)  # type: ignore[arg-type]
    assert rv(await lock.read(TIMEOUT) or {}) == rv(made)
    async with asyncio.timeout(TIMEOUT), contextlib.aclosing(lock.events()) as events:
        assert isinstance(await anext(events), Lost)
        renewed = await store.replace(renew(await lock.read(TIMEOUT) or {}))
        seen = [e async for e in _until_version(events, rv(renewed))]
        assert not any(isinstance(e, Lost | Failed) for e in seen), seen


async def _until_version(
    events: AsyncIterator[Any], version: int
) -> AsyncIterator[Changed | Deleted | Lost | Failed]:
    """``events`` up to the first change at ``version``."""
    async for event in events:
        if isinstance(event, Changed | Deleted | Lost | Failed):
            yield event
        if isinstance(event, Changed | Deleted) and rv(event.obj) == version:
            return


@case()
async def test_a_watch_from_no_version_starts_with_the_lease_as_it_is(
    store: Store, every: Every
) -> None:
    """``LeaseLock`` after a 410: from the most recent version, the first event is the Lease
    as it is then (it may have changed since the read), then each change."""
    made = await store.create(new(store, "a"))
    async with asyncio.timeout(TIMEOUT):
        events = store.watch(NAME, "", 2)
        kind, first = await anext(events)
        assert (kind, rv(first)) == ("ADDED", rv(made))
        renewed = await store.replace(renew(made))
        rest = [(kind, rv(obj)) async for kind, obj in events if kind != "BOOKMARK"]
        assert rest == [("MODIFIED", rv(renewed))], rest


@case(fake="the fake stores what it is sent and checks no field (the real server does)")
async def test_a_malformed_lease_is_refused(store: Store, every: Every) -> None:
    """A renewTime not in MicroTime's form is refused: the sidecar writes ``format_microtime``'s
    (the cases above write it and read it back)."""
    sent = new(store, "a")
    sent["spec"]["renewTime"] = "2026-01-01T00:00:00.5Z"
    with pytest.raises(ApiError) as refused:
        await store.create(sent)
    assert refused.value.status == 400, refused.value
