"""The namespace's coordination Lease against the real API server: bounded, and safe to lose.

Issue 38. Each election that ever had a Lease leaves a mark in the coordination
Lease's annotations, which the API server caps at 256 KiB in all. Marks were
one annotation per election: a CronJob that runs one election per Job filled
the object after a few thousand runs, and from then on no new election was
marked (so none led at once, as a brand-new election does) and the sweep duty
could not be claimed (so nobody swept at exit), all of it silently. Marks are
now bits in a fixed room (``core.marks``); an object filled the old way is
folded into it at the next turnover. And ``kubectl delete leases --all`` took the marks with it,
which told every election "nobody led here": a new candidate led at once
while a paused leader of the deleted Lease still vouched.
"""

from __future__ import annotations

import asyncio
import binascii
import datetime as dt
import json
import signal
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from sidecar.core import marks, roster
from sidecar.core.lease import format_microtime
from sidecar.driver.sweepduty import ExitSweep
from sidecar.kit.logs import Logger
from sidecar.kube.config import load
from sidecar.kube.coordination import Coordination
from sidecar.kube.leases import LeaseStore
from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, wait_for

Spawn = Callable[..., SidecarProcess]

LEASE = "leader-main"
#: The API server's cap on all of an object's annotations together (keys and values).
ANNOTATIONS_LIMIT = 256 * 1024
#: Default timing: a first term (at once) and a wait of a lease duration differ by seconds.
DEFAULT = ("--lease-duration=15s", "--renew-deadline=10s", "--retry-period=2s")


class WallAt:
    """A clock whose wall time is set by the test (a sidecar that started then)."""

    def __init__(self, at: dt.datetime) -> None:
        self.at = at

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> dt.datetime:
        return self.at


def _size(notes: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in notes.items())


def _notes(coord: Any, namespace: str) -> dict[str, str]:
    try:
        obj = coord.read_namespaced_lease(roster.NAME, namespace)
    except client.ApiException:
        return {}
    return dict(obj.metadata.annotations or {})


