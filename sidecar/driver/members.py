"""The members of a sharded election: this pod's heartbeat Lease, and who else is alive.

Each member keeps a Lease of its own (``core.shards.member_lease``, labelled
``MEMBER_LABEL`` with the election's Lease), renewed every renew interval, the
way a node keeps its Lease in ``kube-node-lease``; ``kubectl get leases``
shows who is in. Every member watches the others' by that label. A member is
alive while this pod has seen its Lease change within the Lease's duration,
on this pod's monotonic clock (as a follower judges a holder: no skew can
fool it); one whose Lease says it expired long ago by the wall clock is not
counted even once. A member that stops deletes its Lease (``leave``), so the
others move its shards at once, and follows the others until it has stopped
(its releases name only members still alive); one that crashed drops out a
lease duration after its last renewal.

None of it decides who owns a shard: that is each shard's own Lease. What the
members set changes is only who stands for which shard (``shardboard``); a
heartbeat that fails costs balance, never safety.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from ..core import backoff
from ..core.lease import LeaseRecord, claim, valid_duration
from ..core.shards import MEMBER_LABEL, member_lease
from ..core.timing import Timing
from ..kit.aio import Background
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.errors import ApiError, Conflict, NotFound
from ..kube.leases import LeaseStore, Obj

#: A watch's ``timeoutSeconds``: the server ends it about this often, and it is opened again.
WATCH_SECONDS = 300


class Members:
    def __init__(
        self,
        store: LeaseStore,
        lease: str,
        identity: str,
        timing: Timing,
        clock: Clock,
        log: Logger,
    ) -> None:
        self.store, self.lease, self.identity = store, lease, identity
        self.timing, self.clock, self.log = timing, clock, log
        self.name = member_lease(lease, identity)
        #: Called whenever ``alive`` may have changed (``shardboard`` rebalances).
        self.on_change: Callable[[], None] = lambda: None
        #: Each member's Lease: (resourceVersion, holder, duration, seen changing at).
        self._seen: dict[str, tuple[str, str, float, float]] = {}
        self._mine: LeaseRecord | None = None
        self._tasks = Background("members")
        #: The heartbeat alone: a pod that left still follows who else is alive (whom to name).
        self._heart = Background("member heartbeat")
        self._wake = asyncio.Event()
        self._left = False
        #: Set once the first list has answered: who is alive is known.
        self.known = asyncio.Event()

    @property
    def alive(self) -> frozenset[str]:
        """The members alive now, this one always (while it has not left)."""
        now = self.clock.monotonic()
        live = {who for _, who, span, at in self._seen.values() if now - at < span and who}
        return frozenset(live - {self.identity} if self._left else live | {self.identity})

    def start(self) -> None:
        """The heartbeat and the watch, in the background; a failure is retried, never raised."""
        self._heart.spawn(self._beat())
        self._tasks.spawn(self._follow())
        self._tasks.spawn(self._expire())

    # ---- the heartbeat ------------------------------------------------------
    async def _beat(self) -> None:
        failures = 0
        while not self._left:
            try:
                await self._renew()
                failures, wait = 0, self.timing.renew_interval
                self.log.forget("member-heartbeat")
            except ApiError as err:
                failures += 1
                wait = backoff.delay(failures, self.timing.retry_period, self.timing.renew_interval)
                self.log.once("member-heartbeat", "warning", HEARTBEAT_FAILED, error=str(err))
            await asyncio.sleep(wait)

    async def _renew(self) -> None:
        timeout = self.timing.retry_period * 2
        if self._mine is None:
            obj = await self.store.get(self.name, timeout)
            self._mine = LeaseRecord.from_object(obj) if obj is not None else None
        body = claim(
            self._mine,
            name=self.name,
            namespace=self.store.namespace,
            identity=self.identity,
            lease_duration=round(self.timing.lease_duration),
            now=self.clock.wall(),
            acquire=self._mine is None,
        )
        body["metadata"]["labels"][MEMBER_LABEL] = self.lease
        try:
            if self._mine is None:
                written = await self.store.create(body, timeout)
            else:
                written = await self.store.replace(body, timeout)
        except (Conflict, NotFound):
            self._mine = None  # written or deleted by another (a sweep): read it again
            raise
        self._mine = LeaseRecord.from_object(written)

    async def leave(self) -> None:
        """Stop the heartbeat and delete this member's Lease: the others rebalance at once."""
        if self._left:
            return
        self._left = True
        self._heart.cancel()
        self.on_change()
        mine = self._mine
        with contextlib.suppress(ApiError, TimeoutError):
            for _ in range(2):  # a heartbeat that landed as it left makes the first a 409
                if mine is None:
                    obj = await self.store.get(self.name, self.timing.retry_period)
                    mine = LeaseRecord.from_object(obj) if obj is not None else None
                if mine is None or mine.holder != self.identity:
                    return
                try:
                    await self.store.delete(self.name, mine.resource_version)
                    return
                except Conflict:
                    mine = None  # read it again

    # ---- who else is alive -------------------------------------------------
    async def _follow(self) -> None:
        """List, then watch from the list's version; again after any end or failure."""
        failures, selector = 0, f"{MEMBER_LABEL}={self.lease}"
        while True:
            try:
                items, version = await self.store.list(label_selector=selector)
                self._listed(items)
                self.known.set()
                async for kind, obj in self.store.watch("", version, WATCH_SECONDS, selector):
                    failures = 0
                    self._saw(kind, obj)
            except ApiError as err:
                failures += 1
                self.log.once("members-watch", "warning", WATCH_FAILED, error=str(err))
                await asyncio.sleep(backoff.delay(failures, self.timing.retry_period, 30.0))
                continue
            self.log.forget("members-watch")

    def _listed(self, items: list[Obj]) -> None:
        now, wall = self.clock.monotonic(), self.clock.wall()
        before = self.alive
        kept = {}
        for obj in items:
            record = LeaseRecord.from_object(obj)
            expiry = record.wall_expiry()
            span = self._span(obj)
            if expiry is not None and (wall - expiry).total_seconds() > span:
                continue  # expired a duration ago by the wall clock: gone, whatever the skew
            old = self._seen.get(record.name)
            at = old[3] if old is not None and old[0] == record.resource_version else now
            kept[record.name] = (record.resource_version, record.holder or "", span, at)
        self._seen = kept
        self._changed(before)

    def _saw(self, kind: str, obj: Obj) -> None:
        before, record = self.alive, LeaseRecord.from_object(obj)
        if kind == "DELETED":
            self._seen.pop(record.name, None)
        elif kind in ("ADDED", "MODIFIED"):
            span = self._span(obj)
            seen = (record.resource_version, record.holder or "", span, self.clock.monotonic())
            self._seen[record.name] = seen
        self._changed(before)

    def _span(self, obj: Obj) -> float:
        duration = valid_duration((obj.get("spec") or {}).get("leaseDurationSeconds"))
        return float(duration) if duration is not None else self.timing.lease_duration

    def _changed(self, before: frozenset[str]) -> None:
        self._wake.set()
        if self.alive != before:
            self.on_change()

    async def _expire(self) -> None:
        """Tell ``on_change`` when a member's Lease has not changed for its duration."""
        while True:
            self._wake.clear()
            now = self.clock.monotonic()
            due = [at + span for _, _, span, at in self._seen.values() if at + span > now]
            before = self.alive
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(due, default=3600.0) - now + 0.001):
                    await self._wake.wait()
            if self.alive != before:
                self.on_change()

    async def stop(self) -> None:
        self._heart.cancel()
        self._tasks.cancel()


HEARTBEAT_FAILED = (
    "cannot renew this pod's member Lease; its shards stay as they are until it can "
    "(check the Role allows create and update of leases)"
)
WATCH_FAILED = "cannot watch the members' Leases; shards are not rebalanced until it can"
