"""Where a mass rollout's handover time goes: phases, requests by kind, CPU (``many_elections``).

Per election, from the SIGTERM: the old leader's "not leader" state file, its
release write (received and answered, from the audit log), the successor's
claim (received and answered) and the successor's first "leading" state file;
the medians and p99s of each. Every request of the implementation's
candidates received from the first SIGTERM until the last successor led plus
a second, by kind (verb, object, status). CPU: the stopping leaders' (from
``getrusage`` of the reaped children), the successors', the API server's and
etcd's over the same burst.
"""

from __future__ import annotations

import resource
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .figures import percentile
from .harness import AuditRequest, cpu_seconds


@dataclass
class Round:
    election: str
    sent: float
    leader: str  # user names (bench:<impl>:<identity>)
    successor: str
    led: float  # the successor's first "leading" state file
    stepdown: float | None  # the old leader's "not leader" state file


def kind(r: AuditRequest) -> str:
    """``<verb> <object> <code>``: the object is the election's Lease, the roster, an Event, ..."""
    path = r.uri.split("?")[0]
    if "/events" in path:
        what = "Event"
    elif path.endswith("/leases/grelmicro-sidecar"):
        what = "roster"
    elif "/leases/" in path:
        what = "Lease"
    elif path.endswith("/leases"):
        what = "Leases"
    else:
        what = path.rsplit("/", 1)[-1] or path
    return f"{r.verb} {what} {r.code if r.code is not None else '-'}"


def profile(rounds: list[Round], reqs: list[AuditRequest], until: float) -> dict[str, Any]:
    """The phases (seconds after each SIGTERM, p50 / p99) and the burst's requests by kind."""
    start = min((r.sent for r in rounds), default=0.0)
    burst = [r for r in reqs if start <= r.received < until]
    lease_writes = [
        r for r in burst if r.verb in ("update", "create", "patch") and "/leases/leader-" in r.uri
    ]
    phases: dict[str, list[float]] = {
        k: [] for k in ("stepdown", "release_sent", "release_done", "claim_sent", "claim_done")
    }
    phases["led"] = []
    for rd in rounds:
        lease = f"/leases/leader-{rd.election}"
        mine = [r for r in lease_writes if r.uri.split("?")[0].endswith(lease)]
        rel = min((r for r in mine if r.user == rd.leader), key=lambda r: r.received, default=None)
        claim = min(
            (r for r in mine if r.user == rd.successor and r.code in (200, 201)),
            key=lambda r: r.received,
            default=None,
        )
        if rd.stepdown is not None:
            phases["stepdown"].append(rd.stepdown - rd.sent)
        if rel is not None:
            phases["release_sent"].append(rel.received - rd.sent)
            if rel.completed is not None:
                phases["release_done"].append(rel.completed - rd.sent)
        if claim is not None:
            phases["claim_sent"].append(claim.received - rd.sent)
            if claim.completed is not None:
                phases["claim_done"].append(claim.completed - rd.sent)
        phases["led"].append(rd.led - rd.sent)
    return {
        "phases": {
            k: {"n": len(v), "p50": statistics.median(v), "p99": percentile(v, 99)}
            if v
            else {"n": 0}
            for k, v in phases.items()
        },
        "requests": dict(Counter(kind(r) for r in burst).most_common()),
        "seconds": round(until - start, 2),
    }


class Cpu:
    """CPU seconds over a burst: reaped children (the leaders), given live pids (the rest)."""

    def __init__(self, live: dict[str, list[int]], leaders: list[int]):
        self.live = live
        self._before = {k: [cpu_seconds(p) or 0.0 for p in pids] for k, pids in live.items()}
        self._leaders = sum(cpu_seconds(p) or 0.0 for p in leaders)
        self._children = _children()

    def after(self) -> dict[str, float]:
        """Call once every leader has been reaped (and no other child meanwhile)."""
        out = {"leaders": round(_children() - self._children - self._leaders, 2)}
        for k, pids in self.live.items():
            now = [cpu_seconds(p) for p in pids]
            out[k] = round(
                sum(a - b for a, b in zip(now, self._before[k], strict=True) if a is not None), 2
            )
        return out


def _children() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def plane_pids(plane: Any) -> dict[str, list[int]]:
    procs = getattr(plane, "procs", {}) or {}
    return {k: [p.pid] for k in ("kube-apiserver", "etcd") if (p := procs.get(k)) is not None}


PHASES = (
    ("stepdown", 'old leader published "not leader"'),
    ("release_sent", "its release write received"),
    ("release_done", "its release write answered"),
    ("claim_sent", "the successor's claim received"),
    ("claim_done", "the successor's claim answered"),
    ("led", 'the successor published "leading"'),
)


def markdown(many: dict[str, Any], labels: dict[str, str]) -> str:
    """The burst profile of each implementation, side by side."""
    keys = [k for k in many if (many[k] or {}).get("burst")]
    if not keys:
        return ""

    def cell(x: float | None) -> str:
        return "–" if x is None else f"{x * 1000:,.0f}"

    lines = [
        "Where the mass rollout's handover time goes, ms after each SIGTERM (p50 / p99), "
        "from state files and the audit log; then every request of the candidates from the "
        "first SIGTERM until the last successor led + 1 s, and CPU seconds over that burst:\n",
        "| phase | " + " | ".join(labels[k] for k in keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for key, what in PHASES:
        cells = []
        for k in keys:
            p = many[k]["burst"]["phases"].get(key) or {}
            cells.append(f"{cell(p.get('p50'))} / {cell(p.get('p99'))}" if p.get("n") else "–")
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    kinds = sorted({x for k in keys for x in many[k]["burst"]["requests"]})
    for x in kinds:
        lines.append(
            f"| `{x}` | "
            + " | ".join(str(many[k]["burst"]["requests"].get(x, 0)) for k in keys)
            + " |"
        )
    for what in ("leaders", "successors", "kube-apiserver", "etcd"):
        if any(what in (many[k]["burst"].get("cpu") or {}) for k in keys):
            cells = [str((many[k]["burst"].get("cpu") or {}).get(what, "–")) for k in keys]
            lines.append(f"| CPU s, {what} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines) + "\n"


__all__ = ["Cpu", "Round", "kind", "markdown", "plane_pids", "profile"]