def _stamp(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def _fill_with_past_job_runs(store: LeaseStore, namespace: str, began: dt.datetime) -> int:
    """Mark one election per past Job run (one a minute from ``began``), as the sidecars of
    those runs did before marks were bits (one annotation each), until no further mark
    fits; their Leases are gone (swept). In batches: the same object, fewer requests."""
    shared = Coordination(store, namespace)
    notes: dict[str, str] = {}
    runs = 0
    while True:
        batch: dict[str, str] = {}
        for _ in range(250):
            when = began + dt.timedelta(minutes=runs)
            mark = _legacy_mark(f"leader-nightly-report-{29_000_000 + runs}", when)
            if _size({**notes, **batch, **mark}) > ANNOTATIONS_LIMIT - 100:
                break
            batch.update(mark)
            runs += 1
        if not batch:
            return runs
        await shared.merge(batch)
        notes.update(batch)


def _legacy_mark(lease: str, when: dt.datetime) -> dict[str, str]:
    """A mark as sidecars wrote them before marks were bits."""
    fields = {"lease": lease, "since": format_microtime(when), "duration": 15}
    value = json.dumps(fields, separators=(",", ":"))
    return {f"{marks.LEGACY}{binascii.crc32(lease.encode()):08x}": value}


async def _start_and_stop(store: LeaseStore, namespace: str, at: dt.datetime, who: str) -> None:
    """A sidecar of another Job run starting at ``at`` and stopping: the sweep duty's part."""
    clock = WallAt(at)
    shared = Coordination(store, namespace)
    shared.clock = clock  # type: ignore[assignment]  # its stamps, as that sidecar's
    duty = ExitSweep(store, shared, who, clock, Logger("error"))  # type: ignore[arg-type]
    await duty.start(None)  # type: ignore[arg-type]
    assert duty._start is not None
    await duty._start
    await duty.after_release()


def test_a_coordination_lease_filled_by_past_job_runs_still_marks_and_sweeps_for_a_new_one(
    cluster: ControlPlane, spawn: Spawn, namespace: str, api: Any
) -> None:
    """Thousands of past runs' marks do not keep a new election from its first term and its
    sweep duty: runs that started since the Leases were swept made room."""
    coord = client.CoordinationV1Api(api)
    now = dt.datetime.now(dt.UTC)
    began = now - dt.timedelta(days=5)

    async def history() -> int:
        store = LeaseStore(load(str(cluster.kubeconfig)), namespace)
        try:
            runs = await _fill_with_past_job_runs(store, namespace, began)
            # Two later runs, a day and more apart, started and stopped (their elections'
            # own marks are left out: what matters is what their starts did to the object).
            await _start_and_stop(store, namespace, now - dt.timedelta(days=2), "run-a")
            await _start_and_stop(store, namespace, now - dt.timedelta(hours=12), "run-b")
            return runs
        finally:
            store.close()

    runs = asyncio.run(history())
    print(f"\n{runs} past runs marked; {_size(_notes(coord, namespace))} bytes of annotations now")
    assert runs > 1500, runs
    # A brand-new election leads at once once the object has been there a lease duration.
    created = coord.read_namespaced_lease(roster.NAME, namespace).metadata.creation_timestamp
    time.sleep(max(0.0, created.timestamp() + 17 - time.time()))
    new = spawn("pod-new", extra=DEFAULT)
    wait_for(
        lambda: marks.live(_notes(coord, namespace), LEASE), 10, what="the new election's mark"
    )
    wait_for(new.leads, 10, what="the new election's first term, without waiting a lease")
    state = new.state()
    assert state is not None
    took = _stamp(state["acquired_at"]) - (time.time() - (time.monotonic() - new.started_at))
    assert took < 10, f"acquired {took:.1f}s after the start: waited out a lease, no first term"
    wait_for(
        lambda: roster.duty(_notes(coord, namespace))[0] == "pod-new",
        10,
        what="the new sidecar to hold the sweep duty",
    )
    assert _size(_notes(coord, namespace)) < 64 * 1024


def test_a_write_the_coordination_lease_refuses_for_its_size_is_logged_as_an_error(
    spawn: Spawn, namespace: str, api: Any
) -> None:
    """Not a mark the sidecar can take out (someone else's annotation): its mark and the
    sweep duty are refused, and the log says so at level error, never silently."""
    coord = client.CoordinationV1Api(api)
    key = "example.com/notes"
    blob = "x" * (ANNOTATIONS_LIMIT - len(key) - 60)
    body = client.V1Lease(
        metadata=client.V1ObjectMeta(
            name=roster.NAME, labels=roster.LABELS, annotations={key: blob}
        ),
        spec=client.V1LeaseSpec(),
    )
    coord.create_namespaced_lease(namespace, body)
    a = spawn("pod-a")
    wait_for(a.leads, 30, what="pod-a to lead all the same (after a lease duration)")

    def refused() -> list[dict[str, Any]]:
        return [r for r in a.logs() if r.get("level") == "error" and "422" in str(r)]

    found = wait_for(refused, 10, what="an error line for the refused write")
    assert all(roster.NAME in str(r) for r in found), found
    assert not marks.marked(_notes(coord, namespace), LEASE)


def _leader(spawn: Spawn) -> SidecarProcess:
    old = spawn("pod-old", extra=DEFAULT)
    wait_for(old.leads, 30, what="pod-old to lead")
    return old


def _freeze(old: SidecarProcess) -> float:
    """The leader paused (SIGSTOP) right after it renewed; the instant until which its file
    still tells its app that it leads."""
    before = (old.state() or {}).get("valid_until")
    wait_for(lambda: (old.state() or {}).get("valid_until") != before, 15, what="a renewal")
    old.signal(signal.SIGSTOP)
    frozen = old.state()
    assert frozen is not None and frozen["is_leader"] and frozen["valid_until"]
    return _stamp(frozen["valid_until"])


def _mark_another_election(cluster: ControlPlane, namespace: str) -> None:
    """What a sidecar of another election writes first: its mark (creating the object)."""

    async def go() -> None:
        store = LeaseStore(load(str(cluster.kubeconfig)), namespace)
        try:
            await Coordination(store, namespace).merge(
                marks.marking({}, "leader-other", dt.datetime.now(dt.UTC))
            )
        finally:
            store.close()

    asyncio.run(go())


def _acquired_after(new: SidecarProcess, vouched_until: float) -> None:
    wait_for(new.leads, 40, what=f"{new.identity} to lead")
    state = new.state()
    assert state is not None
    acquired = _stamp(state["acquired_at"])
    assert acquired >= vouched_until, (
        f"{new.identity} acquired {vouched_until - acquired:.2f}s before the paused "
        "leader's claim ended"
    )


def test_leases_deleted_with_the_coordination_lease_are_no_licence_to_lead_at_once(
    cluster: ControlPlane, spawn: Spawn, namespace: str, api: Any
) -> None:
    """``kubectl delete leases --all`` under a paused leader; the coordination Lease comes
    back at once (another election's sidecar marks it): a new candidate still waits."""
    coord = client.CoordinationV1Api(api)
    old = _leader(spawn)
    vouched_until = _freeze(old)
    try:
        for name in (LEASE, roster.NAME):
            coord.delete_namespaced_lease(name, namespace)
        _mark_another_election(cluster, namespace)
        _acquired_after(spawn("pod-new", extra=DEFAULT), vouched_until)
    finally:
        old.signal(signal.SIGCONT)


def test_a_deleted_coordination_lease_is_no_licence_to_lead_at_once(
    spawn: Spawn, namespace: str, api: Any
) -> None:
    """Both deleted, and nothing wrote the coordination Lease since: a new candidate waits."""
    coord = client.CoordinationV1Api(api)
    old = _leader(spawn)
    vouched_until = _freeze(old)
    try:
        for name in (LEASE, roster.NAME):
            coord.delete_namespaced_lease(name, namespace)
        _acquired_after(spawn("pod-new", extra=DEFAULT), vouched_until)
    finally:
        old.signal(signal.SIGCONT)


def test_the_mark_of_a_live_election_survives_its_coordination_lease(
    cluster: ControlPlane, spawn: Spawn, namespace: str, api: Any
) -> None:
    """The coordination Lease alone deleted, written again by another election's sidecar
    long before; then the election's Lease is deleted under a paused leader: the election
    had a Lease when its marks were lost, so a new candidate waits out that leader."""
    coord = client.CoordinationV1Api(api)
    old = _leader(spawn)
    wait_for(lambda: marks.live(_notes(coord, namespace), LEASE), 10, what="the election marked")
    coord.delete_namespaced_lease(roster.NAME, namespace)
    _mark_another_election(cluster, namespace)
    time.sleep(17)  # the object is older than any candidate's lease duration now
    vouched_until = _freeze(old)
    try:
        coord.delete_namespaced_lease(LEASE, namespace)
        _acquired_after(spawn("pod-new", extra=DEFAULT), vouched_until)
    finally:
        old.signal(signal.SIGCONT)
