"""The operator's periodic, cluster-wide sweep of abandoned Leases.

Deletes a Lease only when all of these hold (SPEC §5's rules, plus one):

- it carries ``app.kubernetes.io/managed-by: grelmicro`` (checked again on the
  object, not only trusted to the label selector);
- ``renewTime + leaseDurationSeconds`` is in the past by more than the margin
  (node clocks disagree; a Lease whose times cannot be read is kept);
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
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..cleanup import SELECTOR, is_expired
from ..kube.leases import ApiError, Conflict, NotFound
from ..lease import LeaseRecord
from ..logs import Logger


class SweepApi(Protocol):
    async def list_leases(self, label_selector: str) -> list[dict[str, Any]]: ...

    async def pod_exists(self, namespace: str, name: str) -> bool: ...

    async def delete_lease(self, namespace: str, name: str, resource_version: str) -> None: ...


@dataclass
class ClusterSweep:
    deleted: list[tuple[str, str]] = field(default_factory=list)  # (namespace, lease)
    kept_live: int = 0
    kept_unreadable: int = 0
    kept_holder_exists: int = 0
    skipped_changed: int = 0
    errors: int = 0


def _namespace(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("namespace", "")) if isinstance(meta, dict) else ""


async def sweep_cluster(
    api: SweepApi,
    log: Logger,
    *,
    margin: float,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    on_delete: Callable[[str, LeaseRecord], None] | None = None,
) -> ClusterSweep:
    result = ClusterSweep()
    for obj in await api.list_leases(SELECTOR):
        record = LeaseRecord.from_object(obj)
        namespace = _namespace(obj)
        if not record.managed or not namespace or not record.name:
            continue
        if record.wall_expiry() is None:
            result.kept_unreadable += 1
            continue
        if not is_expired(record, now(), margin):
            result.kept_live += 1
            continue
        if record.holder:
            try:
                alive = await api.pod_exists(namespace, record.holder)
            except ApiError as err:
                result.errors += 1
                log.warning(
                    "sweep: cannot check the holder pod; keeping the lease",
                    namespace=namespace,
                    lease=record.name,
                    holder=record.holder,
                    error=str(err),
                )
                continue
            if alive:
                result.kept_holder_exists += 1
                continue
        try:
            await api.delete_lease(namespace, record.name, record.resource_version)
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
        expiry = record.wall_expiry() or now()
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
