"""What one crowded election cost, from the audit log: per phase, per handover, per holder term.

Pure functions over ``harness.AuditRequest`` lists and the phases, terms and
handovers ``bench.crowd`` recorded, so they are unit-tested without a
cluster (``tests/unit/test_bench_crowd.py``); plus the RESULTS.md section and
the Targets rows.

- A *modification* of the election's Lease is a write to it that succeeded
  (create, update, patch or delete answered 2xx): each is one watch event to
  every watch open on that Lease at that instant (the sidecar watches it;
  client-go polls it with GETs and opens no watch).
- A *term* is one holder's leadership as its state file showed it, from its
  first "leading" file until it was signalled, stepped down, or the run ended.
  The holder's 409s are its updates refused with 409 inside its term (a
  follower's lost claims are not the holder's); its renew gaps are the
  intervals between its successful writes inside its term, which the renew
  deadline (10 s for both implementations) bounds.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the report imports this module; it must not load the harness
    from .harness import AuditRequest

WRITES = ("create", "update")
MODIFYING = ("create", "update", "patch", "delete")
#: Both implementations' renew deadline (the sidecar's default, client-go's 10s).
RENEW_DEADLINE = 10.0
#: An answer that took longer than this in the API server says it was overloaded.
SLOW = 1.0


@dataclass
class Term:
    user: str  # bench:<impl>:<identity>
    start: float  # the first "leading" state file (updated_at, wall clock)
    end: float  # signalled, stepped down, or the end of the run


@dataclass
class Phase:
    name: str  # "mass start", "steady", "handovers", "wave 1", ...
    start: float
    end: float


def unsignalled(at: float, sent: float | None) -> bool:
    """Whether a holder that stopped leading at ``at`` did so on its own: it was never sent
    SIGTERM, or it published the step-down before the signal was sent (a millisecond of
    slack: the harness stamps the signal just before sending it)."""
    return sent is None or at < sent - 0.001


def on_lease(reqs: Iterable[AuditRequest], lease: str) -> list[AuditRequest]:
    """The requests on Lease ``lease``: by the audit entry's object name, which a create (its
    URI names the collection) and a watch by field selector have too."""
    return [r for r in reqs if "/leases" in r.uri and r.name == lease]


def by_object(reqs: Iterable[AuditRequest], lease: str) -> dict[str, int]:
    """Every request by ``<verb> <object> <code>``: the election's Lease, the namespace's
    coordination Lease (``grelmicro-sidecar``), Events, anything else by resource."""

    def what(r: AuditRequest) -> str:
        path = r.uri.split("?")[0]
        if "/events" in path:
            return "Event"
        if "/leases" in path:
            return {lease: "Lease", "grelmicro-sidecar": "coordination"}.get(r.name, "Leases")
        return path.rsplit("/", 1)[-1] or path

    found = Counter(f"{r.verb} {what(r)} {r.code if r.code is not None else '-'}" for r in reqs)
    return dict(found.most_common())


def modified(r: AuditRequest) -> bool:
    return r.verb in MODIFYING and r.code is not None and 200 <= r.code < 300


class Watchers:
    """How many watches were open at an instant, from their audit entries (open: received,
    closed: completed; still open at the end of the log: never closed)."""

    def __init__(self, reqs: Iterable[AuditRequest]):
        watches = [r for r in reqs if r.verb == "watch"]
        self.opened = sorted(r.received for r in watches)
        self.closed = sorted(r.completed for r in watches if r.completed is not None)

    def at(self, t: float) -> int:
        return bisect.bisect_right(self.opened, t) - bisect.bisect_right(self.closed, t)


def phase_stats(
    lease_reqs: list[AuditRequest], phase: Phase, terms: list[Term], n: int
) -> dict[str, Any]:
    """Requests on the election's Lease in ``phase``: by verb and code, the modifications and
    the watch events they sent, the holder's 409s and its longest gap between renews."""
    watchers = Watchers(lease_reqs)
    inside = [r for r in lease_reqs if phase.start <= r.received < phase.end]
    mods = [r for r in inside if modified(r)]
    events = sum(watchers.at(r.completed or r.received) for r in mods)
    by = Counter(f"{r.verb} {r.code if r.code is not None else '-'}" for r in inside)
    seconds = max(phase.end - phase.start, 1e-9)
    return {
        "name": phase.name,
        "seconds": round(phase.end - phase.start, 1),
        "requests": dict(sorted(by.items())),
        "writes": sum(r.verb in WRITES for r in inside),
        "writes_409": sum(r.verb in WRITES and r.code == 409 for r in inside),
        "patches": sum(r.verb == "patch" for r in inside),
        "patches_ok": sum(r.verb == "patch" and modified(r) for r in inside),
        "patches_409": sum(r.verb == "patch" and r.code == 409 for r in inside),
        "gets": sum(r.verb in ("get", "list") for r in inside),
        "modifications": len(mods),
        "modifications_per_second": round(len(mods) / seconds, 2),
        "watch_events": events,
        "watch_events_per_candidate": round(events / n, 1) if n else 0.0,
        "holder_409s": holder_conflicts(lease_reqs, terms, phase.start, phase.end),
        "max_renew_gap": max_renew_gap(lease_reqs, terms, phase.start, phase.end),
    }


