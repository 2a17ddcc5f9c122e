"""The driver: runs the election against a Lease store, publishes what it decides, shuts down.

It owns no protocol and no schema. The state machine (``election``) decides;
the store (``kube.leases``) and the watch (``kube.watch``) talk to the API
server; ``publish`` says what the application sees (``State``). The store and
the clocks are given to it, so tests drive it in-process on a fake store and
virtual time (``tests/unit/test_driver.py``). Three tasks share one loop:

- the election loop asks the state machine what to do, does it (read, write,
  or wait for news or a timer), reports back, and publishes;
- the watch feeds every change of our Lease to the state machine and wakes
  the loop, so followers learn of a release in milliseconds without polling.
  Losing it never delays a step-down: step-down is a timer, not an event;
- a watchdog republishes at ``valid_until``, so the state file says "not
  leader" on time even if the loop is stuck in a request.

Requests made while leading are bounded by the time left before the renew
deadline, so the loop always gets control back in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..core.election import Election, Read, Wait, Write
from ..core.state import State
from ..core.timing import Timing
from ..kit import held_signals
from ..kit.logs import Logger
from ..kube.config import ApiConfig
from ..kube.errors import ApiError, Conflict, Forbidden, NotFound, Unauthorized
from ..kube.events import EventRecorder
from ..kube.leases import LeaseStore
from ..kube.watch import Changed, Deleted, LeaseWatch
from ..publish.changes import Changes
from ..publish.http import StatusServer
from ..publish.metrics import Metrics
from ..publish.statefile import StateDirError, StateFile
from .handover import Handover
from .label import LeaderLabel
from .sweepduty import ExitSweep


class RunSettings(Protocol):
    """What the driver reads of ``run``'s settings (until the elector takes only what it needs)."""

    election: str
    lease: str
    identity: str
    timing: Timing
    state_dir: Path
    port: int


SHUTDOWN_BUDGET = 10.0  # release + sweep, well inside the default 30 s grace period
LABEL_BUDGET = 3.0  # of it, how long the release waits for the leader label to come off
TASK_STOP_SECONDS = 2.0  # how long the shutdown waits for cancelled tasks
RBAC_FIX = (
    "grant the pod's ServiceAccount a Role with get, list, watch, create, update, patch, delete "
    "on leases.coordination.k8s.io in this namespace (see manifests/rbac.yaml)"
)


