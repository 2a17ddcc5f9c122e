"""The shards section's accounting: pure functions of what ``bench.shards`` read (no I/O).

``bench.shards`` polls what each pod's app acts on and reads the audit log;
this module turns those readings into moves, gaps, balance and requests per
shard per minute, and the Markdown table, so they can be tested without a
cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .figures import ms, summary
from .harness import AuditRequest

READS = ("get", "list")
WRITES = ("create", "update", "patch", "delete")


class Tracker:
    """What the apps act on, snapshot after snapshot: each shard's owner, every return of a
    shard to an owner after a stretch with none (a move, with its gap), and every instant a
    shard was acted on by two apps at once (``tests/sidecar/test_shards.py``'s ``Apps``)."""

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self.owner: dict[int, str | None] = {}
        self.ownerless_since: dict[int, tuple[float, str]] = {}
        #: Each move: shard, last owner, new owner, seconds unowned, when it ended (wall).
        self.moves: list[dict[str, Any]] = []
        self.twice = 0

    def observe(self, now: float, seen: Mapping[int, Sequence[str]]) -> None:
        self.twice += sum(1 for who in seen.values() if len(who) > 1)
        for shard in range(self.shards):
            owners = seen.get(shard)
            who = owners[0] if owners else None
            last = self.owner.get(shard)
            if who is None and last is not None:
                self.ownerless_since[shard] = (now, last)
            if who is not None and shard in self.ownerless_since:
                since, before = self.ownerless_since.pop(shard)
                self._move(shard, before, who, now - since, now)
            elif who is not None and last is not None and who != last:
                self._move(shard, last, who, 0.0, now)  # seen in one step
            self.owner[shard] = who

    def _move(self, shard: int, before: str, after: str, gap: float, at: float) -> None:
        self.moves.append({"shard": shard, "from": before, "to": after, "gap": gap, "at": at})

    def owned(self) -> bool:
        return all(self.owner.get(s) is not None for s in range(self.shards))


def balance(owner: Mapping[int, str | None], pods: Iterable[str]) -> dict[str, int]:
    """Shards per pod, every pod named (0 for one that owns none)."""
    counts = Counter(who for who in owner.values() if who is not None)
    return {p: counts.get(p, 0) for p in pods}


def balanced(counts: Mapping[str, int], shards: int) -> bool:
    """Every pod owns ⌊N/P⌋ or ⌈N/P⌉ shards and every shard is owned."""
    values = list(counts.values())
    return bool(values) and sum(values) == shards and max(values) - min(values) <= 1


def moved(before: Mapping[int, str | None], after: Mapping[int, str | None]) -> list[int]:
    """The shards whose owner differs between two snapshots."""
    return sorted(s for s in set(before) | set(after) if before.get(s) != after.get(s))


def kind(req: AuditRequest, lease: str) -> str:
    """What a request is about: a shard's Lease, a member's heartbeat Lease, a list or watch
    of Leases (no name), anything else."""
    if "/leases" not in req.uri:
        return "other"
    if req.name.startswith(f"{lease}-shard-"):
        return "shard"
    if req.name.startswith(f"{lease}-member-"):
        return "member"
    return "lease list/watch" if not req.name else "other lease"


def steady(
    reqs: Iterable[AuditRequest],
    users: Sequence[str],
    start: float,
    end: float,
    shards: int,
    lease: str,
) -> dict[str, Any]:
    """Requests received in [start, end) by ``users``, per shard per minute by class, Lease
    writes per minute by kind, and the watches open across the window."""
    minutes = (end - start) / 60
    verbs: Counter[str] = Counter()
    writes: Counter[str] = Counter()
    open_watches = 0
    for r in reqs:
        if r.user not in users:
            continue
        if start <= r.received < end:
            verbs[r.verb] += 1
            if r.verb in WRITES and kind(r, lease) in ("shard", "member"):
                writes[kind(r, lease)] += 1
        elif (
            r.verb == "watch"
            and r.received < start
            and (r.completed is None or r.completed > start)
        ):
            open_watches += 1
    reads = sum(verbs[v] for v in READS)
    wr = sum(verbs[v] for v in WRITES)

    def per_shard(count: float) -> float:
        return round(count / shards / minutes, 2)

    return {
        "seconds": end - start,
        "verbs": dict(verbs),
        "per_shard_per_minute": {
            "all": per_shard(sum(verbs.values())),
            "reads": per_shard(reads),
            "writes": per_shard(wr),
            "watches": per_shard(verbs["watch"]),
        },
        "watches_opened": verbs["watch"],
        "watches_open_across": open_watches,
        "lease_writes_per_minute": {k: round(writes[k] / minutes, 1) for k in ("shard", "member")},
    }


def per_move(
    reqs: Iterable[AuditRequest],
    users: Sequence[str],
    moves: Sequence[Mapping[str, Any]],
    since: float,
    lease: str,
    after: float = 1.0,
) -> list[dict[str, int]]:
    """For each move, the requests on its shard's Lease from the event (``since``) until
    ``after`` seconds past the move's end, by class (a renewal falling in that span counts)."""
    reqs = [r for r in reqs if r.user in users]
    out = []
    for m in moves:
        name = f"{lease}-shard-{m['shard']}"
        on = [r for r in reqs if r.name == name and since <= r.received < m["at"] + after]
        out.append(
            {
                "writes": sum(1 for r in on if r.verb in WRITES),
                "reads": sum(1 for r in on if r.verb in READS),
                "conflicts": sum(1 for r in on if r.code == 409),
            }
        )
    return out


def member_writes(
    reqs: Iterable[AuditRequest], users: Sequence[str], start: float, end: float, lease: str
) -> int:
    """Writes on the members' heartbeat Leases in [start, end)."""
    return sum(
        1
        for r in reqs
        if r.user in users
        and start <= r.received < end
        and r.verb in WRITES
        and kind(r, lease) == "member"
    )


# ---- Markdown -------------------------------------------------------------------
def _counts(c: Mapping[str, int] | None) -> str:
    return "/".join(str(v) for v in sorted((c or {}).values(), reverse=True)) or "–"


def _each(values: Sequence[str]) -> str:
    """One cell for several events: the value once when every event gave it, else each."""
    if not values:
        return "–"
    return f"{values[0]} (each)" if len(values) > 1 and len(set(values)) == 1 else ", ".join(values)


def gaps(events: Sequence[Mapping[str, Any]]) -> list[float]:
    return [m["gap"] for e in events for m in e.get("moves") or []]


def _gaps(events: Sequence[Mapping[str, Any]]) -> str:
    s = summary(gaps(events))
    return f"{ms(s['p50'])} / {ms(s['max'])} (n = {s['n']})" if s.get("n") else "– (no move)"


def _rounds(sh: Mapping[str, Any]) -> int:
    """How many scale rounds the run made (3 → 4 → 3 pods each)."""
    return max((len(b.get("scale_up") or []) for b in (sh.get("impls") or {}).values()), default=0)


def _span(values: Sequence[float] | None) -> str:
    """Lowest to highest, or one value."""
    if not values:
        return "–"
    low, high = min(values), max(values)
    return f"{low:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f}–{high:.1f}"


def _per_move(events: Sequence[Mapping[str, Any]], key: str) -> str:
    values = sorted(r[key] for e in events for r in e.get("requests_per_move") or [])
    return f"{values[len(values) // 2]} / {values[-1]}" if values else "–"


def rows(sh: Mapping[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """The table's rows: a label and, per implementation, its cell."""
    impls: Mapping[str, Mapping[str, Any]] = sh.get("impls") or {}
    p = sh.get("pods")

    def row(label: str, cell: Any) -> tuple[str, dict[str, str]]:
        return label, {k: str(cell(b)) for k, b in impls.items()}

    def st(b: Mapping[str, Any], key: str) -> float:
        return float(b["steady"]["per_shard_per_minute"][key])

    def lw(b: Mapping[str, Any]) -> str:
        w = b["steady"]["lease_writes_per_minute"]
        heart = f" + {w['member']:g} heartbeats" if w.get("member") else ""
        return f"{w['shard'] + w['member']:g} ({w['shard']:g} shard Leases{heart})"

    def ups(b: Mapping[str, Any]) -> list[dict[str, Any]]:
        return list(b["scale_up"])

    def downs(b: Mapping[str, Any]) -> list[dict[str, Any]]:
        return list(b["scale_down"])

    up, down = f"{p} → {p + 1 if p else '?'} pods", f"{p + 1 if p else '?'} → {p} pods"
    return [
        row("steady: API requests per shard per minute, all", lambda b: f"{st(b, 'all'):g}"),
        row("steady: reads (get, list) per shard per minute", lambda b: f"{st(b, 'reads'):g}"),
        row("steady: writes per shard per minute", lambda b: f"{st(b, 'writes'):g}"),
        row(
            "steady: watches (re)opened per shard per minute; watches open across the window",
            lambda b: f"{st(b, 'watches'):g}; {b['steady']['watches_open_across']}",
        ),
        row("steady: Lease writes per minute, all pods", lw),
        row("steady: owner changes in the window", lambda b: b["steady_owner_changes"]),
        row(f"shards per pod, {p} pods at start", lambda b: _counts(b["balance_start"])),
        row(
            f"{up}: moves per event",
            lambda b: _each([str(e["moved_count"]) for e in ups(b)]),
        ),
        row(f"{up}: gap per move p50 / max (apps' view)", lambda b: _gaps(ups(b))),
        row(
            f"{up}: shards per pod after",
            lambda b: _each([_counts(e["balance"]) for e in ups(b)]),
        ),
        row(
            f"{down} (SIGTERM to the pod owning most): its shards / moves",
            lambda b: _each([f"{e['stopped_had']}/{e['moved_count']}" for e in downs(b)]),
        ),
        row(f"{down}: gap per move p50 / max (apps' view)", lambda b: _gaps(downs(b))),
        row(
            f"{down}: shards per pod after",
            lambda b: _each([_counts(e["balance"]) for e in downs(b)]),
        ),
        row(
            "per move: writes on its shard's Lease, p50 / max",
            lambda b: _per_move([*ups(b), *downs(b)], "writes"),
        ),
        row(
            "per move: reads of its shard's Lease, p50 / max",
            lambda b: _per_move([*ups(b), *downs(b)], "reads"),
        ),
        row(
            "per move: 409s on its shard's Lease, in all",
            lambda b: sum(
                r["conflicts"] for e in [*ups(b), *downs(b)] for r in e["requests_per_move"]
            ),
        ),
        row(
            f"heartbeat Lease writes in each event's {sh.get('event_seconds', 20):g} s, "
            f"{up} / {down}",
            lambda b: (
                f"{_each([str(e['member_writes']) for e in ups(b)])} / "
                f"{_each([str(e['member_writes']) for e in downs(b)])}"
            ),
        ),
        row(
            f"RSS per pod process (MiB), after the steady window / after the {_rounds(sh)} rounds",
            lambda b: f"{_span(b.get('rss_steady'))} / {_span(b.get('rss_after'))}",
        ),
        row("instants a shard was acted on by two apps", lambda b: b["twice"]),
        row("drains acknowledged by the apps", lambda b: b["acked"]),
    ]


def markdown(sh: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    impls = list((sh.get("impls") or {}).keys())
    rounds = _rounds(sh)
    out = [
        f"## 5d. Shards: {sh['shards']} shards over {sh['pods']} pods, then "
        f"{sh['pods'] + 1} and back, {rounds} times\n",
        f"grelmicro-sidecar `run --shards={sh['shards']}` (one process per pod, an app thread "
        "that acts on a shard while its state entry says `is_leader` with `valid_until` ahead "
        f"and acknowledges each drain) beside client-go with {sh['shards']} electors per pod "
        "process (`bench/peers/clientgo --candidates`, one Lease `leader-<election>-shard-<i>` "
        f"each), at once, {sh['timings']}. Steady window {sh['window_seconds']:.0f} s; requests "
        "from the audit log, per pod's certificate. client-go does not rebalance: a new pod's "
        "electors only follow, and a stopped pod's shards go to whichever elector polls first. "
        "See `bench/README.md` for each row.\n",
        "| | " + " | ".join(labels.get(k, k) for k in impls) + " |",
        "|---|" + "---|" * len(impls),
    ]
    for label, cells in rows(sh):
        out.append(f"| {label} | " + " | ".join(cells.get(k, "–") for k in impls) + " |")
    out.append("")
    return "\n".join(out)