def holder_conflicts(
    lease_reqs: list[AuditRequest], terms: list[Term], start: float, end: float
) -> int:
    """Updates of the holder refused with 409, inside its term and [start, end)."""
    out = 0
    for t in terms:
        lo, hi = max(t.start, start), min(t.end, end)
        out += sum(
            r.user == t.user and r.verb == "update" and r.code == 409 and lo <= r.received < hi
            for r in lease_reqs
        )
    return out


def max_renew_gap(
    lease_reqs: list[AuditRequest], terms: list[Term], start: float, end: float
) -> float | None:
    """The longest interval, inside a term, from its start or a successful write of the
    holder to the next one (or to the term's end if that came first), for the terms that
    overlap [start, end); None if none does. A gap near ``RENEW_DEADLINE`` is a near miss."""
    gaps: list[float] = []
    for t in terms:
        if t.end <= start or t.start >= end:
            continue
        ok = sorted(
            r.received
            for r in lease_reqs
            if r.user == t.user and r.verb in WRITES and r.code == 200 and t.start <= r.received
            if r.received < t.end
        )
        marks = [t.start, *ok, t.end]
        gaps += [b - a for a, b in itertools.pairwise(marks)]
    return round(max(gaps), 3) if gaps else None


def stepdown_cause(lease_reqs: list[AuditRequest], user: str, at: float) -> dict[str, Any]:
    """The holder's requests on the Lease (watches aside) in the renew deadline before it
    stepped down at ``at``, by verb and answer, and what they point to: "conflicts" (409s:
    other writes of the Lease landed in its read-then-write window), "slow API server" (no
    answer, a 5xx, or more than ``SLOW`` seconds in the API server), "both", or "none seen"."""
    mine = [
        r
        for r in lease_reqs
        if r.user == user and r.verb != "watch" and at - RENEW_DEADLINE - 1.0 <= r.received <= at
    ]

    def answer(r: AuditRequest) -> str:
        if r.code is None or r.completed is None:
            return "no answer"
        if r.code >= 500:
            return "5xx"
        if r.code < 300:
            return "slow" if r.completed - r.received > SLOW else "ok"
        return str(r.code)

    seen = Counter(f"{r.verb} {answer(r)}" for r in mine)
    conflicts = sum(k for a, k in seen.items() if a.endswith(" 409"))
    slow = sum(k for a, k in seen.items() if a.endswith(("no answer", "5xx", "slow")))
    cause = {(True, True): "both", (True, False): "conflicts", (False, True): "slow API server"}
    return {
        "requests": dict(sorted(seen.items())),
        "cause": cause.get((conflicts > 0, slow > 0), "none seen"),
    }


