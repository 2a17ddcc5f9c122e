"""The sidecar's metrics: counted from what the elector tells its observers, served on ``/metrics``.

``leader_election_master_status`` keeps client-go's name so existing
dashboards and alerts work unchanged; the rest are ``grelmicro_sidecar_*``
(contract §4). Every value is updated by an observer callback, never by
reaching into the election.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable

from ..core.election import Event
from ..core.timing import Timing
from ..kube.skew import Offset
from ..publish.exposition import Exposition, Histogram, Labels
from .drain import ACKNOWLEDGED, DEADLINE
from .health import UNHEALTHY
from .observer import Call, Control, Observer, View
from .transfer import REASON as TRANSFER

#: The step-down reasons of a hand-over (``transfer``, ``health``).
HANDOVER_REASONS = (TRANSFER, UNHEALTHY)
RENEW_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _started_after_boot() -> float:
    """Seconds from boot to this process's start (``/proc/self/stat`` field 22, clock ticks)."""
    with open("/proc/self/stat") as stat:
        ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
    return ticks / os.sysconf("SC_CLK_TCK")


def process_start_time() -> float:
    """When this process started, in seconds since the epoch (``/proc``, as client libraries read it)."""
    try:
        with open("/proc/stat") as system:
            boot = next(float(line.split()[1]) for line in system if line.startswith("btime "))
        return boot + _started_after_boot()
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def process_age() -> float | None:
    """Seconds since this process started, to the clock tick (None where ``/proc`` is not)."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME) - _started_after_boot()
    except (OSError, ValueError, IndexError):
        return None


def _rounded(value: float | None) -> float:
    return round(value, 3) if value is not None and math.isfinite(value) else math.nan


class Metrics(Observer):
    def __init__(self, lease: str, offset: Offset = lambda: None, timing: Timing | None = None):
        self.lease, self.offset = lease, offset
        #: The election's timing, so alerts compare skew and silence with what it tolerates.
        self.timing = timing
        #: Seconds since this candidate last saw the Lease change, read at scrape time.
        self.lease_unchanged: Callable[[], float] = lambda: math.nan
        self.started = process_start_time()
        self.leader = False
        self.acquisitions = self.lease_transitions = self.swept = 0
        self.renews = Histogram(RENEW_BUCKETS)
        self.api_errors: Counter[str] = Counter()
        #: This node's clock minus the API server's, once measured.
        self.clock_skew: float | None = None
        #: The app's health as last judged (``health``); None: not followed, or no verdict yet.
        self.app_healthy: bool | None = None
        #: Leaderships handed over while the sidecar ran on, by why.
        self.handovers: Counter[str] = Counter({"transfer": 0, "app_unhealthy": 0})
        #: Drains the app was told of, by how they ended.
        self.drains: Counter[str] = Counter({ACKNOWLEDGED: 0, DEADLINE: 0})

    async def start(self, control: Control) -> None:
        self.lease_unchanged = lambda: control.view().unchanged_for

    def on_state(self, view: View) -> None:
        self.leader = view.state.is_leader
        if view.record is not None:
            self.lease_transitions = view.record.transitions

    def on_event(self, event: Event, view: View) -> None:
        self.acquisitions += event.kind == "leading"
        if event.kind == "stepped_down" and event.detail.startswith(HANDOVER_REASONS):
            self.handovers[
                "transfer" if event.detail.startswith(TRANSFER) else "app_unhealthy"
            ] += 1

    def on_call(self, call: Call) -> None:
        if call.error is not None:
            self.api_errors[str(call.error.status)] += 1
        elif call.kind == "renew":
            self.renews.observe(call.seconds)
        if (offset := self.offset()) is not None:
            self.clock_skew = offset.estimate

    def judged(self, healthy: bool) -> None:
        """The app's health was judged (``health.AppHealth``)."""
        self.app_healthy = healthy

    def drained(self, ended: str) -> None:
        """A drain ended (``drain.Drain``): acknowledged by the app, or at its deadline."""
        self.drains[ended] += 1

    def count_swept(self) -> None:
        self.swept += 1

    def render(self) -> str:
        return render_all([self])

    def families(self) -> list[Family]:
        """Every metric of this election: (kind, name, help, samples)."""
        name, timing = {"name": self.lease}, self.timing
        duration, deadline = (
            (timing.lease_duration, timing.renew_deadline) if timing else (math.nan,) * 2
        )
        errors: list[tuple[Labels, float]] = [
            ({**name, "code": code}, n) for code, n in sorted(self.api_errors.items())
        ]
        # fmt: off
        families: list[tuple[str, str, float | Histogram | list[tuple[Labels, float]], str]] = [
            ("gauge", "leader_election_master_status", int(self.leader),
             "Whether this candidate leads (1) or not (0)."),
            ("counter", "grelmicro_sidecar_leader_acquisitions_total", self.acquisitions,
             "Times this candidate became leader."),
            ("gauge", "grelmicro_sidecar_lease_transitions", self.lease_transitions,
             "leaseTransitions of the Lease as last seen."),
            ("histogram", "grelmicro_sidecar_renew_duration_seconds", self.renews,
             "Latency of successful Lease writes by the leader."),
            ("counter", "grelmicro_sidecar_api_errors_total", errors,
             "Failed API requests, by HTTP status (0: no answer)."),
            ("counter", "grelmicro_sidecar_swept_leases_total", self.swept,
             "Expired managed Leases deleted by the sweep."),
            ("gauge", "grelmicro_sidecar_clock_skew_seconds", _rounded(self.clock_skew),
             "This node's wall clock minus the API server's (its Date header; about 1 s resolution)."),
            ("gauge", "grelmicro_sidecar_lease_duration_seconds", duration,
             "The election's lease duration."),
            ("gauge", "grelmicro_sidecar_renew_deadline_seconds", deadline,
             "The election's renew deadline."),
            ("gauge", "grelmicro_sidecar_lease_unchanged_seconds", _rounded(self.lease_unchanged()),
             "Seconds since this candidate last saw the Lease change (a write, or found gone), "
             "on its monotonic clock; NaN before."),
            ("gauge", "grelmicro_sidecar_app_healthy",
             math.nan if self.app_healthy is None else int(self.app_healthy),
             "Whether the app's health check passes (1) or not (0); NaN when not followed or "
             "not judged yet."),
            ("counter", "grelmicro_sidecar_handovers_total",
             [({**name, "reason": why}, n) for why, n in sorted(self.handovers.items())],
             "Leaderships this candidate handed over while running on: a transfer, or its "
             "app unhealthy."),
            ("counter", "grelmicro_sidecar_drains_total",
             [({**name, "ended": how}, n) for how, n in sorted(self.drains.items())],
             "Drains the app was told of (a term ending while it may act), by how they ended: "
             "acknowledged by the app, or at the deadline."),
            ("gauge", "process_start_time_seconds", [({}, round(self.started, 3))],
             "Start time of the process since unix epoch in seconds."),
        ]
        # fmt: on
        out: list[Family] = []
        for kind, metric, value, help_ in families:
            samples: list[tuple[Labels, float | Histogram]] = (
                list(value) if isinstance(value, list) else [(name, value)]
            )
            out.append((kind, metric, help_, samples))
        return out


#: A metric family: (kind, name, help, [(labels, value or histogram)]).
Family = tuple[str, str, str, list[tuple[Labels, float | Histogram]]]
#: Families that describe the process, not an election: told once, however many elections.
PROCESS_WIDE = ("process_start_time_seconds",)


def render_all(elections: list[Metrics]) -> str:
    """One exposition of several elections' metrics (a sharded election's, one per shard),
    each family once with every election's samples."""
    out = Exposition()
    for column in zip(*(m.families() for m in elections), strict=True):
        kind, metric, help_, _ = column[0]
        rows = column[:1] if metric in PROCESS_WIDE else column
        samples = [sample for *_, taken in rows for sample in taken]
        if kind == "histogram":
            out.histogram(metric, help_, [(k, v) for k, v in samples if isinstance(v, Histogram)])
        else:
            out.family(
                kind, metric, help_, [(k, v) for k, v in samples if not isinstance(v, Histogram)]
            )
    return out.text()