class Clock:
    """The driver's two clocks: monotonic for every decision, wall for what is written."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)


def store_for(settings: RunSettings, config: ApiConfig, namespace: str) -> LeaseStore:
    """The real Lease store, with requests bounded by the retry period."""
    return LeaseStore(config, namespace, request_timeout=max(2.0, settings.timing.retry_period * 2))


class Sidecar:
    """The driver. Its store and clock are given, so tests run it in-process on fakes."""

    def __init__(
        self,
        settings: RunSettings,
        namespace: str,
        store: LeaseStore,
        log: Logger,
        clock: Clock | None = None,
        source: str = "",
        events: EventRecorder | None = None,
        label: LeaderLabel | None = None,
    ):
        self.settings = settings
        self.namespace = namespace
        self.log = log
        self.store = store
        self.clock = clock or Clock()
        self.source = source
        self.events = events
        #: The leader label on this pod (``--label-leader``), following what is published.
        self.label = label
        self._label_task: asyncio.Task[None] | None = None
        #: Who handles SIGTERM/SIGINT (``lock`` forwards them); default: a graceful stop.
        self.on_signal: Callable[[int], None] = self._on_signal
        self.election = Election(
            identity=settings.identity,
            lease=settings.lease,
            namespace=namespace,
            timing=settings.timing,
            wall=self.clock.wall,
            rng=random.Random(),
        )
        self.state_file = StateFile(settings.state_dir)
        self.changes = Changes(self.snapshot())
        self.metrics = Metrics(
            settings.lease,
            lease_duration=settings.timing.lease_duration,
            renew_deadline=settings.timing.renew_deadline,
            lease_unchanged=lambda: self.clock.monotonic() - self.election.observed_at,
        )
        self.server: StatusServer | None = None
        self._wake = asyncio.Event()
        self._leading = asyncio.Event()
        self._stop = asyncio.Event()
        self.watch = LeaseWatch(
            self.store, settings.lease, self._watch_failed, lambda: self.log.forget("watch")
        )
        self._tasks: list[asyncio.Task[Any]] = []
        self._loop_task: asyncio.Task[Any] | None = None
        #: Only the holder of the namespace's sweep duty sweeps at exit (contract §5).
        self.sweep = ExitSweep(
            store,
            namespace,
            settings.identity,
            self.clock.wall,
            self.clock.monotonic,
            log,
            on_delete=self._count_swept,
        )
        #: The roster, the release naming a successor (contract §2, hand-off).
        self.handover = Handover(
            store,
            self.election,
            settings.lease,
            namespace,
            settings.identity,
            self.clock.wall,
            self.clock.monotonic,
            log,
        )
        #: Tasks of the start-up that the shutdown cancels when they are still running.
        self._starting: list[asyncio.Task[None]] = []
        self._signals = 0

    # ---- what the application sees ----------------------------------------
    def snapshot(self) -> State:
        return State.of(
            self.election, self.settings.election, self.clock.monotonic(), self.clock.wall()
        )

    def publish(self, force: bool = False) -> State:
        state = self.snapshot()
        self.metrics.leader = state.is_leader
        self.changes.offer(state)
        if self.label is not None:
            self.label.offer(state.is_leader)
        if self.election.record is not None:
            self.metrics.lease_transitions = self.election.record.transitions
        try:
            self.state_file.write(state, force=force)
            self.log.forget("statefile")
        except StateDirError as err:
            self.log.once("statefile", "error", str(err) + "; readers must rely on valid_until")
        return state

    def healthy(self) -> bool:
        """Liveness: every task (election, watch, watchdog, leader label) still runs."""
        return bool(self._tasks) and not any(t.done() for t in self._tasks)

    # ---- start-up ---------------------------------------------------------
    async def start(self) -> None:
        """Publish "not leader" first, then open the HTTP endpoints; raises StateDirError/OSError."""
        self.state_file.check_writable()
        self.state_file.write(self.snapshot(), force=True)
        if self.settings.port:
            self.server = StatusServer(
                self.settings.port,
                self.snapshot,
                self.healthy,
                self.metrics.render,
                self.log,
                self.changes,
            )
            await self.server.start()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.on_signal, sig)
        for held in held_signals.take():
            self.on_signal(held)
        self.log.info(
            "starting",
            election=self.settings.election,
            lease=self.settings.lease,
            namespace=self.namespace,
            identity=self.settings.identity,
            source=self.source,
            lease_duration=self.settings.timing.lease_duration,
            renew_deadline=self.settings.timing.renew_deadline,
            retry_period=self.settings.timing.retry_period,
            port=self.server.bound_port if self.server else 0,
        )
        self._loop_task = asyncio.create_task(self._election_loop(), name="election")
        self._tasks = [
            self._loop_task,
            asyncio.create_task(self._watch_loop(), name="watch"),
            asyncio.create_task(self._watchdog(), name="watchdog"),
        ]
        if self.label is not None:
            self._label_task = asyncio.create_task(self.label.run(), name="leader-label")
            self._tasks.append(self._label_task)
        self._starting = [
            asyncio.create_task(self.sweep.start(), name="sighting"),
            asyncio.create_task(self.handover.join(), name="roster"),
        ]
        stop = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stop, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
        failed = next((t for t in self._tasks if t in done), None)
        if failed is not None and not stop.done():
            # None of them ends on its own: one that did has a bug. Exit (the
            # kubelet restarts the sidecar) rather than run on without it.
            stop.cancel()
            err = None if failed.cancelled() else failed.exception()
            self.log.error(f"{failed.get_name()} task failed; exiting", error=repr(err))
            await self._shutdown()
            return 1
        return await self._shutdown()

    def _on_signal(self, sig: int) -> None:
        self._signals += 1
        if self._signals > 1:
            self.log.warning("second signal: exiting at once", signal=signal.Signals(sig).name)
            self.election.resign()
            self.publish(force=True)  # synchronous and quick: never leave a "leader" file behind
            os._exit(1)
        self.log.info("shutting down", signal=signal.Signals(sig).name)
        self.request_stop()

    def request_stop(self) -> None:
        """Begin the graceful shutdown of contract §5 (what the first SIGTERM does)."""
        self._stop.set()

    # ---- the election loop ------------------------------------------------
    async def _election_loop(self) -> None:
        while True:
            self._wake.clear()
            action = self.election.next_action(self.clock.monotonic())
            self._after_step()
            if isinstance(action, Read):
                await self._read()
            elif isinstance(action, Write):
                await self._write(action)
            elif isinstance(action, Wait):
                await self._wait(action.until)
            self._after_step()

    def _request_timeout(self) -> float:
        now = self.clock.monotonic()
        valid = self.election.valid_until(now)
        timeout = self.store.request_timeout
        if valid is not None:
            timeout = min(timeout, max(0.05, valid - now))
        return timeout

    async def _read(self) -> None:
        try:
            items, list_rv = await self.store.list(
                field_selector=f"metadata.name={self.settings.lease}",
                timeout=self._request_timeout(),
            )
        except ApiError as err:
            self._api_error(err)
            self.election.on_error(self.clock.monotonic(), err.retry_after)
            return
        obj = next(
            (i for i in items if (i.get("metadata") or {}).get("name") == self.settings.lease), None
        )
        self.election.on_read(obj, self.clock.monotonic())
        self.watch.resume_from(list_rv)

    async def _write(self, action: Write) -> None:
        over = self.election.record  # what this write replaces (a hand-off, maybe)
        started = self.clock.monotonic()
        timeout = self._request_timeout()
        try:
            if action.create:
                obj = await self.store.create(action.body, timeout=timeout)
            else:
                obj = await self.store.replace(action.body, timeout=timeout)
        except Conflict:
            self.election.on_conflict(self.clock.monotonic())
            return
        except NotFound as err:
            if action.create:
                # A create cannot miss the Lease: the namespace itself is missing.
                self.log.once(
                    "404:namespace",
                    "error",
                    f"namespace {self.namespace} does not exist; create it or pass --namespace",
                    detail=str(err),
                )
                self.metrics.api_errors["404"] += 1
                # Not transient: retry at the slowest backoff step from the start.
                self.election.on_error(self.clock.monotonic(), retry_after=math.inf)
            else:
                self.election.on_not_found(self.clock.monotonic())
            return
        except ApiError as err:
            self._api_error(err)
            self.election.on_error(self.clock.monotonic(), err.retry_after)
            return
        now = self.clock.monotonic()
        if action.purpose == "renew":
            self.metrics.observe_renew(now - started)
        self.election.on_written(obj, started, now)
        self._clear_api_errors()
        if action.purpose == "acquire":
            self.handover.claimed(over)

    async def _wait(self, until: float) -> None:
        timeout = until - self.clock.monotonic()
        if timeout <= 0:
            return
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the inner
        # result when a cancellation lands in the same step as the wake-up, so the
        # shutdown's cancel was lost and the loop waited on (CI hit it).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(timeout, 3600)):
                await self._wake.wait()

    def _check_clock(self) -> None:
        """Alarm once when this node's clock is certainly off by more than the contract tolerates.

        Tolerated: ``lease_duration - renew_deadline`` (contract §2): a grelmicro
        peer judging our ``renewTime`` on its own clock would otherwise take over
        while we still vouch.
        """
        offset = self.store.clock_offset
        if offset is None:
            return
        self.metrics.clock_skew = offset.estimate
        timing = self.settings.timing
        tolerated = timing.lease_duration - timing.renew_deadline
        if offset.beyond(tolerated):
            self.log.once(
                "clock-skew",
                "warning",
                "this node's clock is off from the API server's by more than the contract tolerates",
                skew_seconds=round(offset.estimate, 1),
                tolerated_seconds=tolerated,
                fix="sync the node's clock (NTP); grelmicro peers and valid_until readers use wall clocks",
            )
        elif not offset.beyond(tolerated / 2):
            self.log.forget("clock-skew")

    def _record(self, action: str, what: str) -> None:
        """An Event on the Lease for ``kubectl describe lease`` (never waited for)."""
        if self.events is not None:
            record = self.election.record
            self.events.record(
                record.raw if record is not None else None,
                self.settings.lease,
                action,
                f"{self.settings.identity} {what}",
            )

    def _after_step(self) -> None:
        self._check_clock()
        self._report()
        self.publish()

    def _report(self) -> None:
        """Log, count and record (as Events on the Lease) what the election says happened."""
        for event in self.election.drain_events():
            if event.kind == "leading":
                self._leading.set()
                self.metrics.leader_transitions += 1
                self.log.info(
                    "leading", lease=self.settings.lease, fencing_token=event.fencing_token
                )
                self._record("Acquire", f"became leader (fencing token {event.fencing_token})")
            elif event.kind == "stepped_down":
                if not self.election.resigned:  # a shutdown was logged as such already
                    self.log.warning("stepped down", lease=self.settings.lease, reason=event.detail)
                self._record("StepDown", f"stopped leading: {event.detail}")
            elif event.kind == "holder":
                self.log.info(
                    "holder changed", lease=self.settings.lease, holder=event.detail or None
                )
            elif event.kind == "rolled_back":
                self.log.warning(
                    "the API server's store went back in time (etcd restored from a backup?); "
                    "nobody may claim for one lease duration",
                    lease=self.settings.lease,
                    detail=event.detail,
                    fix="restore etcd with --bump-revision, or fencing tokens can go back",
                )
            elif event.kind == "problem":
                self.log.warning(
                    "lease has an unusable field; treating it conservatively",
                    lease=self.settings.lease,
                    problem=event.detail,
                )

    # ---- the watch --------------------------------------------------------
    async def _watch_loop(self) -> None:
        async for event in self.watch.events():
            now = self.clock.monotonic()
            if isinstance(event, Changed):
                self.election.observe(event.obj, now)
            elif isinstance(event, Deleted):
                self.election.observe_deleted(event.obj, now)
            else:
                self.log.debug("watch: resourceVersion too old; re-reading the lease")
                self.election.mark_stale()
            self._wake.set()

    def _watch_failed(self, err: ApiError, retry_in: float) -> None:
        self._api_error(err)
        self.log.once(
            "watch",
            "warning",
            "watch lost; reconnecting with backoff",
            error=str(err),
            retry_in=round(retry_in, 2),
        )

    async def _watchdog(self) -> None:
        """Republish exactly when leadership lapses, whatever the election loop is doing."""
        while True:
            valid = self.election.valid_until(self.clock.monotonic())
            if valid is None:
                self._leading.clear()
                await self._leading.wait()  # followers sleep here: no periodic wake-ups
                continue
            await asyncio.sleep(max(0.0, valid - self.clock.monotonic()) + 0.001)
            self.publish()

    # ---- errors -----------------------------------------------------------
    def _api_error(self, err: ApiError) -> None:
        self.metrics.api_errors[str(err.status)] += 1
        if isinstance(err, Forbidden):
            self.log.once(
                f"403:{err.verb}",
                "error",
                f"forbidden: cannot {err.verb} leases in namespace {self.namespace}; {RBAC_FIX}",
                verb=err.verb,
                resource="leases.coordination.k8s.io",
                detail=str(err),
            )
        elif isinstance(err, Unauthorized):
            self.log.once(
                "401",
                "error",
                "the API server rejected our credentials (401): the token is expired or invalid; "
                "check the ServiceAccount token mount or the kubeconfig",
                detail=str(err),
            )
        else:
            self.log.once(
                f"api:{err.status}",
                "warning",
                "API request failed; retrying with backoff",
                error=str(err),
            )

    def _clear_api_errors(self) -> None:
        self.log.forget_prefix("403:", "401", "404:", "api:")

    # ---- shutdown -----------------------------------------------------------
    async def _shutdown(self) -> int:
        """contract §5: publish not-leader, release, sweep; bounded in time."""
        self.election.resign()
        self._report()  # the step-down of a leader, like any other
        self.publish(force=True)
        self.log.info("published not-leader", lease=self.settings.lease)
        tasks = [t for t in self._tasks if t is not self._label_task]
        tasks += self._starting
        for task in tasks:
            task.cancel()
        # Bounded: a task that ignores its cancellation must not keep the Lease held.
        stopped, stuck = await asyncio.wait(tasks, timeout=TASK_STOP_SECONDS) if tasks else ((), ())
        for task in stopped:
            if not task.cancelled():
                task.exception()  # retrieved: a failed task was reported by run() already
        for task in stuck:
            self.log.warning("a task did not stop when cancelled", task=task.get_name())
        await self._label_off()
        deadline = self.clock.monotonic() + SHUTDOWN_BUDGET
        try:
            async with asyncio.timeout(SHUTDOWN_BUDGET):
                await self.handover.leave(deadline)
                await self.sweep.finish()
        except TimeoutError:
            self.log.warning(
                "shutdown budget spent; exiting without finishing release/sweep",
                budget_seconds=SHUTDOWN_BUDGET,
            )
        except ApiError as err:
            self.log.warning("shutdown: API request failed", error=str(err))
        if self.events is not None:
            await self.events.close()
        if self.server is not None:
            await self.server.close()
        self.store.close()
        self.log.info("stopped")
        return 0

    async def _label_off(self) -> None:
        """Wait (bounded) for the leader label to come off before the Lease is released.

        Not a safety step (consumers gate on ``valid_until``), so a label that
        cannot be removed in time does not hold the Lease: a terminating pod
        leaves the Service's ready endpoints anyway.
        """
        task = self._label_task
        if self.label is None or task is None:
            return
        settled = asyncio.ensure_future(self.label.settled())
        done, _ = await asyncio.wait(
            [settled, task], timeout=LABEL_BUDGET, return_when=asyncio.FIRST_COMPLETED
        )
        settled.cancel()
        task.cancel()
        await asyncio.wait([task], timeout=TASK_STOP_SECONDS)
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: a failed task was reported by run() already
        if settled not in done:
            self.log.warning(
                "the leader label may still be on this pod; releasing the lease anyway",
                pod=self.label.pod,
                waited_seconds=LABEL_BUDGET,
            )

    def _count_swept(self) -> None:
        self.metrics.swept += 1


def resolve_namespace(explicit: str | None, config: ApiConfig) -> str:
    """Flag; else the service account's namespace; else POD_NAMESPACE; else the kubeconfig's; else default."""
    return pick_namespace(explicit, config.namespace, config.source.startswith("in-cluster"))


def pick_namespace(explicit: str | None, configured: str | None, in_cluster: bool) -> str:
    """The rule of ``resolve_namespace``, for any loader (``configured``: its namespace)."""
    if explicit:
        return explicit
    if in_cluster and configured:
        return configured
    return os.environ.get("POD_NAMESPACE") or configured or "default"
