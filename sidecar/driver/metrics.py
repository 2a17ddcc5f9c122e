"""The sidecar's metrics: counted from what the elector tells its observers, served on ``/metrics``.

``leader_election_master_status`` keeps client-go's name so existing
dashboards and alerts work unchanged; the rest are ``grelmicro_sidecar_*``
(contract §4). Every value is updated by an observer callback, never by
reaching into the election.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from ..core.election import Event
from ..kube.skew import ClockOffset
from ..publish.exposition import Exposition, Histogram
from .observer import Call, Observer, View

RENEW_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics(Observer):
    def __init__(self, lease: str, offset: Callable[[], ClockOffset | None] = lambda: None):
        self.lease = lease
        self.offset = offset
        self.leader = False
        self.acquisitions = 0
        self.lease_transitions = 0
        self.renews = Histogram(RENEW_BUCKETS)
        self.api_errors: Counter[str] = Counter()
        self.swept = 0
        #: This node's clock minus the API server's, once measured.
        self.clock_skew: float | None = None

    def on_state(self, view: View) -> None:
        self.leader = view.state.is_leader
        if view.record is not None:
            self.lease_transitions = view.record.transitions

    def on_event(self, event: Event, view: View) -> None:
        if event.kind == "leading":
            self.acquisitions += 1

    def on_call(self, call: Call) -> None:
        if call.error is not None:
            self.api_errors[str(call.error.status)] += 1
        elif call.kind == "renew":
            self.renews.observe(call.seconds)
        offset = self.offset()
        if offset is not None:
            self.clock_skew = offset.estimate

    def count_swept(self) -> None:
        self.swept += 1

    def render(self) -> str:
        name = {"name": self.lease}
        out = Exposition()
        out.family(
            "gauge",
            "leader_election_master_status",
            "Whether this candidate leads (1) or not (0).",
            [(name, int(self.leader))],
        )
        out.family(
            "counter",
            "grelmicro_sidecar_leader_acquisitions_total",
            "Times this candidate became leader.",
            [(name, self.acquisitions)],
        )
        out.family(
            "gauge",
            "grelmicro_sidecar_lease_transitions",
            "leaseTransitions of the Lease as last seen.",
            [(name, self.lease_transitions)],
        )
        out.histogram(
            "grelmicro_sidecar_renew_duration_seconds",
            "Latency of successful Lease writes by the leader.",
            self.renews,
            name,
        )
        out.family(
            "counter",
            "grelmicro_sidecar_api_errors_total",
            "Failed API requests, by HTTP status (0: no answer).",
            [({**name, "code": code}, n) for code, n in sorted(self.api_errors.items())],
        )
        out.family(
            "counter",
            "grelmicro_sidecar_swept_leases_total",
            "Expired managed Leases deleted by the sweep.",
            [(name, self.swept)],
        )
        skew = math.nan if self.clock_skew is None else round(self.clock_skew, 3)
        out.family(
            "gauge",
            "grelmicro_sidecar_clock_skew_seconds",
            "This node's wall clock minus the API server's (its Date header; about 1 s resolution).",
            [(name, skew)],
        )
        return out.text()
