"""The sweep of expired managed Leases (SPEC §5 step 3).

Deletes only what is provably abandoned: labelled ``managed-by: grelmicro``,
and ``renewTime + leaseDurationSeconds`` in the past by more than a skew
margin (wall clocks of different nodes disagree; the margin absorbs that).
Each delete carries the ``resourceVersion`` that was judged, so a Lease renewed
between the list and the delete survives (409). A Lease whose times cannot be
read is never deleted: when in doubt, keep it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from .kube.leases import ApiError, Conflict, LeaseStore, NotFound
from .lease import MANAGED_BY_LABEL, MANAGED_BY_VALUE, LeaseRecord
from .logs import Logger

SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
DEFAULT_SKEW_MARGIN = 60.0


@dataclass
class SweepResult:
    deleted: list[str]
    kept_live: int
    kept_unreadable: int
    skipped_changed: int


def is_expired(record: LeaseRecord, now: dt.datetime, margin: float) -> bool:
    expiry = record.wall_expiry()
    return expiry is not None and now - expiry > dt.timedelta(seconds=margin)


async def sweep(
    store: LeaseStore,
    log: Logger,
    *,
    margin: float = DEFAULT_SKEW_MARGIN,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    on_delete: Callable[[LeaseRecord], None] | None = None,
) -> SweepResult:
    items, _ = await store.list(label_selector=SELECTOR)
    result = SweepResult([], 0, 0, 0)
    for obj in items:
        record = LeaseRecord.from_object(obj)
        if not record.managed:  # the selector says so, but never trust a filter we did not apply
            continue
        if record.wall_expiry() is None:
            result.kept_unreadable += 1
            continue
        if not is_expired(record, now(), margin):
            result.kept_live += 1
            continue
        try:
            await store.delete(record.name, record.resource_version)
        except (NotFound, Conflict):
            result.skipped_changed += 1
            continue
        except ApiError as err:
            log.warning("sweep: could not delete expired lease", lease=record.name, error=str(err))
            continue
        result.deleted.append(record.name)
        expired_for = (now() - (record.wall_expiry() or now())).total_seconds()
        log.info(
            "sweep: deleted expired lease",
            lease=record.name,
            holder=record.holder,
            expired_seconds_ago=round(expired_for, 1),
        )
        if on_delete is not None:
            on_delete(record)
    return result
