"""The injector's ``/metrics`` (on the plain health port): admissions, their latency, sweeps, grants.

The tests read ``grelmicro_injector_admissions_total`` to prove the API server
did *not* call the webhook for an unannotated pod.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..publish.exposition import Exposition, Histogram

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
OUTCOMES = ("injected", "completed", "unchanged", "skipped", "denied", "error")


@dataclass
class InjectorMetrics:
    admissions: Counter[str] = field(default_factory=Counter)
    latency: Histogram = field(default_factory=lambda: Histogram(BUCKETS))
    swept: int = 0
    sweeps: Counter[str] = field(default_factory=Counter)
    rbac_created: int = 0

    def observe(self, outcome: str, seconds: float) -> None:
        self.admissions[outcome] += 1
        self.latency.observe(seconds)

    def count_swept(self, *_: object) -> None:
        """The sweep's ``on_delete``."""
        self.swept += 1

    def render(self) -> str:
        out = Exposition()
        # fmt: off
        out.family("counter", "grelmicro_injector_admissions_total",
                   "Admission requests answered, by outcome.",
                   [({"outcome": o}, self.admissions[o]) for o in OUTCOMES])
        out.histogram("grelmicro_injector_admission_duration_seconds",
                      "Time to answer an admission request.", [({}, self.latency)])
        out.family("counter", "grelmicro_injector_swept_leases_total",
                   "Expired managed Leases deleted by the sweep.", [({}, self.swept)])
        out.family("counter", "grelmicro_injector_sweeps_total", "Sweep runs, by result.",
                   [({"result": r}, self.sweeps[r]) for r in ("ok", "error")])
        out.family("counter", "grelmicro_injector_rbac_objects_created_total",
                   "Roles and RoleBindings created by --auto-rbac.", [({}, self.rbac_created)])
        # fmt: on
        return out.text()