def handover_stats(
    lease_reqs: list[AuditRequest], sent: float, led: float, successor: str
) -> dict[str, int]:
    """Writes to the Lease from the SIGTERM until 0.5 s after the successor led (the release
    and every claim; the successor's renews left out), their 409s, and the merge patches."""
    during = sorted(
        (r for r in lease_reqs if sent <= r.received < led + 0.5), key=lambda r: r.received
    )
    writes = [r for r in during if r.verb in WRITES]
    claim = next((r for r in writes if r.user == successor and r.code in (200, 201)), None)
    counted = [r for r in writes if r.user != successor or r is claim or r.code not in (200, 201)]
    return {
        "writes": len(counted),
        "conflicts": sum(r.code == 409 for r in counted),
        "patches": sum(r.verb == "patch" for r in during),
    }


# ---- report -----------------------------------------------------------------
def markdown(crowd: dict[str, Any], labels: dict[str, str]) -> str:
    """RESULTS.md's section for ``bench.crowd``: one row per implementation, then per phase."""
    from .figures import ms, summary

    keys = [k for k in crowd if isinstance(crowd.get(k), dict) and crowd[k].get("phases")]
    if not keys:
        gap = crowd.get("gap") if isinstance(crowd, dict) else None
        return f"## 5b. One election, many candidates\n\n**Gap:** {gap or 'not measured'}\n"
    n = crowd[keys[0]]["n"]
    lines = [
        f"## 5b. One election, {n} candidates: mass start, handovers, rollout waves\n",
        f"`bench/crowd.py`: {n} candidates of one election started at once, then graceful "
        "handovers (SIGTERM to the leader), then rollout waves (a quarter started and a "
        "quarter of the old ones SIGTERMed at once); one implementation after the other, "
        "everything stopped in between. From state files, logs, the audit log and the API "
        "server's /proc and metrics. Watch events: each successful write to the Lease times "
        "the watches open on it then.\n",
        "| | " + " | ".join(labels.get(k, k) for k in keys) + " |",
        "|---|" + "---|" * len(keys),
    ]

    def row(what: str, cell: Any) -> None:
        lines.append(f"| {what} | " + " | ".join(str(cell(crowd[k])) for k in keys) + " |")

    row("load average at start", lambda b: " / ".join(f"{x:.2f}" for x in b["loadavg"]))
    row("holder stepped down unsignalled", lambda b: _stepdowns(b))
    row("… their cause (the holder's requests in the 10 s before)", lambda b: _causes(b))
    row("… of which just before its SIGTERM (no graceful handover)", lambda b: _before(b))
    row("unexpected exits", lambda b: len(b["unexpected_exits"]))
    row("holder's 409s (all phases)", lambda b: sum(p["holder_409s"] for p in b["phases"]))
    row("longest renew gap in a term (deadline 10 s)", lambda b: _secs(b.get("max_renew_gap")))
    row(
        "handover p50 / max",
        lambda b: (
            f"{ms(summary(b['handover_seconds']).get('p50'))} / "
            f"{ms(summary(b['handover_seconds']).get('max'))} (n = {len(b['handover_seconds'])})"
        ),
    )
    row(
        "Lease writes / 409s / patches per handover, max",
        lambda b: "/".join(str(max((h[x] for h in b["handovers"]), default=0)) for x in _H),
    )
    row("mass start: first leader", lambda b: ms(b["mass_start"].get("first_leader")))
    row("mass start: every candidate settled", lambda b: _settled(b["mass_start"]))
    row("mass start: API server CPU s", lambda b: b["mass_start"]["cpu"]["kube-apiserver"])
    row("mass start: etcd CPU s", lambda b: b["mass_start"]["cpu"]["etcd"])
    row("mass start: candidates' CPU s", lambda b: b["mass_start"]["cpu"].get("candidates", "–"))
    row("steady: API server CPU s per minute", lambda b: b["steady"]["apiserver_cpu_per_min"])
    row("steady: requests/s (all candidates)", lambda b: b["steady"]["requests_per_second"])
    row(
        "RSS of all candidates after the mass start", lambda b: f"{b['rss_total_mb'] / 1024:.1f} GB"
    )
    lines.append("")
    lines += [
        "Per phase, the election's Lease (writes: create/update; patches: the sidecar's "
        "roster joins and leaves; watch events per candidate: watch events / candidates; "
        "API server CPU from /proc):\n",
        "| implementation | phase | s | writes (409) | patches (409) | GETs | modifications "
        "| watch events per candidate | holder 409s | longest renew gap | API server CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in keys:
        for p in crowd[k]["phases"]:
            lines.append(
                f"| {labels.get(k, k)} | {p['name']} | {p['seconds']:g} | {p['writes']} "
                f"({p['writes_409']}) | {p['patches']} ({p['patches_409']}) | {p['gets']} | "
                f"{p['modifications']} | {p['watch_events_per_candidate']:g} | "
                f"{p['holder_409s']} | {_secs(p['max_renew_gap'])} | "
                f"{p.get('cpu', {}).get('kube-apiserver', '–')} |"
            )
    lines.append("")
    return "\n".join(lines) + "\n"


_H = ("writes", "conflicts", "patches")


def _stepdowns(b: dict[str, Any]) -> str:
    seen = len(b["unsignalled_stepdowns"])
    logged = b.get("logged_stepdowns")
    return f"{seen}" + (f" (logs: {logged})" if logged is not None else "")


def _before(b: dict[str, Any]) -> str:
    late = b.get("after_a_stepdown_seconds") or []
    return f"{len(late)}" + (f" (successor led after {_secs(max(late))})" if late else "")


def _causes(b: dict[str, Any]) -> str:
    found = Counter(str(d.get("cause", "?")) for d in b["unsignalled_stepdowns"])
    return ", ".join(f"{k}: {v}" for k, v in sorted(found.items())) or "–"


def _settled(m: dict[str, Any]) -> str:
    from .figures import ms

    out = ms(m.get("settled"))
    return out if not m.get("unsettled") else f"{out} ({m['unsettled']} roster seats free)"


def _secs(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f} s"


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The Targets rows: the holder never steps down unsignalled, its renews meet no 409,
    the handover p50 at or below client-go's from the same run."""
    from .figures import ms, summary

    crowd = res.get("crowd") or {}
    ours, peer = crowd.get("sidecar") or {}, crowd.get("clientgo") or {}
    if not ours.get("phases"):
        return []
    n, out = ours["n"], list[dict[str, Any]]()

    def add(metric: str, target: str, measured: str, met: bool) -> None:
        out.append(
            {"id": "15", "metric": metric, "target": target, "measured": measured, "met": met}
        )

    downs = len(ours["unsignalled_stepdowns"])
    add(
        f"holder stepped down unsignalled, {n} candidates, one election",
        "never",
        f"{downs} (longest renew gap {_secs(ours.get('max_renew_gap'))})",
        downs == 0,
    )
    c = sum(p["holder_409s"] for p in ours["phases"])
    add(f"holder's renews refused (409), {n} candidates", "none", str(c), c == 0)
    if ours.get("handover_seconds") and peer.get("handover_seconds"):
        a, b = summary(ours["handover_seconds"])["p50"], summary(peer["handover_seconds"])["p50"]
        add(f"handover p50, {n} candidates", "≤ client-go's", f"{ms(a)} vs {ms(b)}", a <= b)
    return out


__all__ = [
    "Phase",
    "Term",
    "Watchers",
    "by_object",
    "handover_stats",
    "holder_conflicts",
    "markdown",
    "max_renew_gap",
    "modified",
    "on_lease",
    "phase_stats",
    "stepdown_cause",
    "targets",
    "unsignalled",
]
