"""Targets measured against a peer from the same run: "at or below client-go's" (issue 28).

Each row compares the sidecar with client-go on one number from this run's
results (``python -m bench``), with the ratio, so a run on a loaded machine
judges both under the same load.
"""

from __future__ import annotations

from typing import Any

from .crowdstats import targets as crowd_targets
from .figures import ms, summary

Row = dict[str, Any]


def _row(metric: str, mine: float, theirs: float, extra: str = "") -> Row:
    ratio = mine / theirs if theirs else float("inf")
    return {
        "id": "15",
        "metric": metric,
        "target": "≤ client-go's",
        "measured": f"{ms(mine)} vs {ms(theirs)} ({ratio:.2f}×{extra})",
        "met": mine <= theirs,
    }


def against_clientgo(res: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    many = (res.get("scale") or {}).get("many_elections") or {}
    ours, peer = many.get("sidecar") or {}, many.get("clientgo") or {}
    if ours.get("handover_seconds") and peer.get("handover_seconds"):
        a, b = summary(ours["handover_seconds"]), summary(peer["handover_seconds"])
        what = f"mass rollout, {ours['elections']} elections × {ours['candidates_per_election']}"
        n = f"; n = {a['n']}, {b['n']}"
        out.append(_row(f"{what}, handover p50", a["p50"], b["p50"], n))
        out.append(_row(f"{what}, handover p99", a["p99"], b["p99"], n))
    first = res.get("first_leader") or {}
    if first.get("sidecar") and first.get("clientgo"):
        a, b = summary(first["sidecar"]), summary(first["clientgo"])
        out.append(
            _row(
                "3 fresh candidates → first leader, processes, p50",
                a["p50"],
                b["p50"],
                f"; n = {a['n']}, {b['n']}",
            )
        )
    out += crowd_targets(res)
    loads = (res.get("pods") or {}).get("workloads") or {}
    mine = (loads.get("sidecar") or {}).get("create_to_leader_s")
    theirs = (loads.get("clientgo") or {}).get("create_to_leader_s")
    if mine is not None and theirs is not None:
        out.append(_row("3 replicas created → first leader, real pods", mine, theirs))
    return out


def shards(res: dict[str, Any]) -> list[Row]:
    """Issue 40's rows, from the shards section (``bench.shards``): the sidecar's cost per
    shard against client-go's electors in the same run, its moves and its balance."""
    sh = res.get("shards") or {}
    ours = (sh.get("impls") or {}).get("sidecar") or {}
    peer = (sh.get("impls") or {}).get("clientgo") or {}
    if not ours.get("steady"):
        return []
    n, p = sh["shards"], sh["pods"]
    out: list[Row] = []

    def add(metric: str, target: str, measured: str, met: bool | None) -> None:
        out.append({"id": "40", "metric": f"{n} shards: {metric}", "target": target,
                    "measured": measured, "met": met})  # fmt: skip

    mine = ours["steady"]["per_shard_per_minute"]
    if peer.get("steady"):
        theirs = peer["steady"]["per_shard_per_minute"]
        for key, what in (("all", "API requests"), ("writes", "writes")):
            a, b = mine[key], theirs[key]
            add(
                f"{what} per shard per minute, steady, {p} pods",
                "≤ client-go's (one elector per shard)",
                f"{a:g} vs {b:g}" + (f" ({b / a:.1f}× fewer)" if a else ""),
                a <= b,
            )
    writes = ours["steady"]["lease_writes_per_minute"]
    total = writes["shard"] + writes["member"]
    minutes = ours["steady"]["seconds"] / 60
    # One renew loop per owned shard and one heartbeat per pod, every 5 s; one more of
    # each may land in a window whose edges fall between two renewals.
    bound = (n + p) * (ours["steady"]["seconds"] / 5 + 1) / minutes
    add(
        "Lease writes per minute, steady, all pods",
        f"bounded: ≤ (shards + pods) per renew interval, {bound:.0f}/min",
        f"{total:g} ({writes['shard']:g} shard Leases + {writes['member']:g} heartbeats)",
        total <= bound,
    )
    add(
        "renew writes per pod",
        "not one renew loop of full Lease PUTs per owned shard, if fewer are safe",
        f"one PUT per owned shard per 5 s + a heartbeat: {total:g}/min; one write per pod per "
        f"5 s would be {p * 60 // 5}/min (a per-pod lock, bench/README.md)",
        False,
    )
    ups, downs = ours.get("scale_up") or [], ours.get("scale_down") or []
    if ups:
        expect = n // (p + 1)  # the new pod's share, and nothing else
        got = [e["moved_count"] for e in ups]
        add(f"moves per scale {p} → {p + 1} pods", f"= {expect}",
            ", ".join(map(str, got)), all(g == expect for g in got))  # fmt: skip
    if downs:
        add(
            f"moves per scale {p + 1} → {p} pods (SIGTERM)",
            "= the stopped pod's shards",
            ", ".join(f"{e['moved_count']} of {e['stopped_had']}" for e in downs),
            all(e["moved_count"] == e["stopped_had"] for e in downs),
        )
    steps = [ours.get("balance_start") or {}, *(e.get("balance") or {} for e in [*ups, *downs])]
    seen = [c for c in steps if c]
    if seen:
        spread = sorted({"/".join(str(v) for v in sorted(c.values())) for c in seen})
        add(
            "shards per pod at each step",
            "⌊N/P⌋ or ⌈N/P⌉",
            f"{'; '.join(spread)} ({len(seen)} steps)",
            all(max(c.values()) - min(c.values()) <= 1 for c in seen),
        )
    mine_down = [m["gap"] for e in downs for m in e.get("moves") or []]
    theirs_down = [m["gap"] for e in peer.get("scale_down") or [] for m in e.get("moves") or []]
    if mine_down and theirs_down:
        a, b = summary(mine_down), summary(theirs_down)
        for stat in ("p50", "max"):
            add(
                f"gap per move, {p + 1} → {p} pods, {stat} (apps' view)",
                "≤ client-go's release-on-cancel failover",
                f"{ms(a[stat])} vs {ms(b[stat])} (n = {a['n']}, {b['n']})",
                a[stat] <= b[stat],
            )
    add("instants a shard was acted on by two apps", "0", str(ours["twice"]), ours["twice"] == 0)
    return out
