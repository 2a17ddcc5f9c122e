"""The operator's periodic, cluster-wide sweep of abandoned Leases.

``kube.sweep``'s rules (contract §5), plus one: a Lease whose holder pod
still exists in its namespace is kept, and so is one whose pod cannot be
checked. Every delete carries the judged ``resourceVersion``, so replicas
sweeping at once are harmless (404/409). Calls go through the ``kube`` layer.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

from ..core.lease import LeaseRecord
from ..kit.logs import Logger
from ..kube.api import CORE, exists, path
from ..kube.config import ApiConfig
from ..kube.errors import ApiError, Forbidden
from ..kube.leases import LeaseStore
from ..kube.sweep import SELECTOR, Sightings, SweepResult, sweep_objects
from .metrics import InjectorMetrics

PodExists = Callable[[str, str], Awaitable[bool]]  # (namespace, name)
SWEEP_RBAC_FIX = (
    "grant the injector's ServiceAccount a ClusterRole with list and delete on "
    "leases.coordination.k8s.io and get on pods"
)


async def sweep_cluster(
    leases: LeaseStore, pod_exists: PodExists, log: Logger, **options: Any
) -> SweepResult:
    """contract §5's sweep of every namespace, keeping Leases whose holder pod still exists;
    ``options`` are ``sweep_objects``'s (``sightings``, ``margin``, ``now``, ``on_delete``)."""

    async def holder_exists(namespace: str, record: LeaseRecord) -> bool:
        return bool(record.holder) and await pod_exists(namespace, record.holder or "")

    async def delete(namespace: str, name: str, resource_version: str) -> None:
        await leases.delete(name, resource_version, namespace=namespace)

    items, _ = await leases.list(label_selector=SELECTOR)
    return await sweep_objects(items, delete, log, still_needed=holder_exists, **options)


async def sweep_every(
    interval: float, config: ApiConfig, margin: float, log: Logger, metrics: InjectorMetrics
) -> None:
    """Sweep every ``interval`` (± 10 %) until cancelled; each run counted, its failures logged."""
    leases = LeaseStore(config, "")  # every namespace
    # Sightings kept across sweeps: a Lease is judged on what this replica saw.
    options = {"sightings": Sightings(), "margin": margin, "on_delete": metrics.count_swept}

    async def pod_exists(namespace: str, name: str) -> bool:
        return await exists(leases.api, path(CORE, "pods", namespace, name), "get pods")

    while True:
        await asyncio.sleep(interval * random.uniform(0.9, 1.1))
        try:
            result = await sweep_cluster(leases, pod_exists, log, **options)
        except ApiError as err:
            metrics.sweeps["error"] += 1
            if isinstance(err, Forbidden):
                log.once(
                    "sweep:403", "error", "sweep: forbidden", error=str(err), fix=SWEEP_RBAC_FIX
                )
            else:
                log.warning("sweep: failed; will retry at the next interval", error=str(err))
            continue
        log.forget("sweep:403")
        metrics.sweeps["ok"] += 1
        log.debug(
            "sweep: done",
            deleted=len(result.deleted),
            kept_live=result.kept_live,
            kept_holder_exists=result.kept_needed,
            kept_unreadable=result.kept_unreadable,
        )
