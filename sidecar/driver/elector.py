"""The elector: runs one election against its Lease, tells the observers, releases on shutdown.

A loop over a small lock (``electionlock.ElectionLock``), in the manner of
client-go's ``LeaderElector.Run``: the state machine (``core.election``)
decides, observers (``observer``) react from outside, and what the lock adds
(the hand-off, the first term: ``handofflock``) stays behind it. The lock and
the clock are given, so tests drive it in-process on a fake store and virtual
time.
Three tasks: the loop (ask, do, report back, tell the observers); the watch,
so followers learn of a release in milliseconds without polling (losing it
never delays a step-down: that is a timer); a watchdog that republishes at
``valid_until`` even while the loop waits on a request, whose time is bounded
by what is left before the renew deadline. Shutdown: ``observer``'s order.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from ..core.election import Election, Read, Wait, Write
from ..core.timing import Timing
from ..kit import aio
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.errors import ApiError
from ..kube.leaselock import Changed, Deleted, Failed, Healthy
from . import requests
from .electionlock import ElectionLock
from .observer import HANDED_OVER, Call, Observer, Observers, View

#: Release and after-release steps, well inside the default 30 s grace period.
SHUTDOWN_BUDGET = 10.0
#: How long the shutdown waits for cancelled tasks.
TASK_STOP_SECONDS = 2.0
#: The shortest wait: an asyncio timer may fire up to the clock's resolution early, and a
#: wait ending between two ticks of a coarse clock would wake short of its end, again and
#: again, without the clock moving. A millisecond late is never less safe.
MIN_WAIT = 0.001


class Elector:
    def __init__(
        self,
        lock: ElectionLock,
        *,
        identity: str,
        election: str,
        lease: str,
        namespace: str,
        timing: Timing,
        observers: Sequence[Observer],
        log: Logger,
        clock: Clock | None = None,
    ):
        self.lock, self.clock = lock, clock or Clock()
        self.election = Election(
            identity, lease, namespace, timing, self.clock.wall, random.Random()
        )
        #: The election's name as given (``State.election``); the Lease is ``lease``.
        self.name = election
        self.observers, self.log = Observers(observers), log
        self._wake, self._leading, self._stop = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []  # the elector's three, then spawned ones
        self._releasing = asyncio.Lock()
        self._aside: set[str] = set()  # why this candidate may not claim now (``stand``)
        self._running = False

    # ---- Control (what observers may ask) -----------------------------------
    def view(self) -> View:
        return View.of(self.election, self.name, self.clock.monotonic(), self.clock.wall())

    def healthy(self) -> bool:
        return bool(self._tasks) and not any(t.done() for t in self._tasks)

    def stop(self) -> None:
        self._stop.set()

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(work, name=name)
        self._tasks.append(task)
        return task

    async def hand_over(
        self, successor: str | None, reason: str, drained: Callable[[float], Awaitable[None]]
    ) -> bool:
        """Leadership off this candidate while it runs on: the step-down told first, then
        ``drained(seconds left of its last valid_until)``, then the release naming
        ``successor`` (None: the roster's choice; one that fails leaves the Lease to expire,
        never raised). It claims nothing after, until ``stand(True, HANDED_OVER)``.
        False when it did not lead (nothing done)."""
        now = self.clock.monotonic()
        until = self.election.valid_until(now)
        if until is None or self._stop.is_set():
            return False
        self._aside.add(HANDED_OVER)
        self.election.resign(reason)
        self._publish()
        await drained(until - now)
        await self._release(successor)
        return True

    def stand(self, candidate: bool, why: str) -> None:
        """Whether this candidate may claim, as far as ``why`` goes: it claims only when no
        reason holds it back (a leader held back steps down at once, for ``why``)."""
        (self._aside.discard if candidate else self._aside.add)(why)
        if self._stop.is_set():
            return
        if self._aside:
            self.election.resign(why)
        else:
            self.election.rejoin()
        if self._running:  # before ``run``, the first state published says it
            self._publish()
            self._wake.set()

    def resign_now(self) -> None:
        """Say "not leader" at once and synchronously (a second signal, then exit)."""
        self.election.resign()
        self._publish(force=True)

    async def start(self) -> None:
        """Every observer's start, in order ("not leader" is published first)."""
        await self.observers.start(self)

    async def run(self) -> int:
        """The election until ``stop`` (0) or a task's end, which is a bug (1)."""
        self._running = True
        self._tasks[:0] = [
            asyncio.create_task(self._loop(), name="election"),
            asyncio.create_task(self._watch(), name="watch"),
            asyncio.create_task(self._watchdog(), name="watchdog"),
        ]
        stop = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stop, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
        failed = next((t for t in self._tasks if t in done), None)
        bug = failed is not None and not stop.done()
        if failed is not None and bug:
            # None of them ends on its own: one that did has a bug. Exit (the
            # kubelet restarts the sidecar) rather than run on without it.
            stop.cancel()
            err = None if failed.cancelled() else failed.exception()
            self.log.error(f"{failed.get_name()} task failed; exiting", error=repr(err))
        await self._shutdown()
        return 1 if bug else 0

    # ---- the loop ---------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            action = self.election.next_action(self.clock.monotonic())
            self._publish()
            if isinstance(action, Read):
                await requests.read(*self._requests(), self._request_timeout())
            elif isinstance(action, Write):
                await requests.write(*self._requests(), action, self._request_timeout())
            elif isinstance(action, Wait):
                await self._wait(action.until)
            self._publish()

    def _requests(self) -> tuple[ElectionLock, Election, Observers, Clock]:
        return self.lock, self.election, self.observers, self.clock

    def _request_timeout(self) -> float:
        now, timeout = self.clock.monotonic(), self.lock.request_timeout
        valid = self.election.valid_until(now)
        return timeout if valid is None else min(timeout, max(0.05, valid - now))

    async def _wait(self, until: float) -> None:
        timeout = until - self.clock.monotonic()
        if timeout <= 0:
            return
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the inner
        # result when a cancellation lands in the same step as the wake-up, so the
        # shutdown's cancel was lost and the loop waited on (CI hit it).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(max(timeout, MIN_WAIT), 3600)):
                await self._wake.wait()

    def _publish(self, force: bool = False) -> None:
        events = self.election.drain_events()
        view = self.view()
        for event in events:
            if event.kind == "leading":
                self._leading.set()
            self.observers.on_event(event, view)
        self.observers.on_state(view, force)

    async def _watch(self) -> None:
        async for event in self.lock.events():
            now = self.clock.monotonic()
            if isinstance(event, Changed):
                self.election.observe(event.obj, now)
                if (record := self.election.record) is not None:
                    self.observers.on_lease(record)
            elif isinstance(event, Deleted):
                self.election.observe_deleted(event.obj, now)
            elif isinstance(event, Failed | Healthy):
                error, retry_in = (
                    (event.error, event.retry_in) if isinstance(event, Failed) else (None, 0.0)
                )
                self.observers.on_call(Call("watch", error, retry_in=retry_in))
                continue
            else:
                self.election.mark_stale()  # events were missed: re-read before acting
            self._wake.set()

    async def _watchdog(self) -> None:
        """Republish exactly when leadership lapses, whatever the loop is doing."""
        while True:
            valid = self.election.valid_until(self.clock.monotonic())
            if valid is None:
                self._leading.clear()
                await self._leading.wait()  # followers sleep here: no periodic wake-ups
                continue
            await asyncio.sleep(max(0.0, valid - self.clock.monotonic()) + 0.001)
            self._publish()

    # ---- shutdown ---------------------------------------------------------------
    async def _release(self, successor: str | None = None) -> None:
        """The release (a hand-over's, the shutdown's: never both at once)."""
        async with self._releasing:
            await requests.release(self.lock, self.election, self.clock, self.log, successor)

    async def _shutdown(self) -> None:
        """contract §5: "not leader" first, then the observers', the release, the rest; bounded."""
        self.election.resign()
        self._publish(force=True)  # the step-down of a leader is told like any other
        loop, watch, watchdog = self._tasks[:3]
        await aio.cancel([loop, watchdog], TASK_STOP_SECONDS, self.log)
        await self.observers.before_release()

        async def unwatch() -> None:  # the release followed the hand-off on it
            await aio.cancel([watch], TASK_STOP_SECONDS, self.log)

        keeping = [type(o).__name__ for o in self.observers if o.keeps_lease()]
        if keeping:  # something of this leadership runs on: nobody in before its expiry
            self.log.warning("lease left to expire, not released", kept_by=keeping)
        steps: list[Callable[[], Awaitable[None]]] = (
            [unwatch] if keeping else [self._release, unwatch]
        )
        steps += [observer.after_release for observer in self.observers]
        await aio.bounded_steps(
            steps, SHUTDOWN_BUDGET, self.clock.monotonic, self.log, expected=(ApiError,)
        )
        await aio.cancel([watch, *self._tasks[3:]], TASK_STOP_SECONDS, self.log)
