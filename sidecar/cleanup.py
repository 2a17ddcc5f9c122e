"""The sweep of expired managed Leases (contract §5 step 3), shared by the sidecar and the injector.

Deletes only what is provably abandoned: labelled ``managed-by: grelmicro``
(checked again on the object, not only trusted to the label selector), and
``renewTime + leaseDurationSeconds`` in the past by more than a skew margin
(wall clocks of different nodes disagree; the margin absorbs that). Each
delete carries the ``resourceVersion`` that was judged, so a Lease renewed
between the list and the delete survives (409), and two sweepers at once are
harmless (404/409). A Lease whose times cannot be read is never deleted, and
neither is one a caller's ``still_needed`` check keeps (the injector keeps a
Lease whose holder pod still exists) or cannot decide: when in doubt, keep it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .defaults import SWEEP_MARGIN
from .kube.errors import ApiError, Conflict, NotFound
from .kube.leases import LeaseStore
from .lease import MANAGED_BY_LABEL, MANAGED_BY_VALUE, LeaseRecord
from .logs import Logger

SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"

Now = Callable[[], dt.datetime]
Delete = Callable[[str, str, str], Awaitable[None]]  # (namespace, name, resourceVersion)
StillNeeded = Callable[[str, LeaseRecord], Awaitable[bool]]  # (namespace, record)


@dataclass
class SweepResult:
    deleted: list[tuple[str, str]] = field(default_factory=list)  # (namespace, lease)
    kept_live: int = 0
    kept_unreadable: int = 0
    kept_needed: int = 0
    skipped_changed: int = 0
    errors: int = 0


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def is_expired(record: LeaseRecord, now: dt.datetime, margin: float) -> bool:
    expiry = record.wall_expiry()
    return expiry is not None and now - expiry > dt.timedelta(seconds=margin)


def _namespace(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("namespace", "")) if isinstance(meta, dict) else ""


async def sweep_objects(
    objects: Iterable[dict[str, Any]],
    delete: Delete,
    log: Logger,
    *,
    margin: float = SWEEP_MARGIN,
    now: Now = _utcnow,
    still_needed: StillNeeded | None = None,
    on_delete: Callable[[str, LeaseRecord], None] | None = None,
) -> SweepResult:
    """Judge each listed Lease object and delete the abandoned ones, one by one."""
    result = SweepResult()
    for obj in objects:
        record = LeaseRecord.from_object(obj)
        namespace = _namespace(obj)
        if not record.managed or not record.name:
            continue
        expiry = record.wall_expiry()
        if expiry is None:
            result.kept_unreadable += 1
            continue
        if not is_expired(record, now(), margin):
            result.kept_live += 1
            continue
        if still_needed is not None:
            try:
                needed = await still_needed(namespace, record)
            except ApiError as err:
                result.errors += 1
                log.warning(
                    "sweep: cannot tell whether the lease is still needed; keeping it",
                    namespace=namespace,
                    lease=record.name,
                    holder=record.holder,
                    error=str(err),
                )
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
            log.warning(
                "sweep: could not delete an expired lease",
                namespace=namespace,
                lease=record.name,
                error=str(err),
            )
            continue
        result.deleted.append((namespace, record.name))
        log.info(
            "sweep: deleted expired lease",
            namespace=namespace,
            lease=record.name,
            holder=record.holder,
            expired_seconds_ago=round((now() - expiry).total_seconds(), 1),
        )
        if on_delete is not None:
            on_delete(namespace, record)
    return result


async def sweep(
    store: LeaseStore,
    log: Logger,
    *,
    margin: float = SWEEP_MARGIN,
    now: Now = _utcnow,
    on_delete: Callable[[LeaseRecord], None] | None = None,
) -> SweepResult:
    """The sweep of one namespace, as the sidecar does on shutdown and ``cleanup`` does once."""
    items, _ = await store.list(label_selector=SELECTOR)

    async def delete(_namespace: str, name: str, resource_version: str) -> None:
        await store.delete(name, resource_version)

    return await sweep_objects(
        items,
        delete,
        log,
        margin=margin,
        now=now,
        on_delete=(lambda _ns, record: on_delete(record)) if on_delete is not None else None,
    )
