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

from ..core.shards import SHARD_LABEL, shard_lease
from ..driver.apppublisher import AppPublisher
from ..driver.drain import Drain
from ..driver.elector import Elector
from ..driver.events import EventRecorder
from ..driver.firstterm import FirstTermMark
from ..driver.handofflock import HandoffLock
from ..driver.health import AppHealth, Check, file_check, http_check
from ..driver.label import LeaderLabel
from ..driver.lockcommand import LockCommand
from ..driver.members import Members
from ..driver.membership import Membership
from ..driver.metrics import Metrics, render_all
from ..driver.observer import Observer
from ..driver.releasetiming import ReleaseTiming
from ..driver.report import LogReport
from ..driver.shardboard import ShardBoard, ShardRoster
from ..driver.shardset import Relay, ShardSet
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


@dataclass
class ShardedSidecar:
    """A sharded election's shards, run as one (``driver.shardset``), and what tells the app."""

    elector: ShardSet
    metrics: list[Metrics]
    published: AppPublisher
    lock: None = None


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
    handoff = HandoffLock(
        LeaseLock(store, lease), membership, mark.first_term, timing.lease_duration
    )
    elector = _elector(settings, namespace, handoff, observers, log, clock)
    return Sidecar(elector, metrics, published, lock)


def _elector(
    settings: RunSettings,
    namespace: str,
    lock: HandoffLock,
    observers: list[Observer],
    log: Logger,
    clock: Clock,
) -> Elector:
    """The elector of ``lock``'s Lease, with ``observers`` in their order."""
    return Elector(
        lock,
        identity=settings.identity,
        election=settings.election,
        lease=lock.name,
        namespace=namespace,
        timing=settings.timing,
        observers=observers,
        log=log,
        clock=clock,
    )


def wire_shards(
    settings: RunSettings,
    namespace: str,
    store: LeaseStore,
    log: Logger,
    *,
    clock: Clock | None = None,
    post_event: Post | None = None,
    pod_deleting: Callable[[float], Awaitable[bool]] | None = None,
) -> ShardedSidecar:
    """A sharded election (``--shards`` above 1): an elector per shard, each over its own
    Lease with the observers of a plain one that have a meaning per shard (the log, metrics,
    drain, release timing, first term, Events), tied together by the board (who stands for
    which) and told to the app as one state (``driver.shardset``)."""
    clock = clock or Clock()
    identity, timing, count = settings.identity, settings.timing, settings.shards
    offset = lambda: store.clock_offset  # noqa: E731
    shared = Coordination(store, namespace, log, clock)
    leases = [shard_lease(settings.lease, shard) for shard in range(count)]
    members = Members(store, settings.lease, identity, timing, clock, log)
    board = ShardBoard(count, members, log)
    metrics = [Metrics(lease, offset=offset, timing=timing) for lease in leases]
    drains = [Drain(log, on_end=m.drained) for m in metrics]
    actions: dict[str, Action] = {"/drained": lambda asked: _drained(drains, asked)}
    published = AppPublisher(
        settings.state_dir, settings.port, lambda: render_all(metrics), Drain(log), log, actions
    )
    electors: list[Elector] = []
    shards = ShardSet(electors, board, published)
    relay = Relay(shards)
    release = settings.release if settings.pod or settings.release != "auto" else "now"
    for shard, lease in enumerate(leases):
        mark = FirstTermMark(shared, lease, identity, clock, log, timing.lease_duration)
        drain = drains[shard]
        drain.on_notice = lambda: relay.on_state(shards.view())
        release_timing = ReleaseTiming(release, pod_deleting, drain, clock, log)
        observers: list[Observer] = [
            LogReport(log, lease, namespace, timing, offset=offset),
            metrics[shard],
            drain,
            release_timing.asking,
            board.seat(shard, drain),  # leaves the members before any shard's release
            release_timing,
            mark,
        ]
        if shard == 0:  # one sweep per pod
            observers.append(
                ExitSweep(store, shared, identity, clock, log, on_delete=metrics[0].count_swept)
            )
        if post_event is not None:
            observers.append(
                EventRecorder(
                    post_event, lease, namespace, identity, log, clock.monotonic, clock.wall
                )
            )
        observers.append(relay)
        roster = ShardRoster(board, shard)
        handoff = HandoffLock(
            LeaseLock(store, lease, {SHARD_LABEL: settings.lease}),
            roster,
            mark.first_term,
            timing.lease_duration,
        )
        electors.append(_elector(settings, namespace, handoff, observers, log, clock))
    return ShardedSidecar(shards, metrics, published)


def _drained(drains: list[Drain], asked: dict[str, str]) -> tuple[int, str]:
    """``POST /drained?shard=<i>&token=<t>``: the app ends the drain of shard i's last term."""
    which = asked.get("shard", "")
    if not (which.isascii() and which.isdigit() and int(which) < len(drains)):
        return 400, (
            f"name the shard and the term: POST /drained?shard=<0 to {len(drains) - 1}>"
            "&token=<fencing_token>"
        )
    return drains[int(which)].acknowledge(asked.get("token"))
