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

Each deletion is one log line and one ``on_delete`` call (the metric). The
calls go through the ``kube`` layer: a ``LeaseStore`` of every namespace for
the list and the deletes, ``KubeApi`` for the pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
from collections.abc import Awaitable, Callable

from ..core.defaults import SWEEP_MARGIN
from ..core.lease import LeaseRecord
from ..driver.sweep import SELECTOR, Sightings, SweepResult, sweep_objects
from ..kit.logs import Logger
from ..kube.api import CORE, KubeApi, exists, path
from ..kube.config import ApiConfig
from ..kube.errors import ApiError, Forbidden
from ..kube.leases import LeaseStore
from .metrics import InjectorMetrics

SWEEP_RBAC_FIX = (
    "grant the injector's ServiceAccount a ClusterRole with list and delete on "
    "leases.coordination.k8s.io and get on pods"
)
PodExists = Callable[[str, str], Awaitable[bool]]  # (namespace, name)


def pod_checker(api: KubeApi) -> PodExists:
    """Whether a pod exists, through ``api`` (``get`` on pods)."""

    async def pod_exists(namespace: str, name: str) -> bool:
        return await exists(api, path(CORE, "pods", namespace, name), "get pods")

    return pod_exists


async def sweep_cluster(
    leases: LeaseStore,
    pod_exists: PodExists,
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
        return bool(record.holder) and await pod_exists(namespace, record.holder or "")

    async def delete(namespace: str, name: str, resource_version: str) -> None:
        await leases.delete(name, resource_version, namespace=namespace)

    items, _ = await leases.list(label_selector=SELECTOR)
    return await sweep_objects(
        items,
        delete,
        log,
        sightings=sightings,
        margin=margin,
        now=now,
        still_needed=holder_exists,
        on_delete=on_delete,
    )


def sweeper(
    config: ApiConfig, margin: float, log: Logger, metrics: InjectorMetrics
) -> Callable[[], Awaitable[None]]:
    """The injector's periodic sweep: one call, one sweep, counted, its failures logged."""
    leases = LeaseStore(config, "")  # every namespace
    pod_exists = pod_checker(leases.api)
    sightings = Sightings()  # kept across sweeps: a Lease is judged on what this replica saw

    def count(namespace: str, record: LeaseRecord) -> None:
        metrics.swept += 1

    async def run_once() -> None:
        try:
            result = await sweep_cluster(
                leases,
                pod_exists,
                log,
                sightings=sightings,
                margin=margin,
                on_delete=count,
            )
        except Forbidden as err:
            metrics.sweeps["error"] += 1
            log.once("sweep:403", "error", "sweep: forbidden", error=str(err), fix=SWEEP_RBAC_FIX)
            return
        except ApiError as err:
            metrics.sweeps["error"] += 1
            log.warning("sweep: failed; will retry at the next interval", error=str(err))
            return
        log.forget("sweep:403")
        metrics.sweeps["ok"] += 1
        log.debug(
            "sweep: done",
            deleted=len(result.deleted),
            kept_live=result.kept_live,
            kept_holder_exists=result.kept_needed,
            kept_unreadable=result.kept_unreadable,
        )

    return run_once


async def every(interval: float, job: Callable[[], Awaitable[None]], stop: asyncio.Event) -> None:
    """Run ``job`` every ``interval`` (± 10 %) until ``stop`` is set."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            # Not wait_for: on 3.11 it can swallow a cancellation (see runner._wait).
            async with asyncio.timeout(interval * random.uniform(0.9, 1.1)):
                await stop.wait()
        if not stop.is_set():
            await job()
