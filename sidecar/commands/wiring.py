"""The one place that builds an elector and wires its observers, for ``run`` and ``lock``.

The order of the observers is the order of every callback and of the shutdown
steps (``driver.observer``): the log first; the leader label, the command of
``lock`` and the hand-off before the release; after it, the roster, the
sweep, the Events and last the HTTP endpoints, so that streams hear the
final "not leader". Tests build their candidates here too, on a fake store
and a virtual clock, so what they prove is the wiring the command runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from ..driver.apppublisher import AppPublisher
from ..driver.drain import Drain
from ..driver.elector import Elector
from ..driver.events import EventRecorder
from ..driver.firstterm import FirstTermMark
from ..driver.handofflock import HandoffLock
from ..driver.health import AppHealth, Check, file_check, http_check
from ..driver.label import LeaderLabel
from ..driver.lockcommand import LockCommand
from ..driver.membership import Membership
from ..driver.metrics import Metrics
from ..driver.observer import Observer
from ..driver.releasetiming import ReleaseTiming
from ..driver.report import LogReport
from ..driver.sweepduty import ExitSweep
from ..driver.transfer import Transfer
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.api import Post
from ..kube.coordination import Coordination
from ..kube.leaselock import LeaseLock
from ..kube.leases import LeaseStore
from ..publish.http import Action
from ..publish.statefile import STATE_FILE
from .settings import LockSettings, RunSettings

#: ``put(present)``: the leader label on this pod, on or off.
PutLabel = Callable[[bool], Awaitable[None]]


@dataclass
class Sidecar:
    """An elector and the observers a test or the command may want to look at."""

    elector: Elector
    metrics: Metrics
    published: AppPublisher
    lock: LockCommand | None = None


def wire(
    settings: RunSettings,
    namespace: str,
    store: LeaseStore,
    log: Logger,
    *,
    clock: Clock | None = None,
    post_event: Post | None = None,
    put_label: PutLabel | None = None,
    pod_deleting: Callable[[float], Awaitable[bool]] | None = None,
    command: LockSettings | None = None,
    health_check: Check | None = None,
) -> Sidecar:
    clock = clock or Clock()
    identity, lease, timing = settings.identity, settings.lease, settings.timing
    metrics = Metrics(lease, offset=lambda: store.clock_offset, timing=timing)
    shared = Coordination(store, namespace, log, clock)
    mark = FirstTermMark(shared, lease, identity, clock, log, timing.lease_duration)
    membership = Membership(shared, lease, identity, clock, log)
    drain = Drain(log, settings.ack_file, on_end=metrics.drained)
    transfer = Transfer(drain, log)
    actions: dict[str, Action] = {
        "/drained": lambda asked: drain.acknowledge(asked.get("token")),
        "/transfer": lambda asked: transfer.request(asked.get("to")),
    }
    published = AppPublisher(settings.state_dir, settings.port, metrics.render, drain, log, actions)
    lock = None
    release = settings.release if settings.pod or settings.release != "auto" else "now"
    release_timing = ReleaseTiming(release, pod_deleting, drain, clock, log)
    observers: list[Observer] = [
        LogReport(log, lease, namespace, timing, offset=lambda: store.clock_offset),
        metrics,
        drain,  # before the publisher: a new term's state carries no old drain
        transfer,
        release_timing.asking,  # first of the shutdown's steps (driver.releasetiming)
    ]
    if put_label is not None and settings.label_pod:
        observers.append(LeaderLabel(put_label, settings.label_pod, log))
    if command is not None:
        lock = LockCommand(
            command.command, command.kill_grace, Path(settings.state_dir) / STATE_FILE, log
        )
        observers.append(lock)
    if (health := settings.health) is not None:
        if health_check is not None:  # given (tests drive the app's health by hand)
            check = health_check
        elif health.url is not None:
            check = http_check(health.url)
        else:
            assert health.file is not None  # one of the two (``settings._health``)
            check = file_check(health.file, health.file_age)
        app = AppHealth(check, health.policy, membership, drain, clock, log, metrics.judged)
        observers.append(app)
    observers += [
        release_timing,
        mark,
        membership,
        ExitSweep(store, shared, identity, clock, log, on_delete=metrics.count_swept),
    ]
    if post_event is not None:
        recorder = EventRecorder(
            post_event, lease, namespace, identity, log, clock.monotonic, clock.wall
        )
        observers.append(recorder)
    observers.append(published)
    elector = Elector(
        HandoffLock(LeaseLock(store, lease), membership, mark.first_term, timing.lease_duration),
        identity=identity,
        election=settings.election,
        lease=lease,
        namespace=namespace,
        timing=timing,
        observers=observers,
        log=log,
        clock=clock,
    )
    return Sidecar(elector, metrics, published, lock)
