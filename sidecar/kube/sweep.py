"""The sweep of expired managed Leases (contract §5 step 3), shared by the sidecar, ``cleanup`` and the injector.

Deletes only what is provably abandoned, whatever any node's clock says: a
Lease labelled ``managed-by: grelmicro`` (checked again on the object, not
only trusted to the label selector), **seen by this process at the same
``resourceVersion`` for ``leaseDurationSeconds + margin`` of its own monotonic
clock** (``Sightings``; why no wall clock is needed: contract §5), expired by
more than the margin by the wall-clock rule grelmicro and client-go peers
apply too, and not kept by the caller's ``still_needed`` (the injector keeps a
Lease whose holder pod exists). Each delete carries the ``resourceVersion``
judged, so a Lease renewed since survives (409) and two sweepers at once are
harmless (404/409). A Lease whose times cannot be read is never deleted.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.defaults import SWEEP_MARGIN
from ..core.lease import MANAGED_BY_LABEL, MANAGED_BY_VALUE, LeaseRecord
from ..kit.logs import Logger
from .errors import ApiError, Conflict, NotFound

SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"


class Leases(Protocol):
    """The Lease reads and deletes a sweep needs (``LeaseStore``, or the official client's)."""

    async def list(self, label_selector: str = "") -> tuple[list[dict[str, Any]], str]: ...

    async def delete(self, name: str, resource_version: str) -> None: ...


Now = Callable[[], dt.datetime]
Delete = Callable[[str, str, str], Awaitable[None]]  # (namespace, name, resourceVersion)
StillNeeded = Callable[[str, LeaseRecord], Awaitable[bool]]  # (namespace, record)


@dataclass
class SweepResult:
    deleted: list[tuple[str, str]] = field(default_factory=list)  # (namespace, lease)
    kept_live: int = 0
    kept_unreadable: int = 0
    kept_needed: int = 0
    kept_unconfirmed: int = 0  # expired by the wall clock, not yet seen unchanged long enough
    confirm_in: float = 0.0  # seconds until the last of those could be confirmed abandoned
    skipped_changed: int = 0
    errors: int = 0


class Sightings:
    """When this process first saw each managed Lease at its current resourceVersion.

    On this process's monotonic clock; a Lease missing from a list is
    forgotten, one seen again at a new version starts over.
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic):
        self._monotonic = monotonic
        self._first: dict[tuple[str, str], tuple[str, float]] = {}

    def record(self, objects: Iterable[dict[str, Any]]) -> None:
        """Remember what one complete list showed (and nothing it did not show)."""
        now, seen = self._monotonic(), {}
        for record in map(LeaseRecord.from_object, objects):
            key = (record.namespace, record.name)
            first = self._first.get(key)
            if first is None or first[0] != record.resource_version:
                first = (record.resource_version, now)
            seen[key] = first
        self._first = seen

    def unchanged_for(self, namespace: str, record: LeaseRecord) -> float:
        """Seconds this Lease has been seen at ``record``'s version (0 if never)."""
        first = self._first.get((namespace, record.name))
        if first is None or first[0] != record.resource_version:
            return 0.0
        return self._monotonic() - first[1]


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def sweep_objects(
    objects: Iterable[dict[str, Any]],
    delete: Delete,
    log: Logger,
    *,
    sightings: Sightings,
    margin: float = SWEEP_MARGIN,
    now: Now = _utcnow,
    still_needed: StillNeeded | None = None,
    on_delete: Callable[[str, LeaseRecord], None] | None = None,
) -> SweepResult:
    """Judge each Lease of one complete list and delete the abandoned ones, one by one."""
    objects = list(objects)
    sightings.record(objects)
    result = SweepResult()
    for record in map(LeaseRecord.from_object, objects):
        namespace, expiry = record.namespace, record.wall_expiry()
        where = {"namespace": namespace, "lease": record.name}
        if not record.managed or not record.name:
            continue
        if expiry is None:
            result.kept_unreadable += 1
            continue
        if now() - expiry <= dt.timedelta(seconds=margin):  # not expired by the wall clock
            result.kept_live += 1
            continue
        unseen = (record.lease_duration or 0) + margin - sightings.unchanged_for(namespace, record)
        if unseen > 0:
            result.kept_unconfirmed += 1
            result.confirm_in = max(result.confirm_in, unseen)
            continue
        try:
            needed = still_needed is not None and await still_needed(namespace, record)
        except ApiError as err:
            result.errors += 1
            msg = "sweep: cannot tell whether the lease is still needed; keeping it"
            log.warning(msg, **where, holder=record.holder, error=str(err))
            continue
        if needed:
            result.kept_needed += 1
            continue
        try:
            await delete(namespace, record.name, record.resource_version)
        except (NotFound, Conflict):
            result.skipped_changed += 1
            continue
        except ApiError as err:
            result.errors += 1
            log.warning("sweep: could not delete an expired lease", **where, error=str(err))
            continue
        result.deleted.append((namespace, record.name))
        ago = round((now() - expiry).total_seconds(), 1)
        log.info(
            "sweep: deleted expired lease", **where, holder=record.holder, expired_seconds_ago=ago
        )
        if on_delete is not None:
            on_delete(namespace, record)
    return result


async def sight(store: Leases, sightings: Sightings) -> None:
    """Record the namespace's managed Leases, so a later sweep can judge them (the sidecar at start)."""
    sightings.record((await store.list(label_selector=SELECTOR))[0])


async def sweep(
    store: Leases,
    log: Logger,
    *,
    sightings: Sightings,
    margin: float = SWEEP_MARGIN,
    now: Now = _utcnow,
    on_delete: Callable[[str, LeaseRecord], None] | None = None,
) -> SweepResult:
    """The sweep of one namespace, as the sidecar does on shutdown and ``cleanup`` does once."""
    items, _ = await store.list(label_selector=SELECTOR)

    async def delete(_namespace: str, name: str, resource_version: str) -> None:
        await store.delete(name, resource_version)

    return await sweep_objects(
        items, delete, log, sightings=sightings, margin=margin, now=now, on_delete=on_delete
    )
