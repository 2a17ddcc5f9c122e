"""Prometheus text exposition, by hand: a few metric families need no client library.

``leader_election_master_status`` keeps client-go's name so existing
dashboards and alerts work unchanged.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

RENEW_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def process_start_time() -> float:
    """When this process started, in seconds since the epoch (``/proc``, as client libraries read it)."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/stat") as system:
            boot = next(float(line.split()[1]) for line in system if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


@dataclass
class Metrics:
    lease: str
    leader: bool = False
    leader_transitions: int = 0
    lease_transitions: int = 0
    renew_count: int = 0
    renew_sum: float = 0.0
    renew_buckets: list[int] = field(default_factory=lambda: [0] * len(RENEW_BUCKETS))
    api_errors: Counter[str] = field(default_factory=Counter)
    swept: int = 0
    clock_skew: float | None = None  # this node's clock minus the API server's, once measured
    #: The election's timing, so alerts compare skew and silence with what it tolerates.
    lease_duration: float = math.nan
    renew_deadline: float = math.nan
    #: Seconds since this candidate last saw the Lease change (None: not wired).
    lease_unchanged: Callable[[], float] | None = None
    started: float = field(default_factory=process_start_time)

    def observe_renew(self, seconds: float) -> None:
        self.renew_count += 1
        self.renew_sum += seconds
        for i, bound in enumerate(RENEW_BUCKETS):
            if seconds <= bound:
                self.renew_buckets[i] += 1

    def render(self) -> str:
        name = f'name="{_escape(self.lease)}"'
        lines = [
            "# HELP leader_election_master_status Whether this candidate leads (1) or not (0).",
            "# TYPE leader_election_master_status gauge",
            f"leader_election_master_status{{{name}}} {int(self.leader)}",
            "# HELP grelmicro_sidecar_leader_acquisitions_total Times this candidate became leader.",
            "# TYPE grelmicro_sidecar_leader_acquisitions_total counter",
            f"grelmicro_sidecar_leader_acquisitions_total{{{name}}} {self.leader_transitions}",
            "# HELP grelmicro_sidecar_lease_transitions leaseTransitions of the Lease as last seen.",
            "# TYPE grelmicro_sidecar_lease_transitions gauge",
            f"grelmicro_sidecar_lease_transitions{{{name}}} {self.lease_transitions}",
            "# HELP grelmicro_sidecar_renew_duration_seconds Latency of successful Lease writes by the leader.",
            "# TYPE grelmicro_sidecar_renew_duration_seconds histogram",
        ]
        for bound, count in zip(RENEW_BUCKETS, self.renew_buckets, strict=True):
            lines.append(
                f'grelmicro_sidecar_renew_duration_seconds_bucket{{{name},le="{bound}"}} {count}'
            )
        lines += [
            f'grelmicro_sidecar_renew_duration_seconds_bucket{{{name},le="+Inf"}} {self.renew_count}',
            f"grelmicro_sidecar_renew_duration_seconds_sum{{{name}}} {self.renew_sum:.6f}",
            f"grelmicro_sidecar_renew_duration_seconds_count{{{name}}} {self.renew_count}",
            "# HELP grelmicro_sidecar_api_errors_total Failed API requests, by HTTP status (0: no answer).",
            "# TYPE grelmicro_sidecar_api_errors_total counter",
        ]
        for code, count in sorted(self.api_errors.items()):
            lines.append(f'grelmicro_sidecar_api_errors_total{{{name},code="{code}"}} {count}')
        lines += [
            "# HELP grelmicro_sidecar_swept_leases_total Expired managed Leases deleted by the sweep.",
            "# TYPE grelmicro_sidecar_swept_leases_total counter",
            f"grelmicro_sidecar_swept_leases_total{{{name}}} {self.swept}",
        ]
        skew = "NaN" if self.clock_skew is None else f"{self.clock_skew:.3f}"  # NaN: not yet
        lines += [
            "# HELP grelmicro_sidecar_clock_skew_seconds This node's wall clock minus the "
            "API server's (its Date header; about 1 s resolution).",
            "# TYPE grelmicro_sidecar_clock_skew_seconds gauge",
            f"grelmicro_sidecar_clock_skew_seconds{{{name}}} {skew}",
            "# HELP grelmicro_sidecar_lease_duration_seconds The election's lease duration.",
            "# TYPE grelmicro_sidecar_lease_duration_seconds gauge",
            f"grelmicro_sidecar_lease_duration_seconds{{{name}}} {_number(self.lease_duration)}",
            "# HELP grelmicro_sidecar_renew_deadline_seconds The election's renew deadline.",
            "# TYPE grelmicro_sidecar_renew_deadline_seconds gauge",
            f"grelmicro_sidecar_renew_deadline_seconds{{{name}}} {_number(self.renew_deadline)}",
        ]
        unchanged = self.lease_unchanged() if self.lease_unchanged is not None else math.nan
        lines += [
            "# HELP grelmicro_sidecar_lease_unchanged_seconds Seconds since this candidate last "
            "saw the Lease change (a write, or found gone), on its monotonic clock; NaN before.",
            "# TYPE grelmicro_sidecar_lease_unchanged_seconds gauge",
            f"grelmicro_sidecar_lease_unchanged_seconds{{{name}}} {_number(unchanged)}",
            "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
            "# TYPE process_start_time_seconds gauge",
            f"process_start_time_seconds {self.started:.3f}",
        ]
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else "NaN"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
