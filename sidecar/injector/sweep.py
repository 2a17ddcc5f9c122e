"""The operator's periodic, cluster-wide sweep of abandoned Leases.

Deletes a Lease only when all of these hold (contract §5's rules, plus one):

- it carries ``app.kubernetes.io/managed-by: grelmicro`` (checked again on the
  object, not only trusted to the label selector);
- this process has seen it unchanged for ``leaseDurationSeconds + margin``
  across its sweeps (its monotonic clock: no node's wall clock is trusted),
  and ``renewTime + leaseDurationSeconds`` is in the past by more than the
  margin too (a Lease whose times cannot be read is kept);
- its holder pod no longer exists in the Lease's namespace (a released Lease,
  with no holder, has none); an error while checking keeps the Lease;
- the delete carries the ``resourceVersion`` that was judged, so a Lease
  renewed between the list and the delete survives (409), and a second
  injector replica sweeping at the same moment is harmless (404/409).

Each deletion is one log line and one ``on_delete`` call (the metric).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, Protocol

from ..core.defaults import SWEEP_MARGIN
from ..core.lease import LeaseRecord
from ..driver.sweep import SELECTOR, Sightings, SweepResult, sweep_objects
from ..kit.logs import Logger


class SweepApi(Protocol):
    async def list_leases(self, label_selector: str) -> list[dict[str, Any]]: ...

    async def pod_exists(self, namespace: str, name: str) -> bool: ...

    async def delete_lease(self, namespace: str, name: str, resource_version: str) -> None: ...


async def sweep_cluster(
    api: SweepApi,
    log: Logger,
    *,
    sightings: Sightings,
    margin: float = SWEEP_MARGIN,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    on_delete: Callable[[str, LeaseRecord], None] | None = None,
) -> SweepResult:
    """contract §5's sweep over every namespace, keeping Leases whose holder pod still exists."""

    async def holder_exists(namespace: str, record: LeaseRecord) -> bool:
        # A released Lease (no holder) has no pod to wait for.
        return bool(record.holder) and await api.pod_exists(namespace, record.holder or "")

    return await sweep_objects(
        await api.list_leases(SELECTOR),
        api.delete_lease,
        log,
        sightings=sightings,
        margin=margin,
        now=now,
        still_needed=holder_exists,
        on_delete=on_delete,
    )
