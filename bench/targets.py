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
