"""Which sidecar of a namespace sweeps on exit (contract §5, step 3): the holder of one duty Lease.

If every sidecar listed the namespace's managed Leases at start and again at
its graceful exit, a rollout of N pods in a namespace of M elections would
cost 2·N lists of M objects, landing on the API server when it is busiest.
Instead one sidecar per namespace holds the sweep duty: it lists at start
(the sighting the sweep's monotonic rule needs) and at its exit, sweeps, and
gives the duty back. Every other sidecar reads one small object at start and
makes no request for the sweep at exit. Cost: N small reads + 2 lists of M.

The duty is the Lease ``grelmicro-sidecar-sweeper``. It is not an election:
it is labelled ``managed-by: grelmicro-sidecar`` (not ``grelmicro``), so sweeps,
``status`` and grelmicro peers never see it. It is claimed like any Lease, by
an optimistic write, for ``DUTY_SECONDS``, and never renewed: when a holder
dies without giving it back, the first sidecar to start after it lapses takes
it over. Two sweepers for a while are harmless (every delete carries a
``resourceVersion`` precondition), and nothing here decides what is deleted:
``cleanup``'s rules judge every Lease. The cost of the bound: sweeps happen on
the duty holder's exit, not on every exit; the injector's periodic sweep and
``grelmicro-sidecar cleanup`` remain for the rest.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

from ..core.lease import LeaseRecord, format_microtime, lease_object
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.errors import ApiError, Conflict, NotFound
from ..kube.leases import LeaseStore
from . import sweep
from .observer import Control, Observer

DUTY_LEASE = "grelmicro-sidecar-sweeper"
#: How long a claim lasts; a holder that lives longer shares the duty with the next starter.
DUTY_SECONDS = 3600
LABELS = {
    "app.kubernetes.io/managed-by": "grelmicro-sidecar",
    "app.kubernetes.io/component": "sweep-duty",
}


def duty_body(
    namespace: str, holder: str, now: dt.datetime, record: LeaseRecord | None = None
) -> dict[str, Any]:
    stamp = format_microtime(now)
    spec = {
        "holderIdentity": holder,
        "leaseDurationSeconds": DUTY_SECONDS if holder else 1,
        "acquireTime": stamp,
        "renewTime": stamp,
    }
    version = record.resource_version if record is not None else None
    return lease_object(DUTY_LEASE, namespace, LABELS, spec=spec, resource_version=version)


class SweepDuty:
    """Claim the namespace's sweep duty at start; give it back after the exit sweep."""

    def __init__(
        self, store: LeaseStore, namespace: str, identity: str, now: Callable[[], dt.datetime]
    ):
        self.store = store
        self.namespace = namespace
        self.identity = identity
        self.now = now
        self.held = False
        #: Who holds the duty, as the claim found it ("" when unknown).
        self.holder = ""

    async def claim(self) -> bool:
        """Take the duty when it is free, lapsed or already ours; whether we hold it."""
        obj = await self.store.get(DUTY_LEASE)
        try:
            if obj is None:
                await self.store.create(duty_body(self.namespace, self.identity, self.now()))
            else:
                record = LeaseRecord.from_object(obj)
                expiry = record.wall_expiry()
                taken = bool(record.holder) and record.holder != self.identity
                if taken and expiry is not None and expiry > self.now():
                    self.holder = record.holder or ""
                    return False
                body = duty_body(self.namespace, self.identity, self.now(), record)
                await self.store.replace(body)
        except Conflict:  # another starter took it in between
            self.holder = "another sidecar"
            return False
        self.held, self.holder = True, self.identity
        return True

    async def give_back(self) -> None:
        """Free the duty if we still hold it, so the next sidecar to start takes it at once."""
        if not self.held:
            return
        obj = await self.store.get(DUTY_LEASE)
        if obj is None:
            return
        record = LeaseRecord.from_object(obj)
        if record.holder != self.identity:
            return
        try:
            await self.store.replace(duty_body(self.namespace, "", self.now(), record))
        except (Conflict, NotFound):
            return
        self.held = False


class ExitSweep(Observer):
    """A sidecar's part in sweeps: claim the duty and sight at start; sweep and give back at exit."""

    def __init__(
        self,
        store: LeaseStore,
        namespace: str,
        identity: str,
        clock: Clock,
        log: Logger,
        on_delete: Callable[[], None] = lambda: None,
    ):
        self.store = store
        self.clock = clock
        self.log = log
        self.on_delete = on_delete
        self.duty = SweepDuty(store, namespace, identity, clock.wall)
        self.sightings = sweep.Sightings(clock.monotonic)
        self.sighted = False
        self._start: asyncio.Task[None] | None = None

    async def start(self, control: Control) -> None:
        self._start = asyncio.create_task(self._claim(), name="sweep-duty")

    async def _claim(self) -> None:
        """Claim the sweep duty; its holder lists the namespace's managed Leases once.

        Without that list the sweep could only trust wall clocks (contract §5).
        A sidecar without the duty, or whose list failed, sweeps nothing at
        exit: the duty holder, the injector's sweep and ``cleanup`` remain.
        """
        try:
            if not await self.duty.claim():
                self.log.debug("another sidecar holds the sweep duty", sweeper=self.duty.holder)
                return
            await sweep.sight(self.store, self.sightings)
            self.sighted = True
        except ApiError as err:
            self.log.debug(
                "could not claim the sweep duty or list managed leases; the shutdown sweep will skip",
                error=str(err),
            )

    async def before_release(self) -> None:
        if self._start is not None:
            self._start.cancel()

    async def after_release(self) -> None:
        """The exit sweep (contract §5 step 3), by the sweep duty's holder only."""
        if not self.duty.held:
            self.log.info("sweep left to the sweep duty's holder", sweeper=self.duty.holder or None)
            return
        if self.sighted:
            result = await sweep.sweep(
                self.store,
                self.log,
                sightings=self.sightings,
                now=self.clock.wall,
                on_delete=lambda _r: self.on_delete(),
            )
            self.log.info(
                "sweep done",
                deleted=len(result.deleted),
                kept_live=result.kept_live,
                kept_unconfirmed=result.kept_unconfirmed,
            )
        await self.duty.give_back()
