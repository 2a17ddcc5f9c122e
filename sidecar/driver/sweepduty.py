"""Which sidecar of a namespace sweeps on exit (contract §5, step 3): the holder of the sweep duty.

If every sidecar listed the namespace's managed Leases at start and again at
its graceful exit, a rollout of N pods in a namespace of M elections would
cost 2·N lists of M objects, when the API server is busiest. Instead one
sidecar per namespace holds the duty, in the namespace's coordination Lease
(``core.roster``): it lists at start (the sighting the sweep's monotonic rule
needs) and at its exit, sweeps, and gives the duty back; the others make no
sweep request. Who finds the duty free bounds the marks in that object first
(``Coordination.turn_over``). The duty is claimed optimistically for
``DUTY_SECONDS`` and never renewed: when a holder dies without giving it back,
the first sidecar to start after it lapses takes it; a holder whose exit sweep
fails gives it back all the same. Two sweepers for a while are harmless (every
delete carries a ``resourceVersion`` precondition), and nothing here decides
what is deleted: ``sweep``'s rules judge every Lease.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

from ..core import roster
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube import sweep
from ..kube.coordination import Coordination
from ..kube.errors import ApiError
from ..kube.leases import LeaseStore
from .observer import Control, Observer

#: How long a claim lasts; a holder that lives longer shares the duty with the next starter.
DUTY_SECONDS = 3600


class ExitSweep(Observer):
    """Claim the duty and sight at start; sweep and give the duty back at exit."""

    def __init__(
        self,
        store: LeaseStore,
        shared: Coordination,
        identity: str,
        clock: Clock,
        log: Logger,
        on_delete: Callable[[], None] = lambda: None,
    ):
        self.store, self.shared, self.identity = store, shared, identity
        self.clock, self.log, self.on_delete = clock, log, on_delete
        self.sightings = sweep.Sightings(clock.monotonic)
        self.held = self.sighted = False
        #: Who holds the duty, as the claim found it.
        self.holder = ""
        self._start: asyncio.Task[None] | None = None

    async def start(self, control: Control) -> None:
        self._start = asyncio.create_task(self._claim(), name="sweep-duty")

    def _take(self, notes: dict[str, str]) -> dict[str, str] | None:
        """The duty for us when it is free, lapsed or already ours; None when someone holds it."""
        holder, until = roster.duty(notes)
        now = self.clock.wall()
        if holder and holder != self.identity and until is not None and until > now:
            self.holder = holder
            return None
        return roster.duty_value(self.identity, now + dt.timedelta(seconds=DUTY_SECONDS))

    async def _claim(self) -> None:
        """The holder lists the namespace's managed Leases once (contract §5: no clock trusted).

        A sidecar without the duty, or whose list failed, sweeps nothing at exit:
        the duty's holder, the injector's sweep and ``cleanup`` remain.
        """
        try:
            # The start-up read is shared: a duty held by someone else is not even tried.
            obj = await self.shared.read()
            free = self._take(roster.notes_of(obj)) is not None
            if free:
                await self._turn_over(obj)
            self.held = free and await self.shared.swap(self._take)
            if not self.held:
                self.log.debug("another sidecar holds the sweep duty", sweeper=self.holder)
                return
            await sweep.sight(self.store, self.sightings)
            self.sighted = True
        except ApiError as err:
            self.log.debug(
                "could not claim the sweep duty or list managed leases; the shutdown sweep will skip",
                error=str(err),
            )

    async def _turn_over(self, obj: dict[str, Any] | None) -> None:
        """Bound the marks before claiming (``Coordination.turn_over``): who finds the duty
        free, at most once per claim."""
        try:
            await self.shared.turn_over(obj)
        except ApiError as err:  # the claim goes on; the next claimer turns them over
            self.log.debug("did not turn the coordination Lease's marks over", error=str(err))

    async def before_release(self) -> None:
        if self._start is not None:
            self._start.cancel()

    async def after_release(self) -> None:
        """The exit sweep, by the duty's holder only; then the duty is free for the next starter,
        whether the sweep went through or not: a failed one (its list refused) that kept the
        duty would leave the namespace unswept until the claim lapses, an hour later."""
        if not self.held:
            self.log.info("sweep left to the sweep duty's holder", sweeper=self.holder or None)
            return
        if self.sighted:
            try:
                await self._sweep()
            except ApiError as err:
                msg = "exit sweep failed; giving the sweep duty back for the next sidecar to start"
                self.log.warning(msg, error=str(err))
        await self.shared.swap(self._give_back)
        self.held = False

    async def _sweep(self) -> None:
        on_delete, now = lambda *_: self.on_delete(), self.clock.wall
        result = await sweep.sweep(
            self.store, self.log, sightings=self.sightings, now=now, on_delete=on_delete
        )
        kept = {"kept_live": result.kept_live, "kept_unconfirmed": result.kept_unconfirmed}
        self.log.info("sweep done", deleted=len(result.deleted), **kept)

    def _give_back(self, notes: dict[str, str]) -> dict[str, str] | None:
        return roster.duty_value("", None) if roster.duty(notes)[0] == self.identity else None
