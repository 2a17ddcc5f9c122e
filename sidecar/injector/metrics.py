"""The injector's Prometheus text: admissions by outcome, their latency, the sweep.

Served on the plain health port (``/metrics``). The tests read
``grelmicro_injector_admissions_total`` to prove the API server did *not*
call the webhook for an unannotated pod.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
OUTCOMES = ("injected", "completed", "unchanged", "skipped", "denied", "error")


@dataclass
class InjectorMetrics:
    admissions: Counter[str] = field(default_factory=Counter)
    latency_count: int = 0
    latency_sum: float = 0.0
    latency_buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    swept: int = 0
    sweeps: Counter[str] = field(default_factory=Counter)
    rbac_created: int = 0

    def observe(self, outcome: str, seconds: float) -> None:
        self.admissions[outcome] += 1
        self.latency_count += 1
        self.latency_sum += seconds
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.latency_buckets[i] += 1

    def render(self) -> str:
        lines = [
            "# HELP grelmicro_injector_admissions_total Admission requests answered, by outcome.",
            "# TYPE grelmicro_injector_admissions_total counter",
        ]
        lines += [
            f'grelmicro_injector_admissions_total{{outcome="{o}"}} {self.admissions[o]}'
            for o in OUTCOMES
        ]
        lines += [
            "# HELP grelmicro_injector_admission_duration_seconds Time to answer an admission request.",
            "# TYPE grelmicro_injector_admission_duration_seconds histogram",
        ]
        lines += [
            f'grelmicro_injector_admission_duration_seconds_bucket{{le="{b}"}} {n}'
            for b, n in zip(BUCKETS, self.latency_buckets, strict=True)
        ]
        lines += [
            f'grelmicro_injector_admission_duration_seconds_bucket{{le="+Inf"}} {self.latency_count}',
            f"grelmicro_injector_admission_duration_seconds_sum {self.latency_sum:.6f}",
            f"grelmicro_injector_admission_duration_seconds_count {self.latency_count}",
            "# HELP grelmicro_injector_swept_leases_total Expired managed Leases deleted by the sweep.",
            "# TYPE grelmicro_injector_swept_leases_total counter",
            f"grelmicro_injector_swept_leases_total {self.swept}",
            "# HELP grelmicro_injector_sweeps_total Sweep runs, by result.",
            "# TYPE grelmicro_injector_sweeps_total counter",
            f'grelmicro_injector_sweeps_total{{result="ok"}} {self.sweeps["ok"]}',
            f'grelmicro_injector_sweeps_total{{result="error"}} {self.sweeps["error"]}',
            "# HELP grelmicro_injector_rbac_objects_created_total Roles and RoleBindings created by --auto-rbac.",
            "# TYPE grelmicro_injector_rbac_objects_created_total counter",
            f"grelmicro_injector_rbac_objects_created_total {self.rbac_created}",
        ]
        return "\n".join(lines) + "\n"
